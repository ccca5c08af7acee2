package admincmd

import (
	"errors"
	"strings"
	"testing"

	"github.com/gridmgr/gridmgr/config"
)

func TestHelpList(t *testing.T) {
	const head = `read-only:
  help [COMMAND]             list the commands, or explain one
  status [EVENTS]            show this manager's identity and state
  relations                  list the superiors and inferiors, and their liveness
  tree [DEPTH]               show the hierarchy below this manager
  resources                  show this manager's resources and how much is free
  reservations [all|mine]    list the reservations held at this manager

change the manager (admins only):
  add-superior MADDR         ask MADDR to take this manager as its inferior
  remove-superior PEER|NAME  leave that superior
  add-inferior MADDR         ask MADDR to take this manager as its superior
  remove-inferior PEER|NAME  tell that inferior to leave
  reparent MADDR             replace all superiors by MADDR
  set KEY VALUE              change a live setting, an attribute, or a user
  unset attribute|user NAME  remove an attribute or a user (kept across restarts)
  drain                      refuse new reservations, keep existing ones
  undrain                    take new reservations again
  shutdown                   stop this manager gracefully
`
	const foot = "\n'help COMMAND' explains one command.\n"

	got, err := Help(nil, nil)
	if err != nil || got != head+foot {
		t.Errorf("Help(nil, nil) = %v\n%s\nwant\n%s", err, got, head+foot)
	}
	// Plugins are sorted, deduplicated, and only valid names are shown.
	got, err = Help([]string{}, []string{"zeta", "backup", "status", "Bad", "-x", "backup", ""})
	want := head + "\nplugins (admins only):\n  backup\n  zeta\n" + foot
	if err != nil || got != want {
		t.Errorf("Help with plugins = %v\n%s\nwant\n%s", err, got, want)
	}
}

func TestHelpCommand(t *testing.T) {
	tests := []struct {
		args    []string
		plugins []string
		want    string
	}{
		{[]string{"status"}, nil, "usage: status [EVENTS]\n\n" +
			"Show this manager's peer id, name and addresses, how long it has been\n" +
			"up, whether it is draining, its relations, and its most recent events:\n" +
			"the last 10, or the last EVENTS (0: all it keeps).\n"},
		{[]string{"backup"}, []string{"backup"}, "backup is a plugin: the program gridmgr-cmd-backup in plugins_dir, " +
			"run with the words after the name as its arguments.\nOnly admins may run it.\n"},
		// A built-in wins over a plugin of the same name.
		{[]string{"drain"}, []string{"drain"}, "usage: drain\n\n" +
			"Refuse new reservations; the existing ones stay until they are\n" +
			"released or lapse. A drained manager offers itself to no query (so\n" +
			"gridmgr reserve never tries it); finding it by name still works.\n" +
			"'undrain' takes new reservations again.\n\n" +
			"It changes the manager: only admins may run it.\n"},
	}
	for _, tt := range tests {
		got, err := Help(tt.args, tt.plugins)
		if err != nil || got != tt.want {
			t.Errorf("Help(%q, %q) = %v\n%s\nwant\n%s", tt.args, tt.plugins, err, got, tt.want)
		}
	}
	for i := range Builtins {
		s := &Builtins[i]
		got, err := Help([]string{s.Name}, nil)
		if err != nil || got[:len("usage: "+s.Usage()+"\n")] != "usage: "+s.Usage()+"\n" {
			t.Errorf("help %s = %q, %v", s.Name, got, err)
		}
	}
}

func TestHelpErrors(t *testing.T) {
	_, err := Help([]string{"remove-inferor"}, nil)
	var ue *UnknownError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnknown) || ue.Suggestion != "remove-inferior" {
		t.Errorf("help remove-inferor: %v", err)
	}
	_, err = Help([]string{"bakup"}, []string{"backup"})
	if !errors.As(err, &ue) || ue.Suggestion != "backup" {
		t.Errorf("help bakup: %v, want a suggestion of the plugin", err)
	}
	_, err = Help([]string{"Status"}, nil)
	if !errors.Is(err, ErrUnknown) {
		t.Errorf("help Status: %v", err)
	}
	_, err = Help([]string{"a", "b"}, nil)
	if !errors.Is(err, ErrUsage) || err.Error() != "help takes at most 1 argument ([COMMAND]), got 2; usage: help [COMMAND]" {
		t.Errorf("help a b: %v", err)
	}
}

// help set lists every key set may change, with its default and meaning,
// from the config's one table of keys.
func TestHelpSetListsKeys(t *testing.T) {
	out, err := Help([]string{"set"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := config.Settable()
	if len(keys) < 7 {
		t.Fatalf("only %d settable keys", len(keys))
	}
	for _, k := range keys {
		if !strings.Contains(out, "  "+k.Path+" [") || !strings.Contains(out, k.Doc) {
			t.Errorf("help set does not list %s with its doc:\n%s", k.Path, out)
		}
	}
	if !strings.HasPrefix(out, "usage: set KEY VALUE\n") || !strings.HasSuffix(out, "only admins may run it.\n") {
		t.Errorf("help set:\n%s", out)
	}
}
