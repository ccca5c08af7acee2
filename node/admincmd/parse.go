package admincmd

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gridmgr/gridmgr/internal/text"
)

// PluginPrefix starts the file name of a plugin program: the plugin
// command "foo" is the program gridmgr-cmd-foo in plugins_dir.
const PluginPrefix = "gridmgr-cmd-"

// maxPluginName is the longest plugin command name.
const maxPluginName = 64

// Command is one parsed command string.
type Command struct {
	Name string   // the command name (the first word)
	Args []string // the words after the name; nil when there are none
	Spec *Spec    // the built-in command; nil when Name is not built in
}

// UsageError says that a built-in command got the wrong number of
// arguments.
type UsageError struct {
	Name string // the command
	Got  int    // how many arguments it got
	Msg  string // the whole message, usage line included
}

func (e *UsageError) Error() string { return e.Msg }

// Unwrap returns ErrUsage.
func (e *UsageError) Unwrap() error { return ErrUsage }

// UnknownError says that no command has that name.
type UnknownError struct {
	Name       string // the name asked for
	Suggestion string // the closest command name, or ""
}

func (e *UnknownError) Error() string {
	msg := "unknown command " + show(e.Name)
	if e.Suggestion != "" {
		msg += "; did you mean " + show(e.Suggestion) + "?"
	}
	return msg + " ('help' lists the commands)"
}

// Unwrap returns ErrUnknown.
func (e *UnknownError) Unwrap() error { return ErrUnknown }

// Parse splits line into words (Words) and reads the first as the command
// name, which may hold only lower-case letters, digits and '-' and must not
// start with '-' (else a *SyntaxError). For a built-in command it checks the
// number of arguments (else a *UsageError) and sets Spec. A name that is not
// built in is no error: Spec is nil, and the caller may look for a plugin
// of that name or reply with Unknown(name).
func Parse(line string) (Command, error) {
	words, err := Words(line)
	if err != nil {
		return Command{}, err
	}
	name := words[0]
	pos := len(line) - len(strings.TrimLeft(line, " \t")) // where the name starts
	if err := checkName(name, pos); err != nil {
		return Command{}, err
	}
	cmd := Command{Name: name}
	if len(words) > 1 {
		cmd.Args = words[1:]
	}
	spec, ok := Lookup(name)
	if !ok {
		return cmd, nil
	}
	if err := checkArgs(spec, len(cmd.Args)); err != nil {
		return Command{}, err
	}
	cmd.Spec = spec
	return cmd, nil
}

// checkName checks the command name that starts at byte pos of the line.
func checkName(name string, pos int) error {
	if name == "" {
		return syntaxErr(pos, "empty command name at byte %d", pos)
	}
	for i := 0; i < len(name); {
		r, n := utf8.DecodeRuneInString(name[i:])
		if !isNameByte(r) {
			if lower := strings.ToLower(name); lower != name && validName(lower) {
				return syntaxErr(pos, "bad command name %s at byte %d: commands are lower-case; did you mean %s?",
					show(name), pos, show(lower))
			}
			return syntaxErr(pos, "bad command name %s at byte %d: %q is not allowed; use lower-case letters, digits and '-'",
				show(name), pos, r)
		}
		i += n
	}
	if name[0] == '-' {
		return syntaxErr(pos, "bad command name %s at byte %d: it starts with '-'; start with a letter or digit",
			show(name), pos)
	}
	return nil
}

func isNameByte(r rune) bool {
	return (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-'
}

// validName: non-empty, [a-z0-9-] only, not starting with '-'.
func validName(name string) bool {
	if name == "" || name[0] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isNameByte(rune(name[i])) {
			return false
		}
	}
	return true
}

// checkArgs checks that spec may take got arguments.
func checkArgs(spec *Spec, got int) error {
	if got >= spec.MinArgs && (spec.MaxArgs < 0 || got <= spec.MaxArgs) {
		return nil
	}
	var takes string
	switch {
	case spec.MaxArgs == 0:
		takes = "no arguments"
	case spec.MinArgs == spec.MaxArgs:
		takes = plural(spec.MinArgs)
	case spec.MaxArgs < 0:
		takes = "at least " + plural(spec.MinArgs)
	case spec.MinArgs == 0:
		takes = "at most " + plural(spec.MaxArgs)
	default:
		takes = fmt.Sprintf("%d to %d arguments", spec.MinArgs, spec.MaxArgs)
	}
	if spec.Args != "" {
		takes += " (" + spec.Args + ")"
	}
	return &UsageError{
		Name: spec.Name,
		Got:  got,
		Msg:  fmt.Sprintf("%s takes %s, got %d; usage: %s", spec.Name, takes, got, spec.Usage()),
	}
}

func plural(n int) string {
	if n == 1 {
		return "1 argument"
	}
	return fmt.Sprintf("%d arguments", n)
}

// ValidPluginName reports whether name may name a plugin command: 1 to 64
// lower-case letters, digits and '-', not starting with '-', and not the
// name of a built-in command.
func ValidPluginName(name string) bool {
	if len(name) > maxPluginName || !validName(name) {
		return false
	}
	_, builtin := Lookup(name)
	return !builtin
}

// Unknown returns the error for a command name that is neither built in nor
// a plugin: an *UnknownError wrapping ErrUnknown that suggests the closest
// built-in name, if one is close.
func Unknown(name string) error {
	return unknown(name, nil)
}

// unknown is Unknown that may also suggest one of the plugins.
func unknown(name string, plugins []string) error {
	best, bestDist := "", -1
	try := func(cand string) {
		if cand == name {
			return
		}
		d, ok := closeTo(name, cand)
		if ok && (bestDist < 0 || d < bestDist) {
			best, bestDist = cand, d
		}
	}
	for i := range Builtins {
		try(Builtins[i].Name)
	}
	for _, p := range plugins {
		if ValidPluginName(p) {
			try(p)
		}
	}
	return &UnknownError{Name: name, Suggestion: best}
}

// closeTo returns the edit distance between a and b (optimal string
// alignment: insert, delete, substitute, swap two neighbours; in runes) and
// whether it is at most a third of the longer length (at least 1).
func closeTo(a, b string) (int, bool) {
	ra, rb := []rune(a), []rune(b)
	limit := max(len(ra), len(rb)) / 3
	limit = max(limit, 1)
	if abs(len(ra)-len(rb)) > limit {
		return 0, false // the distance is at least the difference in length
	}
	d := text.EditDistance(a, b)
	return d, d <= limit
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// show quotes a name for a message, cut to 64 bytes so that a huge word
// does not make a huge message.
func show(name string) string { return strconv.Quote(text.Clip(name, 64)) }
