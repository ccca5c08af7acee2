package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/wire"
)

// levels is a flag for --down/--up: a number, or "all".
type levels uint32

func (l *levels) String() string {
	if *l >= 255 {
		return "all"
	}
	return strconv.Itoa(int(*l))
}

func (l *levels) Set(s string) error {
	if s == "all" {
		*l = 255
		return nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return fmt.Errorf("want a number of levels (0-255) or \"all\"")
	}
	*l = levels(n)
	return nil
}

// maxCPUs bounds --cpus: the most a properties file may declare
// (resources.cpus).
const maxCPUs = 65536

// maxHorizon bounds --horizon: the longest calendar a manager searches.
const maxHorizon = 90 * 24 * time.Hour

func cmdQuery(c *cli, args []string) error {
	fs := c.newFlags("query", "-n ADDR | -d DIR [flags] REQUIREMENT",
		"Find resources anywhere in the grid. The manager at ADDR matches its own\n"+
			"resources, asks its inferiors (down to --down levels), and while it has\n"+
			"fewer than --want offers climbs to its superiors (up to --up levels), which\n"+
			"search their other subtrees. Offers are ranked by --rank (higher first)\n"+
			"and cut to --limit. Managers that did not answer in time are listed.\n\n"+
			"REQUIREMENT and --rank are CEL expressions (owners' policies are too);\n"+
			"they read:\n"+variablesHelp()+
			"A missing or unknown attribute makes the requirement false on that\n"+
			"manager (query/doc.go has the rules). Example:\n"+
			"  gridmgr query -n ADDR 'cpus_free >= 4 && mem_free >= 8 * GiB && cpu_util < 0.5' --rank mem_free\n"+
			"Flags may follow the expression; put -- before an expression that starts with -.\n\n"+
			"Exit codes: 0 answered (even with no offers); 1 failed, and with --earliest\n"+
			"also when no window was found (only that is said; --json prints the reply);\n"+
			"2 bad input.")
	t := addTarget(fs, true)
	rank := fs.String("rank", "", "rank expression, numeric, higher is better (default: all equal)")
	down, up := levels(255), levels(255)
	fs.Var(&down, "down", "levels below each searching manager to search (number or \"all\")")
	fs.Var(&up, "up", "levels the query may climb above the first manager (number or \"all\")")
	want := countVar[uint](fs, "want", client.DefaultQueryWant, 1, client.MaxQueryLimit, "climb while fewer offers than this were found")
	limit := countVar[uint](fs, "limit", client.DefaultQueryLimit, 1, client.MaxQueryLimit, "most offers to show")
	user := fs.String("user", "", "who is asking, for owners' policies (default: your login name)")
	fs.alias("as", "user")
	cpus := countVar[int64](fs, "cpus", 0, 0, maxCPUs, "cpus you mean to claim (request.cpus in policies)")
	memStr := fs.String("mem", "", "memory you mean to claim, e.g. 4GiB (request.mem in policies)")
	path := fs.Bool("path", false, "also show which managers the query visited, and who asked them")
	explain := fs.Bool("explain", false, "also say why managers did not offer: the requirement's or owner's policy's clause that was false, with the values (\"why is my job idle?\")")
	var attrs attrFlags
	fs.Var(&attrs, "attr", "an attribute of your job owners' policies see as request.attrs.KEY, KEY=VALUE (repeatable; values are strings)")
	var tokens tokenFlags
	fs.Var(&tokens, "token", "a counted token you mean to claim, KIND=N (repeatable): with --earliest, the window must hold it")
	win := addWindowFlags(fs, "to look at (free amounts are the least free over it)")
	earliest := fs.Bool("earliest", false, "find the earliest window of --duration in which --want managers have --cpus, --mem and --token free, from --begin (default now); none found: exit 1")
	horizon := fs.duration("horizon", 7*24*time.Hour, positive, maxHorizon, "with --earliest: how far ahead the window may begin, e.g. 48h or 14d (at most 90d)")
	return withClient(fs, t, args, 1, func(ctx context.Context, cl *client.Client, args []string) error {
		if len(args) != 1 {
			return usageErr("give one REQUIREMENT expression (quote it)")
		}
		if strings.TrimSpace(args[0]) == "" {
			return usageErr("the REQUIREMENT is empty: give an expression such as 'cpus_free >= 4', or 'true' for every manager")
		}
		var mem uint64
		if *memStr != "" {
			var err error
			if mem, err = text.ParseSize(*memStr); err != nil {
				return usageErr("--mem: %v", err)
			}
		}
		now := time.Now()
		begin, dur, err := win.window(now)
		if err != nil {
			return err
		}
		found, err := cl.Find(ctx, client.QuerySpec{
			Requirement: args[0], Rank: *rank, Down: uint32(down), Up: uint32(up), Want: uint32(*want), Limit: uint32(*limit),
			Trace: *path, Explain: *explain, User: *user, CPUs: *cpus, Mem: int64(mem), Tokens: tokens, Attrs: attrs,
			Begin: begin, Duration: dur, Earliest: *earliest, Horizon: *horizon,
		})
		switch {
		case errors.Is(err, client.ErrEarliestNoDuration):
			return usageErr("--earliest needs --duration: the length of the window to find (e.g. --duration 4h)")
		case errors.Is(err, client.ErrEarliestNoAmount):
			return usageErr("--earliest needs what the window must hold: --cpus, --mem or --token KIND=N")
		case err != nil:
			return err
		}
		rep := found.Reply
		out := renderQuery(rep, *rank != "", *path, found.Took)
		if *explain {
			out += renderVerdicts(found)
		}
		if *earliest {
			if found.Window() == nil {
				// No window: the command failed (exit 1), and there is
				// no table of offers to book.
				if t.json != nil && *t.json {
					t.show(c, rep, "")
					return errSilentFail
				}
				from := begin
				if from.IsZero() {
					from = now
				}
				err := noWindow(rep, int(*want), dur, *horizon, from, now)
				if *explain {
					// Why no window: the verdicts, after the failure.
					err = fmt.Errorf("%w\n%s", err, strings.TrimSuffix(renderVerdicts(found), "\n"))
				}
				return err
			}
			out = renderEarliest(rep.Earliest, dur, bookHint(*cpus, *memStr, tokens), now) + out
		}
		t.show(c, rep, out)
		return nil
	})
}

// renderQuery prints offers as a table, then the missing managers.
func renderQuery(rep *wire.QueryReply, ranked, path bool, took time.Duration) string {
	var b strings.Builder
	if len(rep.Offers) == 0 {
		b.WriteString("no offers\n")
	} else {
		tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
		head := "#\tMANAGER\tCPUS FREE\tMEM FREE\tCPU UTIL\tMATCHED"
		if ranked {
			head += "\tRANK"
		}
		owners := false // some owner ranks the request: show its rank too
		for _, o := range rep.Offers {
			owners = owners || o.OwnerRanked
		}
		if owners {
			head += "\tOWNER RANK"
		}
		fmt.Fprintln(tw, head+"\tADDRESS")
		for i, o := range rep.Offers {
			var m []string
			for _, a := range o.Matched { // sorted by key
				k, v := a.Key, a.Value
				if k == "mem" || k == "mem_free" {
					if n, err := strconv.ParseUint(v, 10, 64); err == nil {
						v = strings.ReplaceAll(fmtBytes(n), " ", "")
					}
				}
				m = append(m, k+"="+v)
			}
			util := "unknown"
			if o.CpuUtil >= 0 {
				util = fmt.Sprintf("%.0f%%", o.CpuUtil*100)
			}
			line := fmt.Sprintf("%d\t%s\t%d/%d\t%s/%s\t%s\t%s", i+1, o.Name, o.CpusFree, o.Cpus,
				fmtBytes(uint64(max(o.MemFree, 0))), fmtBytes(uint64(max(o.Mem, 0))), util, strings.Join(m, " "))
			if ranked {
				if o.Ranked {
					line += "\t" + render.Number(o.Rank)
				} else {
					line += "\tundefined"
				}
			}
			if owners {
				if o.OwnerRanked {
					line += "\t" + render.Number(o.OwnerRank)
				} else {
					line += "\t-"
				}
			}
			addr := ""
			if len(o.Addrs) > 0 {
				addr = o.Addrs[0] + "/p2p/" + o.Peer
			}
			fmt.Fprintln(tw, line+"\t"+addr)
		}
		tw.Flush()
	}
	fmt.Fprintf(&b, "\n%d offer(s) shown of %d matched; %d manager(s) searched in %s\n",
		len(rep.Offers), rep.Matched, rep.Visited, fmtDur(took))
	if len(rep.Missing) > 0 {
		var ms []string
		for _, m := range rep.Missing {
			ms = append(ms, fmt.Sprintf("%s (%s)", m.Name, m.Why))
		}
		fmt.Fprintf(&b, "did not answer: %s\n", strings.Join(ms, ", "))
	}
	if path {
		b.WriteString("path:\n")
		for _, v := range rep.Visits {
			by := "the client"
			if v.AskedBy != "" {
				by = v.AskedBy
			}
			dir := strings.ToLower(strings.TrimPrefix(v.Direction.String(), "DIRECTION_"))
			if dir == "unspecified" {
				dir = "entry"
			}
			fmt.Fprintf(&b, "  %-10s asked by %-10s %-5s offers %d\n", v.Name, by, dir, v.Offers)
		}
	}
	return b.String()
}

// renderVerdicts says why managers did not offer (--explain): a line per
// reason, from client.SummarizeVerdicts.
func renderVerdicts(found *client.Found) string {
	var b strings.Builder
	lines := client.SummarizeVerdicts(found.Verdicts())
	if len(lines) == 0 && found.VerdictsMore() == 0 {
		b.WriteString("why not: every manager reached offered\n")
		return b.String()
	}
	b.WriteString("why not:\n")
	for _, l := range lines {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	if n := found.VerdictsMore(); n > 0 {
		fmt.Fprintf(&b, "  and %d more manager(s) not shown\n", n)
	}
	return b.String()
}

// variablesHelp lists what expressions read, from query.Variables (the
// one list): a line per variable, its type and meaning wrapped below, then
// the unit constants.
func variablesHelp() string {
	const width = 78
	var b strings.Builder
	for _, v := range client.QueryVariables() {
		const indent = 2 + 14 + 1 + 9 + 1
		head := fmt.Sprintf("  %-14s %-9s ", v.Name, v.Type)
		if len(v.Type) > 9 {
			head = fmt.Sprintf("  %-14s %s\n%*s", v.Name, v.Type, indent, "")
		}
		doc := v.Doc
		if v.Live {
			doc = "live: " + doc
		}
		if v.Unit != "" && v.Unit != "CPUs" && v.Unit != "tokens" && v.Unit != "instances" {
			doc += " [" + v.Unit + "]"
		}
		b.WriteString(head)
		col := indent
		for i, w := range strings.Fields(doc) {
			if i > 0 && col+1+len(w) > width {
				b.WriteString("\n" + strings.Repeat(" ", indent))
				col = indent
			} else if i > 0 {
				b.WriteByte(' ')
				col++
			}
			b.WriteString(w)
			col += len(w)
		}
		b.WriteByte('\n')
	}
	units := client.QueryUnits()
	fmt.Fprintf(&b, "and the constants %s (bytes). A live value is measured on the host\n"+
		"unless its owner declares it in the properties' [resources].\n", strings.Join(units, " "))
	return b.String()
}

func cmdResources(c *cli, args []string) error {
	fs := c.newFlags("resources", "-n ADDR | -d DIR [flags]",
		"Show one manager's own values, as queries see them: every variable a\n"+
			"requirement, rank or owner's policy reads (gridmgr query -h lists them),\n"+
			"the owner's policy, and the owner's rank (owner_rank depends on the request).")
	t := addTarget(fs, true)
	return withClient(fs, t, args, 0, func(ctx context.Context, cl *client.Client, _ []string) error {
		rep, err := cl.Resources(ctx)
		if err != nil {
			return err
		}
		t.show(c, rep, render.Resources(rep))
		return nil
	})
}

// attrFlags collects --attr KEY=VALUE (repeatable): the job's attributes
// owners' policies see as request.attrs.KEY (strings).
type attrFlags map[string]string

func (a *attrFlags) String() string { return "" }
func (a *attrFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return fmt.Errorf("%q: write KEY=VALUE, e.g. kind=simulation", s)
	}
	if len(k) > 64 || len(v) > 256 {
		return fmt.Errorf("%q: keys up to 64 bytes, values up to 256", s)
	}
	if *a == nil {
		*a = attrFlags{}
	}
	if len(*a) >= 32 && (*a)[k] == "" {
		return fmt.Errorf("at most 32 --attr")
	}
	(*a)[k] = v
	return nil
}
