package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/wire"
)

// beginForms says which forms --begin, --from and --to accept.
const beginForms = "now, +2h (from now), 2026-11-23T09:00 or 2026-11-23 09:00 (local time), RFC 3339, or 09:00 (the next 09:00)"

// parseBegin reads a time ahead: "now", "+2h", a date and time (local
// unless it names its zone), or a clock time (the next one to come).
func parseBegin(flagName, s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return time.Time{}, nil
	case s == "now":
		return now, nil
	case strings.HasPrefix(s, "+"):
		d, err := time.ParseDuration(s[1:])
		if err != nil || d < 0 {
			return time.Time{}, usageErr("--%s %q: after + give a duration, such as +2h or +30m", flagName, s)
		}
		return now.Add(d), nil
	}
	if t, clock, ok := parseWhen(s, now); ok {
		if clock && !t.After(now) {
			t = t.AddDate(0, 0, 1) // the next one to come
		}
		return t, nil
	}
	if _, err := time.ParseDuration(s); err == nil {
		return time.Time{}, usageErr("--%s %q: a time ahead is written +%s (from now)", flagName, s, s)
	}
	return time.Time{}, usageErr("--%s %q: give %s", flagName, s, beginForms)
}

// windowFlags are --begin and --duration, shared by query and reserve.
type windowFlags struct {
	begin    *string
	duration *time.Duration
}

func addWindowFlags(fs *flagSet, what string) windowFlags {
	return windowFlags{
		begin:    fs.String("begin", "", "begin of the window "+what+": "+beginForms),
		duration: fs.Duration("duration", 0, "length of the window "+what+", e.g. 4h"),
	}
}

// window returns the window asked (zero begin: from now; zero duration:
// none asked).
func (w windowFlags) window(now time.Time) (time.Time, time.Duration, error) {
	b, err := parseBegin("begin", *w.begin, now)
	if err != nil {
		return time.Time{}, 0, err
	}
	if *w.duration < 0 {
		return time.Time{}, 0, usageErr("--duration %v: must be positive", *w.duration)
	}
	if !b.IsZero() && *w.duration == 0 {
		return time.Time{}, 0, usageErr("--begin needs --duration: how long the window lasts (e.g. --duration 4h)")
	}
	if !b.IsZero() && b.Add(*w.duration).Before(now) {
		return time.Time{}, 0, usageErr("the window %s–%s is already over", b.Format("2006-01-02 15:04"), b.Add(*w.duration).Format("15:04"))
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
	fromS := fs.String("from", "now", "from when: "+beginForms)
	toS := fs.String("to", "", "until when (same forms, or +DURATION from --from; default: 24h after --from)")
	return withClient(fs, t, args, 0, func(ctx context.Context, cl *client.Client, _ []string) error {
		now := time.Now()
		from, err := parseBegin("from", *fromS, now)
		if err != nil {
			return err
		}
		if from.IsZero() {
			from = now
		}
		var to time.Time
		if d, ok := strings.CutPrefix(*toS, "+"); ok {
			if dd, err := parseDays(d); err == nil {
				to = from.Add(dd)
			}
		}
		if to.IsZero() {
			if to, err = parseBegin("to", *toS, now); err != nil {
				return err
			}
		}
		if to.IsZero() {
			to = from.Add(24 * time.Hour)
		}
		if !to.After(from) {
			return usageErr("--to %s is not after --from %s", to.Format("2006-01-02 15:04"), from.Format("2006-01-02 15:04"))
		}
		req := &wire.CalendarRequest{FromUnixMs: from.UnixMilli(), ToUnixMs: to.UnixMilli()}
		if *kind != "" {
			req.Kinds = []string{*kind}
		}
		cr, err := cl.Calendar(ctx, req)
		if err != nil {
			return err
		}
		t.show(c, cr, renderCalendar(cr))
		return nil
	})
}

// parseDays is time.ParseDuration that also takes whole days ("1d", "7d").
func parseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		var d int
		if _, err := fmt.Sscanf(n, "%d", &d); err == nil && d >= 0 && fmt.Sprint(d) == n {
			return time.Duration(d) * 24 * time.Hour, nil
		}
	}
	return time.ParseDuration(s)
}

// renderCalendar draws each kind's timeline and lists the bookings.
func renderCalendar(cr *wire.CalendarReply) string {
	var b strings.Builder
	from, to := time.UnixMilli(cr.FromUnixMs), time.UnixMilli(cr.ToUnixMs)
	fmt.Fprintf(&b, "calendar of %s from %s to %s (times are local)\n", cr.Name, from.Format("Mon 2006-01-02 15:04"), to.Format("Mon 2006-01-02 15:04"))
	for _, k := range cr.Kinds {
		fmt.Fprintf(&b, "\n%s (capacity %s)\n", k.Kind, amountText(k.Kind, k.Capacity))
		w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "  FROM\tUNTIL\tBOOKED\tFREE\t")
		for i, s := range k.Steps {
			until := to
			if i+1 < len(k.Steps) {
				until = time.UnixMilli(k.Steps[i+1].AtUnixMs)
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", stamp(time.UnixMilli(s.AtUnixMs), from), stamp(until, from),
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
			stamp(time.UnixMilli(r.StartUnixMs), from), stamp(time.UnixMilli(r.EndUnixMs), from), amountsText(r.Amounts), holder)
	}
	w.Flush()
	if cr.More > 0 {
		fmt.Fprintf(&b, "  … and %d more\n", cr.More)
	}
	return b.String()
}

// stamp shows t as a clock time, with the date when it is not ref's day.
func stamp(t, ref time.Time) string {
	t, ref = t.Local(), ref.Local()
	if t.YearDay() == ref.YearDay() && t.Year() == ref.Year() {
		return t.Format("15:04:05")
	}
	return t.Format("Mon 01-02 15:04")
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
func renderEarliest(rep *wire.QueryReply, want int, d time.Duration, amounts string) string {
	e := rep.Earliest
	if e == nil || !e.Found {
		return fmt.Sprintf("no window of %v found in which %d manager(s) have it free (within the horizon, among the managers searched)\n\n", d, want)
	}
	b := time.UnixMilli(e.BeginUnixMs).Add(time.Second - time.Millisecond).Truncate(time.Second).Local() // whole seconds, not before it
	how := "--at " + e.Managers[0]
	if len(e.Managers) > 1 {
		how = fmt.Sprintf("--all 'name in [\"%s\"]' --count %d", strings.Join(e.Managers, `", "`), len(e.Managers))
	}
	return fmt.Sprintf("earliest window: %s – %s on %s\nbook it: gridmgr reserve -n ADDR %s%s --begin %s --duration %v\n\n",
		b.Format("Mon 2006-01-02 15:04:05"), stamp(b.Add(d), b), strings.Join(e.Managers, ", "), how, amounts, b.Format("2006-01-02T15:04:05"), d)
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
