package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/wire"
)

// tokenFlags collects --token KIND=N.
type tokenFlags []*wire.Amount

func (t *tokenFlags) String() string { return "" }

func (t *tokenFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KIND=N, e.g. gpus=1")
	}
	n, err := text.ParseCount(v)
	if err != nil || n < 1 || n > maxTokens {
		return fmt.Errorf("%q: the amount must be a whole number from 1 to %s", v, text.FormatCount(maxTokens))
	}
	*t = append(*t, &wire.Amount{Kind: k, N: n})
	return nil
}

// maxTokens bounds a --token amount: the most of a kind a properties
// file may declare ([tokens]).
const maxTokens = 1 << 40

// afterQueryHook, if set (by tests), runs between reserve's query and its
// reservation attempts: the window in which another client may take an
// offer.
var afterQueryHook func(offers []*wire.Offer)

func cmdReserve(c *cli, args []string) error {
	fs := c.newFlags("reserve", "-n ADDR | -d DIR [flags]",
		"Reserve resources. By default: query the grid through the manager at ADDR\n"+
			"(--query, or a requirement made from the amounts), reserve at the best\n"+
			"offer's manager, and fall back to the next offer if that one was taken\n"+
			"meanwhile. --at reserves at one named manager instead. --all EXPR with\n"+
			"--count N reserves on N managers at once or on none (hold on each, then\n"+
			"commit all; any refusal releases every hold).\n\n"+
			"A reservation is held: it lapses by itself after the manager's hold timeout\n"+
			"unless committed (--commit, or `gridmgr commit ID`); a committed reservation\n"+
			"is a lease that lapses unless renewed (`gridmgr renew ID`). Reservations are\n"+
			"held by this client's identity (~/.config/gridmgr/client.key, or\n"+
			"$GRIDMGR_CLIENT_KEY): only it (or an admin) may commit, renew or release.\n\n"+
			"Examples:\n"+
			"  gridmgr reserve -n ADDR --cpus 2 --mem 4GiB --query 'cpus_free >= 2 && mem_free >= 4 * GiB'\n"+
			"  gridmgr reserve -n ADDR --at gm154 --cpus 1 --commit --lease 10m\n"+
			"  gridmgr reserve -n ADDR --all 'cpus_free >= 8' --count 3 --cpus 8")
	t := addTarget(fs, true)
	queryExpr := fs.String("query", "", "requirement the offers must meet (default: free amounts ≥ the request)")
	rank := fs.String("rank", "", "rank expression for choosing among offers, higher first")
	at := fs.String("at", "", "reserve at this manager (name or peer id) instead of querying")
	all := fs.String("all", "", "co-reservation: requirement every one of --count managers must meet")
	count := countVar(fs, "count", 0, 1, maxCoReserve, "with --all: how many managers")
	cpus := countVar[int64](fs, "cpus", 0, 0, maxCPUs, "cpus to reserve")
	memStr := fs.String("mem", "", "memory to reserve, e.g. 4GiB")
	var tokens tokenFlags
	fs.Var(&tokens, "token", "a counted token to reserve, KIND=N (repeatable), e.g. gpus=1")
	commit := fs.Bool("commit", false, "commit at once: a lease instead of a hold")
	lease := fs.duration("lease", 0, 0, 0, "lease length when committing (default: the manager's)")
	hold := fs.duration("hold", 0, 0, 0, "hold for this long at most (default and limit: the manager's hold timeout)")
	user := fs.String("user", "", "who reserves, for owners' policies and access lists (default: your login name)")
	fs.alias("as", "user")
	reqID := fs.String("request-id", "", "request id; repeating a request with the same id returns the original reservation")
	var attrs attrFlags
	fs.Var(&attrs, "attr", "an attribute of your job owners' policies see as request.attrs.KEY, KEY=VALUE (repeatable; values are strings)")
	win := addWindowFlags(fs, "to book ahead (default: a lease from now)")
	return withClient(fs, t, args, 0, func(ctx context.Context, cl *client.Client, _ []string) error {
		spec := client.ReserveSpec{CPUs: *cpus, Tokens: tokens, Requirement: *queryExpr, Rank: *rank, At: *at, All: *all, Count: *count,
			Commit: *commit, Lease: *lease, Hold: *hold, User: *user, RequestID: *reqID, Attrs: attrs}
		var err error
		if spec.Begin, spec.Duration, err = win.window(time.Now()); err != nil {
			return err
		}
		if err := checkReserveFlags(&spec, *memStr); err != nil {
			return err
		}
		if t.keyErr != nil {
			fmt.Fprintf(c.stderr, "warning: no lasting client identity (%s): this reservation can be released only by this command or an admin\n", plainError(t.keyErr))
		}
		r := client.NewReserver(cl)
		defer r.Close()
		r.Progress = func(msg string) { fmt.Fprintln(c.stderr, msg) } // stderr: --json output stays clean
		r.OnOffers = afterQueryHook
		made, err := r.Make(ctx, spec)
		if err != nil {
			return err
		}
		res := made.Reservations
		if *all != "" {
			t.show(c, &wire.ReservationsReply{Reservations: res}, renderCoReserved(res, made.Tries))
			return nil
		}
		t.show(c, res[0], renderFellBack(made.Tries)+renderReserved(res[0]))
		return nil
	})
}

// checkReserveFlags checks the flags of reserve that go together or
// exclude each other, and reads --mem into s.Mem.
func checkReserveFlags(s *client.ReserveSpec, memStr string) error {
	if s.Duration > 0 && s.Lease != 0 {
		return usageErr("--lease and --duration are exclusive: a window ends after its --duration")
	}
	if memStr != "" {
		m, err := text.ParseSize(memStr)
		if err != nil || m == 0 {
			return usageErr("--mem %q: want a positive size such as 512MiB or 4GiB", memStr)
		}
		s.Mem = int64(m)
	}
	if s.CPUs == 0 && s.Mem == 0 && len(s.Tokens) == 0 {
		return usageErr("what to reserve? give --cpus, --mem or --token KIND=N")
	}
	if (s.At != "" && s.All != "") || (s.All != "" && s.Requirement != "") {
		return usageErr("give one of --query, --at or --all")
	}
	if (s.All != "") != (s.Count > 0) {
		return usageErr("--all EXPR and --count N go together")
	}
	if s.Lease != 0 && !s.Commit && s.All == "" && s.Duration == 0 {
		return usageErr("--lease applies with --commit (or --all, which commits)")
	}
	return nil
}

// renderCoReserved says what reserve --all did: the holds refused and
// replaced, then the reservations.
func renderCoReserved(res []*wire.Reservation, tries []client.Attempt) string {
	var b strings.Builder
	for _, a := range tries {
		if a.Err != nil {
			fmt.Fprintf(&b, "%s refused its hold (%s); the next offer took its place\n", a.Name, render.Message(strings.TrimPrefix(a.String(), a.Name+": "), time.Now()))
		}
	}
	fmt.Fprintf(&b, "co-reserved on %d managers (group %s):\n", len(res), res[0].Group)
	b.WriteString(renderReservations(res))
	return b.String()
}

// renderFellBack says which offers refused before one granted, if any.
func renderFellBack(tries []client.Attempt) string {
	if len(tries) <= 1 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "fell back %d time(s): ", len(tries)-1)
	for i, a := range tries[:len(tries)-1] {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(render.Message(a.String(), time.Now()))
	}
	b.WriteString("\n")
	return b.String()
}

func renderReserved(r *wire.Reservation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "reserved %s at %s: %s\n", r.Id, r.OwnerName, amountsText(r.Amounts))
	switch r.State {
	case wire.ReservationState_RESERVATION_STATE_HELD:
		fmt.Fprintf(&b, "held until %s; commit it (gridmgr commit %s) or it lapses\n", untilText(r.ExpiresUnixMs), r.Id)
		if r.Window {
			fmt.Fprintf(&b, "window %s\n", windowText(r))
		}
	case wire.ReservationState_RESERVATION_STATE_COMMITTED:
		if r.Window {
			fmt.Fprintf(&b, "committed: window %s; applications may run within it\n", windowText(r))
			break
		}
		fmt.Fprintf(&b, "committed, lease ends %s unless renewed (gridmgr renew %s)\n", untilText(r.ExpiresUnixMs), r.Id)
	default:
		fmt.Fprintf(&b, "%s: %s\n", stateText(r.State), render.Message(r.Reason, time.Now()))
	}
	return b.String()
}

// renderOp says what commit, renew or release did to a reservation.
func renderOp(op wire.ReservationOpRequest_Op, r *wire.Reservation, now time.Time) string {
	var b strings.Builder
	words := map[wire.ReservationOpRequest_Op][2]string{
		wire.ReservationOpRequest_OP_COMMIT:  {"commit", "committed"},
		wire.ReservationOpRequest_OP_RENEW:   {"renew", "renewed"},
		wire.ReservationOpRequest_OP_RELEASE: {"release", "released"},
	}[op]
	verb, what := words[0], words[1]
	switch {
	case r.State == wire.ReservationState_RESERVATION_STATE_COMMITTED:
		fmt.Fprintf(&b, "%s %s at %s: %s\n", what, r.Id, r.OwnerName, amountsText(r.Amounts))
		fmt.Fprintf(&b, "lease ends %s unless renewed (gridmgr renew %s)\n", render.Until(r.ExpiresUnixMs, now), r.Id)
	case r.State == wire.ReservationState_RESERVATION_STATE_RELEASED && op == wire.ReservationOpRequest_OP_RELEASE:
		fmt.Fprintf(&b, "released %s at %s: %s\n%s: %s\n", r.Id, r.OwnerName, amountsText(r.Amounts), render.When(r, now), render.Message(r.Reason, now))
		b.WriteString(removalsText(r.AppsRemoved))
	case render.Ended(r):
		fmt.Fprintf(&b, "%s at %s had already ended: nothing to %s\n%s: %s (%s)\n", r.Id, r.OwnerName, verb,
			render.When(r, now), stateText(r.State), render.Message(r.Reason, now))
	default:
		fmt.Fprintf(&b, "%s at %s is %s, %s\n", r.Id, r.OwnerName, stateText(r.State), render.When(r, now))
	}
	return b.String()
}

// removalsText says what the end of a reservation did to its
// applications, one line each.
func removalsText(rs []*wire.AppRemoval) string {
	var b strings.Builder
	for _, rm := range rs {
		was := ""
		if rm.State != "" {
			was = " (it was " + rm.State + ")"
		}
		switch {
		case rm.Removed && rm.Undone > 0:
			fmt.Fprintf(&b, "removed its application %s%s; host restored: %d changes undone\n", rm.Id, was, rm.Undone)
		case rm.Removed:
			fmt.Fprintf(&b, "removed its application %s%s; host restored\n", rm.Id, was)
		case rm.Error != "":
			fmt.Fprintf(&b, "could not remove its application %s%s: %s; the manager tries again when it next starts\n", rm.Id, was, rm.Error)
		default:
			fmt.Fprintf(&b, "removing its application %s%s: not done when the manager answered; it goes on (gridmgr app list shows what is left)\n", rm.Id, was)
		}
	}
	return b.String()
}

func cmdReservations(c *cli, args []string) error {
	fs := c.newFlags("reservations", "-n ADDR | -d DIR [flags]",
		"List one manager's reservations (live ones; --all adds those that ended\n"+
			"lately) and, per resource kind, its capacity and what is reserved.\n\n"+
			"Oldest first, in pages of at most 5,000: a page that is not the last ends\n"+
			"with the number to give --after for the next (in --json, \"next\"). Paging\n"+
			"misses no reservation that stays throughout and lists none twice, even as\n"+
			"reservations are made and end meanwhile. --all-pages lists every page.")
	t := addTarget(fs, true)
	all := fs.Bool("all", false, "include released and expired reservations still remembered")
	mine := fs.Bool("mine", false, "only this client's reservations")
	after := fs.String("after", "", "list the page after this reservation number (the previous page's next)")
	allPages := fs.Bool("all-pages", false, "follow every page and list them as one (--timeout bounds them all)")
	return withClient(fs, t, args, 0, func(ctx context.Context, cl *client.Client, _ []string) error {
		if *after != "" {
			if err := client.CheckReservationID(*after); err != nil {
				return usageErr("--after: %v", err)
			}
		}
		req := &wire.ReservationsRequest{All: *all, Mine: *mine, After: *after}
		var (
			rep *wire.ReservationsReply
			err error
		)
		if *allPages {
			rep, err = cl.AllReservations(ctx, req)
		} else {
			rep, err = cl.ReservationsPage(ctx, req)
		}
		if err != nil {
			return err
		}
		t.show(c, rep, render.Reservations(rep, time.Now(), func(next string) string {
			return fmt.Sprintf("next page: --after %s (--all-pages lists every page)", next)
		}))
		return nil
	})
}

// opCommand makes commit, renew and release: they find the reservation's
// owner from its number (through the manager at ADDR) and act there.
func opCommand(name string, op wire.ReservationOpRequest_Op, about string) func(c *cli, args []string) error {
	return func(c *cli, args []string) error {
		fs := c.newFlags(name, "-n ADDR | -d DIR [flags] ID [ID…]", about+
			"\nSeveral IDs (a co-reservation's group, as reserve --all printed it) are\n"+
			"acted on one after another; every one is tried, and the command fails if\nany failed.")
		t := addTarget(fs, true)
		var lease *time.Duration
		if op != wire.ReservationOpRequest_OP_RELEASE {
			lease = fs.duration("lease", 0, 0, 0, "lease length (default: the manager's; renew: the current lease)")
		}
		return withClient(fs, t, args, maxOpIDs, func(ctx context.Context, cl *client.Client, args []string) error {
			if len(args) == 0 {
				return usageErr("give a reservation number (or several)")
			}
			for _, id := range args {
				if err := client.CheckReservationID(id); err != nil {
					return usageErr("%v", err)
				}
			}
			var d time.Duration
			if lease != nil {
				d = *lease
			}
			r := client.NewReserver(cl)
			defer r.Close()
			var (
				done   []*wire.Reservation
				failed []string
				b      strings.Builder
			)
			for _, id := range args {
				res, err := r.Op(ctx, op, id, d)
				if err != nil {
					if len(args) == 1 {
						return err
					}
					failed = append(failed, fmt.Sprintf("%s: %s", id, plainError(err)))
					continue
				}
				done = append(done, res)
				b.WriteString(renderOp(op, res, time.Now()))
			}
			if len(args) == 1 {
				t.show(c, done[0], b.String())
				return nil
			}
			t.show(c, &wire.ReservationsReply{Reservations: done}, b.String())
			if len(failed) > 0 {
				return fmt.Errorf("%d of %d failed:\n  %s", len(failed), len(args), strings.Join(failed, "\n  "))
			}
			return nil
		})
	}
}

// maxCoReserve bounds reserve --count: a co-reservation asks for twice as
// many offers as managers, and a query answers at most client.MaxQueryLimit.
const maxCoReserve = client.MaxQueryLimit / 2

// maxOpIDs bounds the reservations one commit, renew or release names.
const maxOpIDs = 1000
