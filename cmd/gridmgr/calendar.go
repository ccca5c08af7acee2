package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/wire"
)

// windowFlags are --begin and --duration, shared by query and reserve.
type windowFlags struct {
	begin    *timeFlag
	duration *time.Duration
}

func addWindowFlags(fs *flagSet, what string) windowFlags {
	return windowFlags{
		begin:    fs.when("begin", "", true, "begin of the window "+what+": "+aheadForms),
		duration: fs.duration("duration", 0, positive, 0, "length of the window "+what+", e.g. 4h or 2d"),
	}
}

// window returns the window asked (zero begin: from now; zero duration:
// none asked).
func (w windowFlags) window(now time.Time) (time.Time, time.Duration, error) {
	b, err := w.begin.at("begin", now)
	if err != nil {
		return time.Time{}, 0, err
	}
	if !b.IsZero() && *w.duration == 0 {
		return time.Time{}, 0, usageErr("--begin needs --duration: how long the window lasts (e.g. --duration 4h)")
	}
	if !b.IsZero() && b.Add(*w.duration).Before(now) {
		return time.Time{}, 0, usageErr("the window %s is already over", render.Span(b, b.Add(*w.duration), now))
	}
	return b, *w.duration, nil
}

func cmdCalendar(c *cli, args []string) error {
	fs := c.newFlags("calendar", "-n ADDR | -d DIR [flags]",
		"Show a manager's calendar: for each resource kind, how much is booked from\n"+
			"--from to --to (a timeline of steps: each line holds until the next), and\n"+
			"the live reservations whose windows meet it. Reservations made with\n"+
			"--begin/--duration are windows ahead; the others are leases from now.\n\n"+
			"Examples:\n"+
			"  gridmgr calendar -d DIR\n"+
			"  gridmgr calendar -n ADDR --kind cpus --from 09:00 --to +1d")
	t := addTarget(fs, true)
	kind := fs.String("kind", "", "only this kind (default: every kind), e.g. cpus")
	fromF := fs.when("from", "now", true, "from when: "+aheadForms)
	toF := fs.when("to", "", true, "until when (the same forms, but +DURATION is from --from; default: 24h after --from)")
	return withClient(fs, t, args, 0, func(ctx context.Context, cl *client.Client, _ []string) error {
		now := time.Now()
		from, err := fromF.at("from", now)
		if err != nil {
			return err
		}
		if from.IsZero() {
			from = now
		}
		base := now
		if strings.HasPrefix(strings.TrimSpace(toF.s), "+") {
			base = from // --to +6h: six hours of calendar
		}
		to, err := toF.at("to", base)
		if err != nil {
			return err
		}
		if to.IsZero() {
			to = from.Add(24 * time.Hour)
		}
		if !to.After(from) {
			return usageErr("--to %s is not after --from %s", render.Time(to, now), render.Time(from, now))
		}
		req := &wire.CalendarRequest{FromUnixMs: from.UnixMilli(), ToUnixMs: to.UnixMilli()}
		if *kind != "" {
			req.Kinds = []string{*kind}
		}
		cr, err := cl.Calendar(ctx, req)
		if err != nil {
			return err
		}
		t.show(c, cr, renderCalendar(cr, now))
		return nil
	})
}

// renderCalendar draws each kind's timeline and lists the bookings,
// times as render.Time shows them from now.
func renderCalendar(cr *wire.CalendarReply, now time.Time) string {
	var b strings.Builder
	from, to := time.UnixMilli(cr.FromUnixMs), time.UnixMilli(cr.ToUnixMs)
	fmt.Fprintf(&b, "calendar of %s from %s to %s (times are local)\n", cr.Name, render.Time(from, now), render.Time(to, now))
	for _, k := range cr.Kinds {
		fmt.Fprintf(&b, "\n%s (capacity %s)\n", k.Kind, amountText(k.Kind, k.Capacity))
		w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "  FROM\tUNTIL\tBOOKED\tFREE\t")
		for i, s := range k.Steps {
			until := to
			if i+1 < len(k.Steps) {
				until = time.UnixMilli(k.Steps[i+1].AtUnixMs)
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", render.Time(time.UnixMilli(s.AtUnixMs), now), render.Time(until, now),
				amountText(k.Kind, s.Used), amountText(k.Kind, max(0, k.Capacity-s.Used)), bar(s.Used, k.Capacity, 20))
		}
		w.Flush()
		if k.Truncated {
			fmt.Fprintf(&b, "  (more steps than shown: narrow --from/--to)\n")
		}
	}
	if len(cr.Bookings) == 0 {
		b.WriteString("\nno reservation meets this window\n")
		return b.String()
	}
	fmt.Fprintf(&b, "\nreservations meeting this window:\n")
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  ID\tSTATE\tFROM\tUNTIL\tAMOUNTS\tHOLDER\t")
	for _, r := range cr.Bookings {
		kind := "lease"
		if r.Window {
			kind = "window"
		}
		holder := r.User
		if holder == "" {
			holder = "peer …" + r.HolderPeer[max(0, len(r.HolderPeer)-8):]
		}
		fmt.Fprintf(w, "  %s\t%s %s\t%s\t%s\t%s\t%s\t\n", r.Id, stateText(r.State), kind,
			render.Time(time.UnixMilli(r.StartUnixMs), now), render.Time(time.UnixMilli(r.EndUnixMs), now), amountsText(r.Amounts), holder)
	}
	w.Flush()
	if cr.More > 0 {
		fmt.Fprintf(&b, "  … and %d more\n", cr.More)
	}
	return b.String()
}

// bar is a text gauge of used out of capacity.
func bar(used, capacity int64, width int) string {
	if capacity <= 0 {
		return ""
	}
	n := int(min(used, capacity) * int64(width) / capacity)
	if used > 0 && n == 0 {
		n = 1
	}
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

// amountText shows an amount of kind: memory in binary units.
func amountText(kind string, n int64) string {
	if kind == "mem" {
		return fmtBytes(uint64(max(0, n)))
	}
	return fmt.Sprint(n)
}

func msOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// windowText shows a reservation's window from now.
func windowText(r *wire.Reservation) string { return render.Window(r, time.Now()) }

// renderEarliest says when and where an earliest search found a window,
// and how to book it (amounts are the reserve flags of the query's).
func renderEarliest(e *wire.Earliest, d time.Duration, amounts string, now time.Time) string {
	b := time.UnixMilli(e.BeginUnixMs).Add(time.Second - time.Millisecond).Truncate(time.Second).Local() // whole seconds, not before it
	how := "--at " + e.Managers[0]
	if len(e.Managers) > 1 {
		how = fmt.Sprintf("--all 'name in [\"%s\"]' --count %d", strings.Join(e.Managers, `", "`), len(e.Managers))
	}
	return fmt.Sprintf("earliest window: %s on %s\nbook it: gridmgr reserve -n ADDR %s%s --begin %s --duration %s\n\n",
		render.Span(b, b.Add(d), now), strings.Join(e.Managers, ", "), how, amounts, b.Format("2006-01-02T15:04:05"), text.FormatDuration(d))
}

// noWindow is the failure of an earliest search that found no window of d
// on want managers beginning from from to from+horizon.
func noWindow(rep *wire.QueryReply, want int, d, horizon time.Duration, from, now time.Time) error {
	msg := fmt.Sprintf("no window of %s in which %d manager(s) have it free begins between %s and %s (--horizon %s); %d manager(s) searched",
		text.FormatDuration(d), want, render.Time(from, now), render.Time(from.Add(horizon), now), text.FormatDuration(horizon), rep.Visited)
	if len(rep.Missing) > 0 {
		var ms []string
		for _, m := range rep.Missing {
			ms = append(ms, fmt.Sprintf("%s (%s)", m.Name, m.Why))
		}
		msg += "; did not answer: " + strings.Join(ms, ", ")
	}
	return errors.New(msg)
}

// bookHint is the reserve flags for the amounts a query names.
func bookHint(cpus int64, mem string, tokens tokenFlags) string {
	s := ""
	if cpus > 0 {
		s += fmt.Sprintf(" --cpus %d", cpus)
	}
	if mem != "" {
		s += " --mem " + mem
	}
	for _, t := range tokens {
		s += fmt.Sprintf(" --token %s=%d", t.Kind, t.N)
	}
	return s
}
