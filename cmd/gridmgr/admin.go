package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/node/admincmd"
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
	return withClient(fs, t, args, admincmd.MaxWords, func(ctx context.Context, cl *client.Client, words []string) error {
		if len(words) == 0 {
			return usageErr("which command? e.g. gridmgr admin -n ADDR help")
		}
		command := words[0]
		if len(words) > 1 {
			command = admincmd.Join(words)
		}
		if !*all {
			rep, err := cl.Admin(ctx, command)
			if err != nil {
				return err
			}
			if t.json != nil && *t.json {
				printJSON(c, rep)
			} else if rep.Ok {
				fmt.Fprint(c.stdout, withNewline(rep.Output))
			}
			return adminErr(rep) // a failure's text goes to stderr
		}
		var mu sync.Mutex
		printed := map[string]bool{}
		show := func(r *wire.AdminReply) {
			if printed[r.Peer] || r.Duplicate {
				return
			}
			printed[r.Peer] = true
			if t.json != nil && *t.json {
				return
			}
			status := "ok"
			if !r.Ok {
				status = "FAILED (" + codeWords(r.Code) + ")"
			}
			fmt.Fprintf(c.stdout, "[%d] %s: %s\n%s", len(printed), r.Name, status, indent(withNewline(r.Output)))
		}
		rep, err := cl.AdminAll(ctx, command, func(p *wire.AdminReply) {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range p.Replies {
				show(r)
			}
		})
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if t.json != nil && *t.json {
			printJSON(c, rep)
		}
		replies := slices.Clone(rep.Replies)
		slices.SortFunc(replies, func(a, b *wire.AdminReply) int { return strings.Compare(a.Name, b.Name) })
		failed := 0
		for _, r := range replies {
			show(r)
			if !r.Ok {
				failed++
			}
		}
		if t.json == nil || !*t.json {
			fmt.Fprintf(c.stdout, "\n%d manager(s) answered, %d failed", len(printed), failed)
			if len(rep.Missing) > 0 {
				var ms []string
				for _, m := range rep.Missing {
					ms = append(ms, fmt.Sprintf("%s (%s)", m.Name, m.Why))
				}
				fmt.Fprintf(c.stdout, "; did not answer: %s", strings.Join(ms, ", "))
			}
			fmt.Fprintln(c.stdout)
		}
		if failed > 0 || len(rep.Missing) > 0 {
			return fmt.Errorf("%d failed, %d did not answer", failed, len(rep.Missing))
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
