package query

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// Variables is the one list of what expressions read: the CEL
// environment declares exactly it (and request), the package
// documentation and the README name every entry.
func TestVariablesAreTheSchema(t *testing.T) {
	var names []string
	for _, v := range Variables() {
		if v.Request {
			continue
		}
		names = append(names, v.Name)
		if _, err := Compile(Requirement, "has(attrs.x) || "+v.Name+" == "+v.Name); err != nil {
			t.Errorf("%s: %v", v.Name, err)
		}
		if v.Doc == "" || v.Type == "" {
			t.Errorf("%s: no doc or type", v.Name)
		}
	}
	for _, v := range Variables() {
		if v.Request {
			if _, err := Compile(Policy, v.Name+" == "+v.Name); err != nil {
				t.Errorf("%s: %v", v.Name, err)
			}
		}
	}
	units, _ := Units()
	want := append(append(slices.Clone(names), "request"), units...)
	slices.Sort(want)
	if got := Identifiers(); !slices.Equal(got, want) {
		t.Errorf("Identifiers() = %q\nwant %q", got, want)
	}
	for _, file := range []string{"doc.go", "../README.md"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range Variables() {
			if !regexp.MustCompile(`(^|[^a-z_.])` + regexp.QuoteMeta(v.Name) + `($|[^a-z_0-9])`).Match(data) {
				t.Errorf("%s does not mention %s (%s)", file, v.Name, v.Doc)
			}
		}
	}
}

// Show renders each variable as a person reads it; Listing gives every
// variable of the manager, map variables key by key.
func TestShowAndListing(t *testing.T) {
	v := sampleValues()
	v.Attrs = map[string]any{"zone": "eu-1", "rack-id": "r1"}
	v.Tokens = map[string]int64{"gpus": 2}
	v.Apps = map[string]AppCount{"ticker": {Instances: 2, Running: 1}}
	v.Now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v.Load1, v.Load5, v.Load15, v.UptimeS, v.DiskFree, v.IdleS = 0.5, -1, 2, 3600, 10*GiB, 90.5
	v.OwnerRank, v.OwnerRanked = 10, true
	for ref, want := range map[string]string{
		"name": "m1", "cpus": "16", "cpu_util": "0.250", "mem": "68719476736", "net_mbps": "1000",
		"attrs.zone": "eu-1", `attrs["rack-id"]`: "r1", "attrs.gpu": "missing", "tokens.gpus": "2",
		"apps.ticker": "instances=2 running=1", "disks.scratch": "missing",
		"now": "2026-01-02T03:04:05Z", "load1": "0.5", "load5": "unknown", "load15": "2",
		"uptime_s": "3600", "disk_free": "10737418240", "idle_s": "90.5", "owner_rank": "10",
		"nosuch": "", "request": "",
	} {
		if got := v.Show(ref); got != want {
			t.Errorf("Show(%s) = %q, want %q", ref, got, want)
		}
	}
	var keys []string
	for _, a := range v.Listing() {
		keys = append(keys, a.Key)
	}
	want := `name hostname os arch cpus cpus_free cpu_util mem mem_free net_mbps attrs["rack-id"] attrs.zone tokens.gpus apps.ticker now go_os go_arch load1 load5 load15 uptime_s disk_free disks idle_s owner_rank`
	if got := strings.Join(keys, " "); got != want {
		t.Errorf("Listing keys:\n got %s\nwant %s", got, want)
	}
	for _, v := range Variables() {
		if !v.Request && !slices.ContainsFunc(keys, func(k string) bool { x, ok := VarOf(k); return ok && x.Name == v.Name }) {
			t.Errorf("Listing lacks %s", v.Name)
		}
	}
}
