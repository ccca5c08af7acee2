package config

import (
	"testing"
	"time"
)

// The [glidein] section as `gridmgr glidein` writes it parses, and every
// bad value is reported at its line and key, all at once.
func TestGlideinSection(t *testing.T) {
	good := "name = \"mine-0\"\n[glidein]\nname = \"mine\"\nlauncher = \"" + peer1 + "\"\nowner = \"peer:alice\"\nidle = \"3s\"\nretire_at = 2026-12-01T02:00:00Z\n"
	c, err := Parse(testFile, []byte(good), "h")
	if err != nil {
		t.Fatal(err)
	}
	want := Glidein{Name: "mine", Launcher: peer1, Owner: "peer:alice", Idle: 3 * time.Second, RetireAt: time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)}
	if !c.IsGlidein() || c.Glidein.Name != want.Name || c.Glidein.Launcher != want.Launcher || c.Glidein.Owner != want.Owner ||
		c.Glidein.Idle != want.Idle || !c.Glidein.RetireAt.Equal(want.RetireAt) {
		t.Errorf("got %+v, want %+v", c.Glidein, want)
	}
	// A string time is taken too; an ordinary manager is no glide-in.
	c, err = Parse(testFile, []byte("[glidein]\nname = \"g\"\nlauncher = \""+peer1+"\"\nowner = \"u\"\nretire_at = \"2026-12-01T03:00:00+01:00\"\n"), "h")
	if err != nil || !c.Glidein.RetireAt.Equal(want.RetireAt) || c.Glidein.Idle != 20*time.Minute {
		t.Errorf("string retire_at: %v %+v", err, c)
	}
	if c, err := Parse(testFile, []byte("name = \"x\"\n"), "h"); err != nil || c.IsGlidein() {
		t.Errorf("an ordinary manager: %v %+v", err, c)
	}

	for _, tc := range []struct {
		name, in string
		want     []wantErr
	}{
		{"bad values", "[glidein]\nname = \"Mine\"\nlauncher = \"nobody\"\nowner = \"a\\u0001\"\nidle = \"0s\"\nretire_at = \"tomorrow\"\n", []wantErr{
			{line: 2, key: "glidein.name", msg: `"Mine" is not a glide-in name`},
			{line: 3, key: "glidein.launcher", msg: `invalid peer id "nobody"`},
			{line: 4, key: "glidein.owner", msg: "is not a user name"},
			{line: 5, key: "glidein.idle", msg: "too short; the minimum is 1s"},
			{line: 6, key: "glidein.retire_at", msg: `"tomorrow" is not an RFC 3339 time`},
		}},
		{"wrong types", "[glidein]\nname = 3\nidle = 5\nretire_at = true\n", []wantErr{
			{line: 2, key: "glidein.name", msg: "expected a string, got integer 3"},
			{line: 3, key: "glidein.idle", msg: "expected a duration string"},
			{line: 4, key: "glidein.retire_at", msg: "expected an RFC 3339 time"},
		}},
		{"no zone", "[glidein]\nname = \"g\"\nlauncher = \"" + peer1 + "\"\nowner = \"u\"\nretire_at = 2026-12-01T02:00:00\n", []wantErr{
			{line: 5, key: "glidein.retire_at", msg: "without its zone"},
		}},
		{"unknown key", "[glidein]\nname = \"g\"\nlauncher = \"" + peer1 + "\"\nowner = \"u\"\nidel = \"3s\"\n", []wantErr{
			{line: 5, key: "glidein.idel", msg: `did you mean "glidein.idle"?`},
		}},
		{"launcher without a name", "[glidein]\nlauncher = \"" + peer1 + "\"\n", []wantErr{
			{line: 2, key: "glidein.launcher", msg: "only for a glide-in: set glidein.name too"},
		}},
		{"a name alone", "[glidein]\nname = \"g\"\n", []wantErr{
			{line: 1, key: "glidein.launcher", msg: "a glide-in must name its launcher's peer id"},
			{line: 1, key: "glidein.owner", msg: "a glide-in must name the user it serves"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(testFile, []byte(tc.in), "h")
			if c != nil {
				t.Errorf("got a Config with the error")
			}
			checkErrors(t, err, tc.want)
		})
	}
}

// A key given its zero value keeps it: jobs.enabled = false (which a
// glide-in's properties say) was turned back into the default true.
func TestGivenFalseStaysFalse(t *testing.T) {
	c, err := Parse(testFile, []byte("name = \"x\"\n[jobs]\nenabled = false\n"), "h")
	if err != nil || c.JobsEnabled {
		t.Fatalf("jobs.enabled = false: %v, enabled %v", err, c != nil && c.JobsEnabled)
	}
	if c, err := Parse(testFile, []byte("name = \"x\"\n"), "h"); err != nil || !c.JobsEnabled {
		t.Fatalf("jobs.enabled by default: %v", err)
	}
}
