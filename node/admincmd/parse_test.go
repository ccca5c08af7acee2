package admincmd

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestBuiltins(t *testing.T) {
	want := []struct {
		usage    string
		mutating bool
		min, max int
	}{
		{"help [COMMAND]", false, 0, 1},
		{"status [EVENTS]", false, 0, 1},
		{"relations", false, 0, 0},
		{"tree [DEPTH]", false, 0, 1},
		{"resources", false, 0, 0},
		{"reservations [all|mine]", false, 0, 1},
		{"add-superior MADDR", true, 1, 1},
		{"remove-superior PEER|NAME", true, 1, 1},
		{"add-inferior MADDR", true, 1, 1},
		{"remove-inferior PEER|NAME", true, 1, 1},
		{"reparent MADDR", true, 1, 1},
		{"set KEY VALUE", true, 2, 3},
		{"unset attribute|user NAME", true, 2, 2},
		{"drain", true, 0, 0},
		{"undrain", true, 0, 0},
		{"shutdown", true, 0, 0},
	}
	if len(Builtins) != len(want) {
		t.Fatalf("%d built-ins, want %d", len(Builtins), len(want))
	}
	for i, w := range want {
		s := &Builtins[i]
		if s.Usage() != w.usage || s.Mutating != w.mutating || s.MinArgs != w.min || s.MaxArgs != w.max {
			t.Errorf("Builtins[%d] = %q mutating=%v args %d..%d, want %q %v %d..%d",
				i, s.Usage(), s.Mutating, s.MinArgs, s.MaxArgs, w.usage, w.mutating, w.min, w.max)
		}
		if !validName(s.Name) || s.Summary == "" || s.Help == "" {
			t.Errorf("Builtins[%d] %q: bad name or empty summary/help", i, s.Name)
		}
		if strings.HasSuffix(s.Summary, ".") || strings.HasSuffix(s.Help, "\n") {
			t.Errorf("Builtins[%d] %q: summary ends in '.' or help in a newline", i, s.Name)
		}
		if got, ok := Lookup(s.Name); !ok || got != s {
			t.Errorf("Lookup(%q) = %p, %v, want &Builtins[%d]", s.Name, got, ok, i)
		}
	}
	if s, ok := Lookup("nope"); ok || s != nil {
		t.Errorf("Lookup(nope) = %v, %v", s, ok)
	}
	names := Names()
	if !slices.IsSorted(names) || len(names) != len(Builtins) || names[0] != "add-inferior" {
		t.Errorf("Names() = %q", names)
	}
	if len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("duplicate names: %q", names)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		name string
		args []string
		spec bool
	}{
		{"status", "status", nil, true},
		{"  remove-inferior gm162 ", "remove-inferior", []string{"gm162"}, true},
		{"add-superior /ip4/10.0.0.2/tcp/4001/p2p/12D3KooWabc", "add-superior",
			[]string{"/ip4/10.0.0.2/tcp/4001/p2p/12D3KooWabc"}, true},
		{"set heartbeat.interval 500ms", "set", []string{"heartbeat.interval", "500ms"}, true},
		{"set motd 'hello world'", "set", []string{"motd", "hello world"}, true},
		{"help", "help", nil, true},
		{"help set", "help", []string{"set"}, true},
		{"tree", "tree", nil, true},
		{"tree 3", "tree", []string{"3"}, true},
		{"reservations mine", "reservations", []string{"mine"}, true},
		{"'shutdown'", "shutdown", nil, true},
		{"drain", "drain", nil, true},
		// Not built in: no error, no Spec.
		{"frobnicate x 'y z'", "frobnicate", []string{"x", "y z"}, false},
		{"remove-inferor gm162", "remove-inferor", []string{"gm162"}, false},
		{"backup2", "backup2", nil, false},
		{"a-", "a-", nil, false},
	}
	for _, tt := range tests {
		cmd, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if cmd.Name != tt.name || !slices.Equal(cmd.Args, tt.args) || (cmd.Args == nil) != (tt.args == nil) {
			t.Errorf("Parse(%q) = %q %q, want %q %q", tt.in, cmd.Name, cmd.Args, tt.name, tt.args)
		}
		if tt.spec {
			if s, _ := Lookup(tt.name); cmd.Spec != s {
				t.Errorf("Parse(%q).Spec = %v, want the built-in", tt.in, cmd.Spec)
			}
		} else if cmd.Spec != nil {
			t.Errorf("Parse(%q).Spec = %v, want nil", tt.in, cmd.Spec)
		}
	}
}

func TestParseUsage(t *testing.T) {
	tests := []struct {
		in, msg string
		got     int
	}{
		{"remove-inferior", "remove-inferior takes 1 argument (PEER|NAME), got 0; usage: remove-inferior PEER|NAME", 0},
		{"remove-inferior a b", "remove-inferior takes 1 argument (PEER|NAME), got 2; usage: remove-inferior PEER|NAME", 2},
		{"add-superior", "add-superior takes 1 argument (MADDR), got 0; usage: add-superior MADDR", 0},
		{"status 10 all", "status takes at most 1 argument ([EVENTS]), got 2; usage: status [EVENTS]", 2},
		{"relations now", "relations takes no arguments, got 1; usage: relations", 1},
		{"shutdown ''", "shutdown takes no arguments, got 1; usage: shutdown", 1},
		{"set heartbeat.interval", "set takes 2 to 3 arguments (KEY VALUE), got 1; usage: set KEY VALUE", 1},
		{"set a b c d", "set takes 2 to 3 arguments (KEY VALUE), got 4; usage: set KEY VALUE", 4},
		{"help a b", "help takes at most 1 argument ([COMMAND]), got 2; usage: help [COMMAND]", 2},
		{"tree 1 2", "tree takes at most 1 argument ([DEPTH]), got 2; usage: tree [DEPTH]", 2},
	}
	for _, tt := range tests {
		cmd, err := Parse(tt.in)
		var ue *UsageError
		if !errors.Is(err, ErrUsage) || !errors.As(err, &ue) {
			t.Errorf("Parse(%q) = %+v, %v; want a *UsageError", tt.in, cmd, err)
			continue
		}
		if err.Error() != tt.msg || ue.Got != tt.got || ue.Name != strings.Fields(tt.in)[0] {
			t.Errorf("Parse(%q): %+v, want %q", tt.in, ue, tt.msg)
		}
	}
}

func TestCheckArgsRanges(t *testing.T) {
	tests := []struct {
		spec Spec
		got  int
		msg  string
	}{
		{Spec{Name: "x", Args: "A...", MinArgs: 1, MaxArgs: -1}, 0, "x takes at least 1 argument (A...), got 0; usage: x A..."},
		{Spec{Name: "x", Args: "A [B]", MinArgs: 1, MaxArgs: 2}, 3, "x takes 1 to 2 arguments (A [B]), got 3; usage: x A [B]"},
		{Spec{Name: "x", MinArgs: 2, MaxArgs: -1}, 1, "x takes at least 2 arguments, got 1; usage: x"},
	}
	for _, tt := range tests {
		err := checkArgs(&tt.spec, tt.got)
		if err == nil || err.Error() != tt.msg {
			t.Errorf("checkArgs(%+v, %d) = %v, want %q", tt.spec, tt.got, err, tt.msg)
		}
	}
	if err := checkArgs(&Spec{Name: "x", MinArgs: 1, MaxArgs: -1}, 100); err != nil {
		t.Errorf("unbounded: %v", err)
	}
}

func TestParseSyntax(t *testing.T) {
	tests := []struct {
		in  string
		pos int
		msg string
	}{
		{"Status", 0, `bad command name "Status" at byte 0: commands are lower-case; did you mean "status"?`},
		{"  REMOVE-INFERIOR x", 2, `bad command name "REMOVE-INFERIOR" at byte 2: commands are lower-case; did you mean "remove-inferior"?`},
		{"-x", 0, `bad command name "-x" at byte 0: it starts with '-'; start with a letter or digit`},
		{"--help", 0, `bad command name "--help" at byte 0: it starts with '-'; start with a letter or digit`},
		{"a_b", 0, `bad command name "a_b" at byte 0: '_' is not allowed; use lower-case letters, digits and '-'`},
		{"rm! x", 0, `bad command name "rm!" at byte 0: '!' is not allowed; use lower-case letters, digits and '-'`},
		{"\t'a b'", 1, `bad command name "a b" at byte 1: ' ' is not allowed; use lower-case letters, digits and '-'`},
		{"é", 0, `bad command name "é" at byte 0: 'é' is not allowed; use lower-case letters, digits and '-'`},
		{"/ip4/1.2.3.4", 0, `bad command name "/ip4/1.2.3.4" at byte 0: '/' is not allowed; use lower-case letters, digits and '-'`},
		{"'' x", 0, "empty command name at byte 0"},
		{" ''", 1, "empty command name at byte 1"},
		{strings.Repeat("A", 100), 0, `bad command name "` + strings.Repeat("A", 64) + `…" at byte 0: commands are lower-case; did you mean "` + strings.Repeat("a", 64) + `…"?`},
		// Errors of Words come through.
		{"", 0, "empty command"},
		{"set 'x", 4, "unterminated single quote opened at byte 4"},
		{"status\nshutdown", 6, "a newline at byte 6: one command per string"},
	}
	for _, tt := range tests {
		cmd, err := Parse(tt.in)
		var se *SyntaxError
		if !errors.Is(err, ErrSyntax) || !errors.As(err, &se) {
			t.Errorf("Parse(%q) = %+v, %v; want a *SyntaxError", tt.in, cmd, err)
			continue
		}
		if se.Pos != tt.pos || err.Error() != tt.msg {
			t.Errorf("Parse(%q): pos %d %q, want pos %d %q", tt.in, se.Pos, err, tt.pos, tt.msg)
		}
	}
}

func TestUnknown(t *testing.T) {
	const tail = " ('help' lists the commands)"
	tests := []struct{ name, suggest string }{
		{"remove-inferor", "remove-inferior"},
		{"remove-inferiors", "remove-inferior"},
		{"remvoe-superior", "remove-superior"}, // a swap is one edit
		{"hlep", "help"},
		{"stat", "status"},
		{"stauts", "status"},
		{"shutdwn", "shutdown"},
		{"tre", "tree"},
		{"relation", "relations"},
		{"reservation", "reservations"},
		{"add-superiors", "add-superior"},
		{"ndrain", "drain"}, // as close to "undrain": the earlier one wins
		{"sett", "set"},
		{"frobnicate", ""},
		{"x", ""},
		{"st", "set"},
		{"remove", ""},
		{"", ""},
		{"status", ""}, // never suggests the name itself
		{strings.Repeat("b", 1000), ""},
	}
	for _, tt := range tests {
		err := Unknown(tt.name)
		var ue *UnknownError
		if !errors.Is(err, ErrUnknown) || !errors.As(err, &ue) {
			t.Fatalf("Unknown(%q) = %v (%T)", tt.name, err, err)
		}
		if ue.Name != tt.name || ue.Suggestion != tt.suggest {
			t.Errorf("Unknown(%q) suggests %q, want %q", tt.name, ue.Suggestion, tt.suggest)
		}
	}
	if got, want := Unknown("remove-inferor").Error(),
		`unknown command "remove-inferor"; did you mean "remove-inferior"?`+tail; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if got, want := Unknown("frobnicate").Error(), `unknown command "frobnicate"`+tail; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if got := Unknown(strings.Repeat("b", 1000)).Error(); len(got) > 120 {
		t.Errorf("message of %d bytes for a long name", len(got))
	}
}

func TestValidPluginName(t *testing.T) {
	for _, name := range []string{"backup", "b", "x1", "0day", "a-b-", "gpu-stats", strings.Repeat("a", 64)} {
		if !ValidPluginName(name) {
			t.Errorf("ValidPluginName(%q) = false", name)
		}
	}
	for _, name := range []string{"", "-x", "A", "a_b", "a b", "a/b", "../x", "é", ".", strings.Repeat("a", 65),
		"help", "status", "set", "shutdown", "remove-inferior"} {
		if ValidPluginName(name) {
			t.Errorf("ValidPluginName(%q) = true", name)
		}
	}
	if PluginPrefix != "gridmgr-cmd-" {
		t.Errorf("PluginPrefix = %q", PluginPrefix)
	}
}
