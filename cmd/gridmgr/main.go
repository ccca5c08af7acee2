// Command gridmgr is the grid manager: one binary per host that runs the
// manager (run), a local six-manager grid (demo), and the client commands
// that talk to any manager (tree, status, ping, ...). `gridmgr help` lists
// them.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

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

// usageErr formats an error that exits with code 2.
func usageErr(format string, args ...any) error {
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
}

func commands() []command {
	return []command{
		{"run", "-c FILE", "run this host's manager from its properties file", cmdRun},
		{"demo", "[--once]", "start the patent's six-manager grid on this machine and show it form", cmdDemo},
		{"tree", "-n ADDR | -d DIR", "show the subtree under a manager, with relation states and round trips", cmdTree},
		{"status", "-n ADDR | -d DIR", "show one manager: identity, addresses, relations, recent events", cmdStatus},
		{"query", "-n ADDR | -d DIR EXPR", "find resources anywhere in the grid (CEL requirement, --rank, --limit …)", cmdQuery},
		{"resources", "-n ADDR | -d DIR", "show one manager's own live values, attributes and policy", cmdResources},
		{"reserve", "-n ADDR | -d DIR [flags]", "reserve cpus, memory or tokens at the best offer (--at PEER, --all EXPR --count N)", cmdReserve},
		{"reservations", "-n ADDR | -d DIR", "list a manager's reservations and what each kind has free", cmdReservations},
		{"commit", "-n ADDR | -d DIR ID", "commit a held reservation: it becomes a lease", opCommand("commit", wire.ReservationOpRequest_OP_COMMIT,
			"Commit a held reservation, wherever its manager is: it becomes a lease of\n--lease (default: the manager's), renewable with `gridmgr renew`.")},
		{"renew", "-n ADDR | -d DIR ID", "renew a committed reservation's lease", opCommand("renew", wire.ReservationOpRequest_OP_RENEW,
			"Renew a committed reservation: its lease starts again from now.")},
		{"release", "-n ADDR | -d DIR ID", "release a reservation (idempotent)", opCommand("release", wire.ReservationOpRequest_OP_RELEASE,
			"Release a reservation: its resources are free again at once. Releasing one\nthat has already ended is not an error.")},
		{"admin", "-n ADDR | -d DIR [--all] 'CMD…'", "run an admin command string on one manager or all (help lists them)", cmdAdmin},
		{"ping", "-n ADDR | -d DIR [PEER]", "round trip to a manager, or from it to one of its relations", cmdPing},
		{"id", "-c FILE", "print the manager's peer id and the addresses superiors lists should use", cmdID},
		{"keygen", "[-o FILE] [--psk]", "write a new identity key (or a grid pre-shared key)", cmdKeygen},
		{"version", "", "print the version", cmdVersion},
		{"help", "[COMMAND]", "list the commands, or explain one", nil},
	}
}

func main() {
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// Main runs gridmgr with args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return (&cli{stdout: stdout, stderr: stderr}).main(args)
}

func (c *cli) main(args []string) int {
	if len(args) == 0 {
		c.help(nil)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	if name == "help" || name == "-h" || name == "--help" {
		c.help(rest)
		return exitOK
	}
	for _, cmd := range commands() {
		if cmd.name == name && cmd.run != nil {
			err := cmd.run(c, rest)
			switch {
			case err == nil:
				return exitOK
			case errors.Is(err, flag.ErrHelp):
				return exitOK
			case errors.Is(err, errUsage):
				fmt.Fprintf(c.stderr, "gridmgr %s: %s\n", name, strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
				return exitUsage
			default:
				fmt.Fprintf(c.stderr, "gridmgr %s: %v\n", name, err)
				return exitFailure
			}
		}
	}
	fmt.Fprintf(c.stderr, "gridmgr: unknown command %q%s\nRun 'gridmgr help' for the list.\n", name, suggest(name))
	return exitUsage
}

func (c *cli) help(args []string) {
	if len(args) > 0 {
		for _, cmd := range commands() {
			if cmd.name == args[0] && cmd.run != nil {
				_ = cmd.run(c, []string{"-h"})
				return
			}
		}
	}
	fmt.Fprintf(c.stdout, "gridmgr — a peer-to-peer hierarchical mesh of grid managers\n\nUsage: gridmgr COMMAND [FLAGS]\n\nCommands:\n")
	for _, cmd := range commands() {
		fmt.Fprintf(c.stdout, "  %-12s %-24s %s\n", cmd.name, cmd.args, cmd.summary)
	}
	fmt.Fprintf(c.stdout, "\nEach command takes -h. ADDR is a full multiaddr ending in /p2p/<peer id>;\n-d DIR finds the manager running on this host with data dir DIR.\n")
}

// newFlags makes a flag set whose usage names the command and whose errors
// are returned, not printed-and-exited.
func (c *cli) newFlags(name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "Usage: gridmgr %s %s\n\n%s\n\nFlags:\n", name, synopsis, about)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags, which may come before, between or after the
// positional arguments ("--" ends the flags), and returns the positional
// arguments, at most maxArgs of them. -h returns flag.ErrHelp; bad flags
// and extra arguments are usage errors.
func parse(fs *flag.FlagSet, args []string, maxArgs int) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return nil, err
		}
		if err != nil {
			return nil, usageErr("%v (see -h)", err)
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
		return nil, usageErr("unexpected argument %q", pos[maxArgs])
	}
	return pos, nil
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
