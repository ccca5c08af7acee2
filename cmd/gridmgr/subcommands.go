package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/gridmgr/gridmgr/internal/text"
)

// subcommand is one subcommand of a command group (gridmgr app, job, dag).
type subcommand struct {
	name, args, summary string
	run                 func(c *cli, args []string) error
}

// runGroup runs the subcommand args names of group: intro, then the
// list of cmds, is the group's help. A flag before the subcommand, an
// unknown or missing subcommand get a usage error that says what to
// write.
func runGroup(c *cli, group, intro string, cmds []subcommand, args []string) error {
	var about strings.Builder
	about.WriteString(intro + "\n\nSubcommands:\n")
	tw := tabwriter.NewWriter(&about, 2, 4, 2, ' ', 0)
	names := make([]string, 0, len(cmds))
	for _, s := range cmds {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", s.name, s.args, s.summary)
		names = append(names, s.name)
	}
	tw.Flush()
	fmt.Fprintf(&about, "\n'gridmgr %s SUBCOMMAND -h' explains one, with its flags.", group)
	fl := c.newFlags(group, "SUBCOMMAND ...", about.String())
	list := strings.Join(names, ", ")
	if len(args) == 0 {
		return usageErr("say what to do: %s ('gridmgr %s -h' explains them)", list, group)
	}
	if args[0] == "help" {
		if len(args) > 1 {
			args = []string{args[1], "-h"} // gridmgr app help pack
		} else {
			args[0] = "-h"
		}
	}
	known := func(a string) bool {
		for _, n := range names {
			if n == a {
				return true
			}
		}
		return false
	}
	if strings.HasPrefix(args[0], "-") && !isHelpFlag(args[0]) {
		// A flag before the subcommand: say where it goes.
		for i, a := range args {
			if known(a) {
				rest := append(append([]string{}, args[:i]...), args[i+1:]...)
				return usageErr("name the subcommand first, then its flags: gridmgr %s %s %s", group, a, strings.Join(rest, " "))
			}
		}
	}
	if strings.HasPrefix(args[0], "-") {
		// -h, or an unknown flag: the usual answers.
		if _, err := parse(fl, args[:1], 0); err != nil {
			return err
		}
	}
	for _, s := range cmds {
		if s.name == args[0] {
			// Its errors name it: "gridmgr app pack: …".
			if code := c.exit(group+" "+s.name, s.run(c, args[1:])); code != exitOK {
				return exitCode(code)
			}
			return nil
		}
	}
	hint := ""
	if best := text.Closest(args[0], names, 2); best != "" {
		hint = fmt.Sprintf(" (did you mean %q?)", best)
	}
	return usageErr("unknown subcommand %q%s; subcommands: %s", args[0], hint, list)
}

func isHelpFlag(a string) bool { return a == "-h" || a == "-help" || a == "--help" }
