package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/wire"
)

func cmdAdmin(c *cli, args []string) error {
	fs := c.newFlags("admin", "-n ADDR | -d DIR [--all] 'COMMAND [ARGS…]'",
		"Send one admin command string to a manager, or with --all to every manager\n"+
			"of the grid (through the one at ADDR): each answers, and the replies are\n"+
			"printed as they arrive, then the managers that did not answer in time.\n"+
			"Commands that change anything are accepted only from the peers in a\n"+
			"manager's admins list (this CLI's peer id: `gridmgr id --client`), and\n"+
			"are written to its audit log. Try: gridmgr admin -n ADDR help\n\n"+
			"Quote the command as one argument (or put it after --) so that its words\n"+
			"are not read as flags; it is parsed by the manager, shell-like.")
	t := addTarget(fs, true)
	all := fs.Bool("all", false, "send to every manager of the grid")
	return withClient(fs, t, args, client.MaxAdminWords, func(ctx context.Context, cl *client.Client, words []string) error {
		if len(words) == 0 {
			return usageErr("which command? e.g. gridmgr admin -n ADDR help")
		}
		jsonOut := t.json != nil && *t.json
		spec := client.AdminSpec{Words: words, All: *all, Each: func(n int, r *wire.AdminReply) {
			if jsonOut {
				return
			}
			status := "ok"
			if !r.Ok {
				status = "FAILED (" + codeWords(r.Code) + ")"
			}
			fmt.Fprintf(c.stdout, "[%d] %s: %s\n%s", n, r.Name, status, indent(withNewline(r.Output)))
		}}
		res, err := cl.RunAdmin(ctx, spec)
		if err != nil {
			return err
		}
		rep := res.Reply
		if !*all {
			if jsonOut {
				printJSON(c, rep)
			} else if rep.Ok {
				fmt.Fprint(c.stdout, withNewline(rep.Output))
			}
			return adminErr(rep) // a failure's text goes to stderr
		}
		if jsonOut {
			printJSON(c, rep)
		} else {
			fmt.Fprintf(c.stdout, "\n%d manager(s) answered, %d failed", res.Answered, res.Failed)
			if len(rep.Missing) > 0 {
				var ms []string
				for _, m := range rep.Missing {
					ms = append(ms, fmt.Sprintf("%s (%s)", m.Name, m.Why))
				}
				fmt.Fprintf(c.stdout, "; did not answer: %s", strings.Join(ms, ", "))
			}
			fmt.Fprintln(c.stdout)
		}
		if res.Failed > 0 || len(rep.Missing) > 0 {
			return fmt.Errorf("%d failed, %d did not answer", res.Failed, len(rep.Missing))
		}
		return nil
	})
}

// adminErr is the exit status of one manager's answer: bad input exits 2,
// other failures 1, each with the manager's explanation.
func adminErr(rep *wire.AdminReply) error {
	if rep.Ok {
		return nil
	}
	if rep.Code == wire.ErrorReply_CODE_BAD_REQUEST {
		return usageErr("%s", strings.TrimSpace(rep.Output))
	}
	return fmt.Errorf("%s", strings.TrimSpace(rep.Output))
}

func withNewline(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}
