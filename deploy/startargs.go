// What a start may add to an instance's run command: arguments and
// environment variables, when its manifest allows them ([run] args and
// env), checked here and kept in the instance's record.

package deploy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gridmgr/gridmgr/internal/lazyre"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

// Bounds of what one start may add to the run command.
const (
	MaxStartArgs  = 256      // words appended to run.command
	MaxStartEnv   = 64       // environment variables added
	MaxStartBytes = 64 << 10 // of all the words, names and values, before and after substitution
)

// startEnvRE is the name of a variable a start may set.
var startEnvRE = lazyre.New(`^[A-Z_][A-Z0-9_]{0,127}$`)

// reservedEnv are the names the manager sets in every instance's
// environment; reservedEnvPrefixes are prefixes a start may not use:
// the manager's own (GRIDMGR_, PORT_) and the dynamic loader's (LD_,
// which would change what program runs rather than how).
var (
	reservedEnv         = []string{"PATH", "HOME", "TMPDIR", "INSTANCE_DIR", "INSTANCE", "APP", "CLASS_DIR"}
	reservedEnvPrefixes = []string{"GRIDMGR_", "PORT_", "LD_"}
)

// ReservedEnv says whether a start (a job's env) may not set name: the
// manager sets it in every instance, or it has a reserved prefix.
func ReservedEnv(name string) bool {
	if slices.Contains(reservedEnv, name) {
		return true
	}
	for _, p := range reservedEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// checkStart says what is wrong with the args and env a start of r
// brings (a BAD_REQUEST refusal), or nil.
func (e *Executor) checkStart(r *Record, args []string, env map[string]string) error {
	bad := func(format string, a ...any) error {
		return errorf(wire.ErrorReply_CODE_BAD_REQUEST, "starting %s: "+format, append([]any{r.ID}, a...)...)
	}
	if len(args) > 0 && !r.m.Run.Args {
		return bad("%s's app.toml fixes its run command: it takes no arguments at start (its [run] would say args = true)", r.App)
	}
	if len(env) > 0 && !r.m.Run.Env {
		return bad("%s's app.toml fixes its environment: a start may not add variables (its [run] would say env = true)", r.App)
	}
	if len(args) > MaxStartArgs {
		return bad("%d arguments, at most %d", len(args), MaxStartArgs)
	}
	if len(env) > MaxStartEnv {
		return bad("%d environment variables, at most %d", len(env), MaxStartEnv)
	}
	vars := e.vars(r)
	known := func(what, w string) error {
		for _, v := range varRE.FindAllStringSubmatch(w, -1) {
			if _, ok := vars[v[1]]; !ok {
				return bad("%s: %s is not known: use ${INSTANCE_DIR}, ${INSTANCE}, ${APP}, ${CLASS_DIR} or ${PORT_NAME} of one of its ports", what, text.QuoteShort(v[0]))
			}
		}
		return nil
	}
	word := func(what, w string) error {
		switch {
		case strings.ContainsRune(w, 0):
			return bad("%s holds a NUL byte", what)
		case !utf8.ValidString(w):
			return bad("%s is not valid UTF-8", what)
		}
		return known(what, w)
	}
	size := 0
	for i, a := range args {
		if err := word(fmt.Sprintf("argument %d", i+1), a); err != nil {
			return err
		}
		size += len(a) + 1
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		switch {
		case !startEnvRE.MatchString(k):
			return bad("environment variable %s: a name is upper-case letters, digits and '_', not starting with a digit, at most 128", describe(k))
		case slices.Contains(reservedEnv, k) || slices.ContainsFunc(reservedEnvPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }):
			return bad("environment variable %s is the manager's to set (%s and %s* are reserved)", k, strings.Join(reservedEnv, ", "), strings.Join(reservedEnvPrefixes, "*, "))
		case hasKey(r.m.Install.Env, k):
			return bad("environment variable %s is set by %s's app.toml ([install.env]); a start may not change it", k, r.App)
		}
		if err := word("environment variable "+k, env[k]); err != nil {
			return err
		}
		size += len(k) + len(env[k]) + 2
	}
	if size > MaxStartBytes {
		return bad("the arguments and environment are %d bytes, at most %d", size, MaxStartBytes)
	}
	expanded := 0
	for _, w := range e.expand(r, args) {
		expanded += len(w) + 1
	}
	for k, v := range env {
		expanded += len(k) + len(e.expand(r, []string{v})[0]) + 2
	}
	if expanded > MaxStartBytes {
		return bad("the arguments and environment are %d bytes once ${...} are substituted, at most %d", expanded, MaxStartBytes)
	}
	return nil
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// startEnv is the environment a start adds, substituted, sorted by name.
func (e *Executor) startEnv(r *Record) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(r.Env)) {
		out = append(out, k+"="+e.expand(r, []string{r.Env[k]})[0])
	}
	return out
}
