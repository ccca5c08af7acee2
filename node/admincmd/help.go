package admincmd

import (
	"fmt"

	"slices"
	"strings"

	"github.com/gridmgr/gridmgr/config"
)

// Help answers the help command. args are the words after "help"; plugins
// names the plugin commands the manager has (names that are not
// ValidPluginName are left out).
//
// With no args it lists every built-in command (usage and summary, aligned,
// read-only ones first, then those that change the manager) and then the
// plugins, sorted. With one arg it explains that command: usage line and
// help text for a built-in, where the program lives for a plugin, and
// otherwise an *UnknownError (Unknown). More args is a *UsageError.
func Help(args []string, plugins []string) (string, error) {
	help, _ := Lookup("help")
	if err := checkArgs(help, len(args)); err != nil {
		return "", err
	}
	var valid []string
	for _, p := range plugins {
		if ValidPluginName(p) {
			valid = append(valid, p)
		}
	}
	slices.Sort(valid)
	valid = slices.Compact(valid)

	var b strings.Builder
	if len(args) == 1 {
		name := args[0]
		if spec, ok := Lookup(name); ok {
			b.WriteString("usage: " + spec.Usage() + "\n\n")
			b.WriteString(spec.Help + "\n")
			if name == "set" {
				b.WriteString("\nKEY is one of (default in brackets):\n")
				for _, k := range config.Settable() {
					fmt.Fprintf(&b, "  %s [%s]\n      %s\n", k.Path, strings.Trim(k.Default, `"`), k.Doc)
				}
			}
			if spec.Mutating {
				b.WriteString("\nIt changes the manager: only admins may run it.\n")
			}
			return b.String(), nil
		}
		if _, ok := slices.BinarySearch(valid, name); ok {
			b.WriteString(name + " is a plugin: the program " + PluginPrefix + name +
				" in plugins_dir, run with the words after the name as its arguments.\n" +
				"Only admins may run it.\n")
			return b.String(), nil
		}
		return "", unknown(name, valid)
	}

	width := 0
	for i := range Builtins {
		width = max(width, len(Builtins[i].Usage()))
	}
	group := func(title string, mutating bool) {
		b.WriteString(title + ":\n")
		for i := range Builtins {
			s := &Builtins[i]
			if s.Mutating != mutating {
				continue
			}
			u := s.Usage()
			b.WriteString("  " + u + strings.Repeat(" ", width-len(u)+2) + s.Summary + "\n")
		}
	}
	group("read-only", false)
	b.WriteString("\n")
	group("change the manager (admins only)", true)
	if len(valid) > 0 {
		b.WriteString("\nplugins (admins only):\n")
		for _, p := range valid {
			b.WriteString("  " + p + "\n")
		}
	}
	b.WriteString("\n'help COMMAND' explains one command.\n")
	return b.String(), nil
}
