package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/internal/lazyre"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/peeraddr"
)

// Glidein is the [glidein] section: what makes a manager a glide-in, a
// manager that another (its launcher) started as a job on a reserved host
// to serve one user (docs/glidein.md). `gridmgr glidein` writes it; an
// ordinary manager leaves it out (Name empty).
type Glidein struct {
	Name     string        // glidein.name: the glide-in group's name (its managers are NAME-INDEX)
	Launcher string        // glidein.launcher: the launching manager's peer id
	Owner    string        // glidein.owner: the user it serves
	Idle     time.Duration // glidein.idle: leave after this long with nothing to do
	RetireAt time.Time     // glidein.retire_at: from then on take no new reservation (zero: never)
}

// IsGlidein says whether the manager is a glide-in.
func (c *Config) IsGlidein() bool { return c.Glidein.Name != "" }

// GlideinNameRE is what a glide-in group's name is: a job name's
// characters, short enough that "glidein-NAME" is a job name and
// "NAME-INDEX" a manager name.
var GlideinNameRE = lazyre.New(`^[a-z][a-z0-9-]{0,39}$`)

// CheckGlideinName says what is wrong with a glide-in group's name ("":
// nothing).
func CheckGlideinName(s string) string {
	if !GlideinNameRE.MatchString(s) {
		return text.QuoteShort(s) + " is not a glide-in name: a lower-case letter, then lower-case letters, digits and -, at most 40 in all"
	}
	return ""
}

func parseTime(v any) (time.Time, string) {
	switch x := v.(type) {
	case time.Time:
		if strings.HasSuffix(x.Location().String(), "-local") { // TOML's datetime-local, date-local, time-local
			return time.Time{}, "a date-time without its zone: write it with Z or an offset, such as 2026-12-01T02:00:00Z"
		}
		return x, ""
	case string:
		if x == "" {
			return time.Time{}, ""
		}
		t, err := time.Parse(time.RFC3339, x)
		if err != nil {
			return time.Time{}, text.QuoteShort(x) + " is not an RFC 3339 time; write one such as \"2026-12-01T02:00:00Z\""
		}
		return t, ""
	}
	return time.Time{}, "expected an RFC 3339 time such as 2026-12-01T02:00:00Z, got " + describe(v)
}

// glideinKeys are the keys of [glidein].
func glideinKeys() []key {
	return []key{
		stringKey("glidein.name", func(c *Config) *string { return &c.Glidein.Name }, "", false, func(s string) string {
			if s == "" {
				return ""
			}
			return CheckGlideinName(s)
		}, "Set by gridmgr glidein: this manager is a glide-in of the group of this name, launched as a job by glidein.launcher for glidein.owner; it runs its applications in nested mode, inside its own sandbox. Default: \"\" (an ordinary manager)."),
		stringKey("glidein.launcher", func(c *Config) *string { return &c.Glidein.Launcher }, "", false, func(s string) string {
			if s == "" {
				return ""
			}
			if _, err := peeraddr.ParsePeerID(s); err != nil {
				return fmt.Sprintf("invalid peer id %s: %s", text.QuoteShort(s), peerIDProblem(s, err))
			}
			return ""
		}, "A glide-in's launcher: the peer id of the manager whose job it is."),
		stringKey("glidein.owner", func(c *Config) *string { return &c.Glidein.Owner }, "", false, func(s string) string {
			if len(s) > 128 || strings.IndexFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0 {
				return text.QuoteShort(s) + " is not a user name: at most 128 characters, no control characters"
			}
			return ""
		}, "A glide-in's owner: the user (request.user) whose jobs it runs."),
		durationKey("glidein.idle", func(c *Config) *time.Duration { return &c.Glidein.Idle }, 20*time.Minute, time.Second, 7*24*time.Hour, false,
			"A glide-in with no application instance and no reservation for this long (from its start, or since its last one ended) leaves: it stops, and its launcher's job for it completes, which restores its host."),
		scalar("glidein.retire_at", func(c *Config) *time.Time { return &c.Glidein.RetireAt }, time.Time{}, false, parseTime,
			func(time.Time) string { return "" }, func(t time.Time) string {
				if t.IsZero() {
					return `""`
				}
				return strconv.Quote(t.UTC().Format(time.RFC3339))
			}, "From this time (RFC 3339) a glide-in takes no new reservation, so that no job starts that its lease's end would kill, and it leaves as soon as it has nothing left to do. Default: none."),
	}
}

// glideinCrossCheck: the keys of a glide-in go together.
func glideinCrossCheck(c *Config, bad func(key, format string, args ...any)) {
	g := c.Glidein
	if g.Name == "" {
		for _, k := range []struct {
			key string
			set bool
		}{{"glidein.launcher", g.Launcher != ""}, {"glidein.owner", g.Owner != ""}, {"glidein.retire_at", !g.RetireAt.IsZero()}} {
			if k.set {
				bad(k.key, "only for a glide-in: set glidein.name too (gridmgr glidein writes the whole section)")
			}
		}
		return
	}
	if g.Launcher == "" {
		bad("glidein.launcher", "a glide-in must name its launcher's peer id")
	}
	if g.Owner == "" {
		bad("glidein.owner", "a glide-in must name the user it serves")
	}
}

func init() { table = append(table, glideinKeys()...) }
