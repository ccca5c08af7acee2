package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"text/tabwriter"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed (network, manager error)
	exitUsage   = 2 // bad flags, bad properties file, bad input
)

// errUsage marks errors that exit with exitUsage.
var errUsage = errors.New("usage")

// usageErr formats an error that exits with code 2. Errors among args
// are shown in plain words (plainError).
func usageErr(format string, args ...any) error {
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = plainError(err)
		}
	}
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// command is one subcommand.
type command struct {
	name    string
	args    string // synopsis after the name
	summary string
	run     func(env *cli, args []string) error
}

// cli carries the process's streams so tests can run commands in-process.
type cli struct {
	stdout, stderr io.Writer
	// interrupt, if set, replaces waiting for SIGINT/SIGTERM (tests).
	interrupt <-chan struct{}
	// flags is the flag set of the command run last (for tests).
	flags *flagSet
}

func commands() []command {
	return []command{
		{"run", "-c FILE", "run this host's manager from its properties file", cmdRun},
		{"demo", "[--once]", "start a six-manager example grid on this machine and show it form", cmdDemo},
		{"tree", "-n ADDR | -d DIR", "show the subtree under a manager, with relation states and round trips", cmdTree},
		{"status", "-n ADDR | -d DIR", "show one manager: identity, addresses, relations, recent events", cmdStatus},
		{"query", "-n ADDR | -d DIR EXPR", "find resources anywhere in the grid (CEL requirement, --rank, --limit …)", cmdQuery},
		{"resources", "-n ADDR | -d DIR", "show one manager's values as queries see them (every variable), policy and rank", cmdResources},
		{"reserve", "-n ADDR | -d DIR [flags]", "reserve cpus, memory or tokens at the best offer (--at PEER, --all EXPR --count N)", cmdReserve},
		{"reservations", "-n ADDR | -d DIR", "list a manager's reservations and what each kind has free", cmdReservations},
		{"calendar", "-n ADDR | -d DIR [--from …] [--to …]", "show a manager's calendar: what is booked when, and by which reservations", cmdCalendar},
		{"commit", "-n ADDR | -d DIR ID", "commit a held reservation: it becomes a lease", opCommand("commit", wire.ReservationOpRequest_OP_COMMIT,
			"Commit a held reservation, wherever its manager is: it becomes a lease of\n--lease (default: the manager's), renewable with `gridmgr renew`.")},
		{"renew", "-n ADDR | -d DIR ID", "renew a committed reservation's lease", opCommand("renew", wire.ReservationOpRequest_OP_RENEW,
			"Renew a committed reservation: its lease starts again from now.")},
		{"release", "-n ADDR | -d DIR ID", "release a reservation (idempotent)", opCommand("release", wire.ReservationOpRequest_OP_RELEASE,
			"Release a reservation: its resources are free again at once. Its\n"+
				"applications are stopped and removed, the host restored, and the answer\n"+
				"says which (it waits a few seconds for that; what takes longer goes on,\n"+
				"and the answer says so). Releasing one that has already ended is not an\n"+
				"error.")},
		{"admin", "-n ADDR | -d DIR [--all] 'CMD…'", "run an admin command string on one manager or all (help lists them)", cmdAdmin},
		{"ping", "-n ADDR | -d DIR [PEER]", "round trip to a manager, or from it to one of its relations", cmdPing},
		{"id", "-c FILE", "print the manager's peer id and the addresses superiors lists should use", cmdID},
		{"keygen", "[-o FILE] [--psk]", "write a new identity key (or a grid pre-shared key)", cmdKeygen},
		{"app", "SUBCOMMAND …", "applications on reserved hosts: pack, install, start, status, logs, remove, list … ('gridmgr app -h')", cmdApp},
		{"glidein", "-n ADDR | -d DIR --count N --cpus C --mem M", "launch glide-ins: your own managers on reserved hosts, for your jobs (list, rm: 'gridmgr glidein -h')", cmdGlidein},
		{"job", "SUBCOMMAND …", "jobs on the grid: submit a job file, q, why, log, hold, rm, wait for results … ('gridmgr job -h')", cmdJob},
		{"dag", "SUBCOMMAND …", "workflows: jobs that wait for each other; submit, status, wait, rerun what failed … ('gridmgr dag -h')", cmdDag},
		{"watch", "-n ADDR | -d DIR [--kind K] [--under NAME]", "print the grid's events live: relations, failovers, reservations, applications, admin", cmdWatch},
		{"events", "-n ADDR | -d DIR [--since 1h]", "read back the events a manager archived ([archive] enabled = true)", cmdEvents},
		{"web-token", "-c FILE | -d DIR", "print the admin token of a manager's web UI", cmdWebToken},
		{"sim", "[SCENARIO.toml] [flags]", "simulate a grid of up to a million managers on this machine and measure it", cmdSim},
		{"version", "", "print the version", cmdVersion},
		{"help", "[COMMAND]", "list the commands, or explain one", nil},
	}
}

func main() {
	// The same binary supervises the applications a manager runs: a
	// supervisor never gets here (package runner's init takes it).
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// Main runs gridmgr with args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return (&cli{stdout: stdout, stderr: stderr}).main(args)
}

func (c *cli) main(args []string) int {
	if len(args) == 0 {
		c.help(c.stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	if name == "help" || name == "-h" || name == "--help" {
		return c.helpCommand(rest)
	}
	for _, cmd := range commands() {
		if cmd.name == name && cmd.run != nil {
			return c.exit(name, cmd.run(c, rest))
		}
	}
	fmt.Fprintf(c.stderr, "gridmgr: unknown command %q%s\nRun 'gridmgr help' for the list.\n", name, suggest(name))
	return exitUsage
}

// exit says what went wrong with command name (a usage error, or a
// failure), as "gridmgr NAME: what", and returns the exit code.
func (c *cli) exit(name string, err error) int {
	var code exitCode
	switch {
	case errors.As(err, &code):
		return int(code) // the command said what there was to say
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(c.stderr, "gridmgr %s: %s\n", name, strings.TrimPrefix(plainError(err), errUsage.Error()+": "))
		return exitUsage
	default:
		fmt.Fprintf(c.stderr, "gridmgr %s: %s\n", name, plainError(err))
		return exitFailure
	}
}

// helpCommand is `gridmgr help [COMMAND]`: the list of commands, or one
// command's usage with its flags, on stdout. An unknown command is a
// usage error.
func (c *cli) helpCommand(args []string) int {
	switch {
	case len(args) == 0 || args[0] == "help":
		c.help(c.stdout)
		return exitOK
	case len(args) > 1:
		fmt.Fprintf(c.stderr, "gridmgr help: one command at a time, e.g. gridmgr help %s\n", args[0])
		return exitUsage
	}
	for _, cmd := range commands() {
		if cmd.name == args[0] && cmd.run != nil {
			_ = cmd.run(c, []string{"-h"})
			return exitOK
		}
	}
	fmt.Fprintf(c.stderr, "gridmgr help: no command %q%s\nRun 'gridmgr help' for the list.\n", args[0], suggest(args[0]))
	return exitUsage
}

// help writes the list of commands.
func (c *cli) help(w io.Writer) {
	fmt.Fprintf(w, "gridmgr — a peer-to-peer hierarchical mesh of grid managers\n\nUsage: gridmgr COMMAND [FLAGS]\n\nCommands:\n")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, cmd := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", cmd.name, cmd.args, cmd.summary)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n'gridmgr help COMMAND' (or 'gridmgr COMMAND -h') explains one, with its flags.\n"+
		"ADDR is a full multiaddr ending in /p2p/<peer id>; -d DIR finds the manager\n"+
		"running on this host with data dir DIR.\n")
}

// flagSet is a command's flags, with what its usage says about it.
type flagSet struct {
	*flag.FlagSet
	c                     *cli
	name, synopsis, about string
	// target holds the flags that choose the manager (addTarget), listed
	// apart; hidden holds aliases left out of the usage.
	target, hidden map[string]bool
}

// newFlags makes a flag set whose usage names the command and whose errors
// are returned, not printed-and-exited.
func (c *cli) newFlags(name, synopsis, about string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// parse() reports errors and prints the usage itself.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	c.flags = &flagSet{FlagSet: fs, c: c, name: name, synopsis: synopsis, about: about,
		target: map[string]bool{}, hidden: map[string]bool{}}
	return c.flags
}

// alias defines name as another name of the flag of, not shown in the usage.
func (fs *flagSet) alias(name, of string) {
	f := fs.Lookup(of)
	fs.Var(f.Value, name, "same as --"+of)
	fs.hidden[name] = true
}

// metavars name the value of the flags whose usage does not.
var metavars = map[string]string{
	"n": "ADDR", "d": "DIR", "c": "FILE", "o": "FILE", "psk": "FILE", "data-dir": "DIR",
	"rank": "EXPR", "query": "EXPR", "at": "MANAGER", "kill": "MANAGER", "user": "NAME",
	"mem": "SIZE", "token": "KIND=N", "down": "LEVELS", "up": "LEVELS", "request-id": "ID",
	"log-level": "LEVEL", "kind": "KINDS", "under": "MANAGER", "filter": "EXPR", "since": "WHEN", "until": "WHEN",
	"web": "HOST:PORT", "attr": "KEY=VALUE", "begin": "WHEN", "from": "WHEN", "to": "WHEN", "horizon": "DURATION",
	"after": "ID",
}

// usage writes the command's usage, then its flags, each once with its
// default.
func (fs *flagSet) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: gridmgr %s %s\n\n%s\n", fs.name, fs.synopsis, fs.about)
	var own, target []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		switch {
		case fs.hidden[f.Name]:
		case fs.target[f.Name]:
			target = append(target, f)
		default:
			own = append(own, f)
		}
	})
	for _, g := range []struct {
		title string
		flags []*flag.Flag
	}{{"Flags:", own}, {"Which manager:", target}} {
		if len(g.flags) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s\n", g.title)
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, f := range g.flags {
			fmt.Fprintf(tw, "  %s\t%s\n", flagSynopsis(f), flagUsage(f))
		}
		tw.Flush()
	}
}

// flagSynopsis is "-n ADDR", "--timeout DURATION" or "--json".
func flagSynopsis(f *flag.Flag) string {
	s := "--" + f.Name
	if len(f.Name) == 1 {
		s = "-" + f.Name
	}
	if isBool(f) {
		return s
	}
	if m, ok := metavars[f.Name]; ok {
		return s + " " + m
	}
	if m, ok := f.Value.(interface{ metavar() string }); ok {
		return s + " " + m.metavar()
	}
	kind, _ := flag.UnquoteUsage(f)
	switch kind {
	case "int", "uint", "int64", "uint64":
		kind = "N"
	case "value":
		kind = "VALUE"
	}
	return s + " " + strings.ToUpper(kind)
}

// flagUsage is the flag's usage with its default, unless that is the
// zero value.
func flagUsage(f *flag.Flag) string {
	_, u := flag.UnquoteUsage(f)
	zero := reflect.New(reflect.TypeOf(f.Value).Elem()).Interface().(flag.Value).String()
	if f.DefValue != zero && f.DefValue != "" {
		u += " (default " + f.DefValue + ")"
	}
	return u
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// parse parses flags, which may come before, between or after the
// positional arguments ("--" ends the flags), and returns the positional
// arguments, at most maxArgs of them. -h prints the usage with the flags
// on stdout and returns flag.ErrHelp; a bad flag or an extra argument is
// a usage error of one line and a pointer to -h.
func parse(fs *flagSet, args []string, maxArgs int) ([]string, error) {
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fs.usage(fs.c.stdout)
			return nil, err
		}
		if err != nil {
			return nil, usageErr("%s\n%s", fs.flagErr(err), fs.seeHelp())
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if args[0] == "--" {
			pos = append(pos, args[1:]...)
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	if len(pos) > maxArgs {
		return nil, usageErr("unexpected argument %q\n%s", pos[maxArgs], fs.seeHelp())
	}
	return pos, nil
}

func (fs *flagSet) seeHelp() string {
	return fmt.Sprintf("Run 'gridmgr %s -h' to see its usage and flags.", fs.name)
}

// flagErr rewords the flag package's errors: which flag, what was wrong,
// what would do.
func (fs *flagSet) flagErr(err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		var names []string
		fs.VisitAll(func(f *flag.Flag) {
			if !fs.hidden[f.Name] {
				names = append(names, f.Name)
			}
		})
		hint := ""
		if best := text.Closest(name, names, 2); best != "" {
			hint = fmt.Sprintf(" (did you mean %s?)", dashed(best))
		}
		return fmt.Sprintf("unknown flag %s%s", dashed(name), hint)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		f := fs.Lookup(strings.TrimLeft(name, "-"))
		if f == nil {
			return msg
		}
		return fmt.Sprintf("%s needs a value", flagSynopsis(f))
	}
	// invalid value "x" for flag -name: reason
	// invalid boolean value "x" for -name: reason
	for _, p := range []string{"invalid value ", "invalid boolean value "} {
		rest, ok := strings.CutPrefix(msg, p)
		if !ok {
			continue
		}
		val, rest, ok := strings.Cut(rest, " for ")
		if !ok {
			break
		}
		name, reason, ok := strings.Cut(strings.TrimPrefix(rest, "flag "), ": ")
		if !ok {
			break
		}
		f := fs.Lookup(strings.TrimLeft(name, "-"))
		if f == nil {
			break
		}
		switch reason {
		case "parse error":
			reason = "want " + valueHint(f)
		case "value out of range":
			reason = "out of range: want " + valueHint(f)
		}
		return fmt.Sprintf("%s %s: %s", dashed(f.Name), val, reason)
	}
	return msg
}

// valueHint says what a flag's value looks like.
func valueHint(f *flag.Flag) string {
	if isBool(f) {
		return "true or false"
	}
	switch kind, _ := flag.UnquoteUsage(f); kind {
	case "duration":
		return "a duration such as 500ms, 5s, 2m or 1h30m"
	case "int", "int64":
		return "a whole number"
	case "uint", "uint64":
		return "a whole number, 0 or more"
	case "float":
		return "a number"
	}
	return "another value"
}

func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// suggest names the closest command to a mistyped one.
func suggest(name string) string {
	var names []string
	for _, cmd := range commands() {
		names = append(names, cmd.name)
	}
	if best := text.Closest(name, names, 2); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}
