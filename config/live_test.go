package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/gridmgr/gridmgr/query"
)

// Every live value a query reads may be declared by the owner instead of
// measured: each has a key of [resources], and each such key names a live
// value.
func TestEveryLiveValueHasAKey(t *testing.T) {
	keyOf := map[string]string{}
	for _, k := range Keys() {
		if k.Overrides == "" {
			continue
		}
		v, ok := query.VarOf(k.Overrides)
		if !ok || !v.Live || v.Name != k.Overrides {
			t.Errorf("%s overrides %q, which is not a live value of the query schema", k.Path, k.Overrides)
		}
		if other, dup := keyOf[k.Overrides]; dup {
			t.Errorf("%s and %s both override %s", other, k.Path, k.Overrides)
		}
		keyOf[k.Overrides] = k.Path
		if !strings.HasPrefix(k.Path, "resources.") {
			t.Errorf("%s: the declarations of live values are in [resources]", k.Path)
		}
	}
	for _, v := range query.Variables() {
		if v.Live && keyOf[v.Name] == "" {
			t.Errorf("the live value %s (%s) has no key of the properties file to declare it", v.Name, v.Doc)
		}
	}
}

func TestLiveValueDeclarations(t *testing.T) {
	in := `name = "gm154"

[resources]
cpu_util = 0
load1 = 0.25
load5 = 1
load15 = 2.5
uptime_s = "48h"
disk_free = "500GiB"
idle_s = 1200

[resources.disks]
scratch = "100GiB"
empty = 0
`
	c := mustParse(t, testFile, in, "h")
	if c.CPUUtil == nil || *c.CPUUtil != 0 || c.Load1 == nil || *c.Load1 != 0.25 || *c.Load5 != 1 || *c.Load15 != 2.5 ||
		*c.UptimeS != 48*3600 || *c.DiskFree != 500<<30 || *c.IdleS != 1200 ||
		len(c.DisksFree) != 2 || c.DisksFree["scratch"] != 100<<30 || c.DisksFree["empty"] != 0 {
		t.Fatalf("declared live values: %+v", c)
	}
	// Absent: measured.
	d := mustParse(t, testFile, "[resources]\ncpus = 2\n", "h")
	if d.Load1 != nil || d.Load5 != nil || d.Load15 != nil || d.UptimeS != nil || d.DiskFree != nil || d.IdleS != nil || len(d.DisksFree) != 0 {
		t.Fatalf("nothing declared, yet: %+v", d)
	}
	if s := mustParse(t, testFile, "[resources]\nidle_s = \"20m\"\nuptime_s = 90\n", "h"); *s.IdleS != 1200 || *s.UptimeS != 90 {
		t.Fatalf("idle_s as a duration, uptime_s as seconds: %v %v", *s.IdleS, *s.UptimeS)
	}
	// Errors name the file, the line and the key.
	for _, bad := range []struct {
		in   string
		line int
		key  string
		msg  string
	}{
		{"[resources]\nload1 = -0.5\n", 2, "resources.load1", "out of range 0 to 1e+06"},
		{"[resources]\n\nload5 = \"high\"\n", 3, "resources.load5", `expected a number, got string "high"`},
		{"[resources]\nload15 = nan\n", 2, "resources.load15", "out of range"},
		{"[resources]\nuptime_s = 1.5\n", 2, "resources.uptime_s", "not a whole number of seconds"},
		{"[resources]\nuptime_s = \"-1h\"\n", 2, "resources.uptime_s", "out of range"},
		{"[resources]\nuptime_s = \"soon\"\n", 2, "resources.uptime_s", `"soon" is not a duration`},
		{"[resources]\ndisk_free = -1\n", 2, "resources.disk_free", "must not be negative"},
		{"[resources]\ndisk_free = \"lots\"\n", 2, "resources.disk_free", "invalid size"},
		{"[resources]\nidle_s = true\n", 2, "resources.idle_s", "expected a number of seconds"},
		{"[resources]\nidle_s = -3\n", 2, "resources.idle_s", "out of range"},
		{"[resources]\nidel_s = 3\n", 2, "resources.idel_s", `unknown key; did you mean "resources.idle_s"?`},
		{"[resources]\ndisks = 3\n", 2, "resources.disks", "expected a table"},
		{"[resources.disks]\nscratch = \"1TB\"\n\"a.b\" = 1\n", 3, `resources.disks."a.b"`, "not a valid disk name"},
		{"[resources.disks]\nscratch = \"big\"\n", 2, "resources.disks.scratch", "invalid size"},
	} {
		_, err := Parse(testFile, []byte(bad.in), "h")
		var es Errors
		if !errors.As(err, &es) || len(es) != 1 || es[0].File != testFile || es[0].Line != bad.line || es[0].Key != bad.key || !strings.Contains(es[0].Msg, bad.msg) {
			t.Errorf("%q: %v; want %s:%d: %s: …%s…", bad.in, err, testFile, bad.line, bad.key, bad.msg)
		}
	}
	// Validate holds a Config made in code to the same bounds.
	neg := -1.0
	e := Config{Name: "gm154", IdleS: &neg}
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "resources.idle_s") {
		t.Errorf("Validate of a negative idle_s: %v", err)
	}
}
