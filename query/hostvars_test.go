package query

import (
	"testing"
	"time"
)

// now, go_os/go_arch and the live host values: defined when known,
// undefined (no match) when not.
func TestTimeAndLiveValues(t *testing.T) {
	night := time.Date(2026, 11, 24, 23, 30, 0, 0, time.UTC)
	v := &Values{Name: "m", OS: "LINUX", Arch: "INTEL", GoOS: "linux", GoArch: "amd64", Now: night,
		Load1: 0.5, Load5: 0.4, Load15: 2.5, UptimeS: 86400, DiskFree: 50 * GiB, IdleS: 1200,
		Disks: map[string]int64{"scratch": 200 * GiB}}
	unknown := &Values{Name: "u", Load1: -1, Load5: -1, Load15: -1, UptimeS: -1, DiskFree: -1, IdleS: -1}
	for _, c := range []struct {
		src           string
		known, absent bool
	}{
		{`now.getHours("UTC") >= 22 || now.getHours("UTC") < 6`, true, false},
		{`now.getHours("Europe/Paris") == 0`, true, false}, // 23:30 UTC is 00:30 in Paris
		{`now > timestamp("2026-11-24T00:00:00Z")`, true, false},
		{`os == "LINUX" && go_os == "linux" && arch == "INTEL" && go_arch == "amd64"`, true, false},
		{`load1 < 1.0 && load15 > 2.0`, true, false},
		{`uptime_s >= 3600 && disk_free > 10 * GiB`, true, false},
		{`idle_s > 15.0 * 60.0`, true, false},
		{`disks.scratch >= 100 * GiB`, true, false},
		{`"scratch" in disks`, true, false},
		{`disks.home > 0`, false, false}, // a disk not named: missing, the requirement false
	} {
		p, err := Compile(Requirement, c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		if got := p.Match(v, nil); got != c.known {
			t.Errorf("%s on known values = %v", c.src, got)
		}
		if got := p.Match(unknown, nil); got != c.absent {
			t.Errorf("%s on unknown values = %v, want %v (undefined)", c.src, got, c.absent)
		}
	}
}
