package render

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/wire"
)

// Dur writes a measured duration: text.FormatMeasured.
func Dur(d time.Duration) string { return text.FormatMeasured(d) }

func StateName(s wire.RelationState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "RELATION_STATE_"))
}

// Tree draws a tree answer:
//
//	gm152  12D3…Xy9abc  /ip4/…
//	├── gm154  up  rtt 0.21ms
//	│   └── gm160  up  rtt 0.18ms
//	└── gm156  down  last heard 12s ago
func Tree(root *wire.TreeNode) string {
	var b strings.Builder
	addr := ""
	if len(root.Addrs) > 0 {
		addr = "  " + root.Addrs[0]
	}
	fmt.Fprintf(&b, "%s  %s%s\n", root.Name, text.ShortPeer(root.Peer), addr)
	if root.Incomplete != "" {
		fmt.Fprintf(&b, "  (%s)\n", IncompleteText(root.Incomplete))
	}
	var walk func(n *wire.TreeNode, prefix string)
	walk = func(n *wire.TreeNode, prefix string) {
		for i, ch := range n.Children {
			branch, next := "├── ", "│   "
			if i == len(n.Children)-1 {
				branch, next = "└── ", "    "
			}
			fmt.Fprintf(&b, "%s%s%s\n", prefix, branch, nodeLine(ch))
			walk(ch, prefix+next)
		}
	}
	walk(root, "")
	if missing := countIncomplete(root); missing > 0 {
		fmt.Fprintf(&b, "\n%d subtree(s) not shown in full: see the notes in brackets.\n", missing)
	}
	return b.String()
}

func nodeLine(n *wire.TreeNode) string {
	name := n.Name
	if name == "" {
		name = text.ShortPeer(n.Peer)
	}
	s := fmt.Sprintf("%s  %s", name, StateName(n.State))
	if n.State == wire.RelationState_RELATION_STATE_UP || n.State == wire.RelationState_RELATION_STATE_SUSPECT {
		s += "  rtt " + Dur(time.Duration(n.RttUs)*time.Microsecond)
	}
	if n.State != wire.RelationState_RELATION_STATE_UP && n.LastHeardMsAgo > 0 {
		s += "  last heard " + Dur(time.Duration(n.LastHeardMsAgo)*time.Millisecond) + " ago"
	}
	if n.Incomplete != "" && n.Incomplete != "down" {
		s += "  [" + IncompleteText(n.Incomplete) + "]"
	}
	return s
}

func IncompleteText(why string) string {
	switch why {
	case "timeout":
		return "subtree did not answer in time"
	case "depth limit":
		return "subtree below the depth limit"
	case "no budget":
		return "not asked: too little time left"
	case "duplicate":
		return "already counted elsewhere in this tree"
	}
	return why
}

func countIncomplete(n *wire.TreeNode) int {
	c := 0
	if n.Incomplete != "" && n.Incomplete != "down" {
		c++
	}
	for _, ch := range n.Children {
		c += countIncomplete(ch)
	}
	return c
}

// DefaultEvents is how many of its most recent relation events Status
// shows.
const DefaultEvents = 10

// Status renders a status reply with its DefaultEvents most recent events.
func Status(st *wire.StatusReply) string { return StatusEvents(st, DefaultEvents, "") }

// StatusEvents renders a status reply with its n most recent relation
// events (n <= 0: all it holds). hint, if not "", says how to see more
// when some are left out (e.g. "--events 0 shows all").
func StatusEvents(st *wire.StatusReply, n int, hint string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  (gridmgr %s, up %s)\n", st.Name, st.Version, Dur(time.Duration(st.UptimeMs)*time.Millisecond))
	fmt.Fprintf(&b, "peer id   %s\n", st.Peer)
	for i, a := range st.Addrs {
		label := "          "
		if i == 0 {
			label = "addrs     "
		}
		fmt.Fprintf(&b, "%s%s/p2p/%s\n", label, a, st.Peer)
	}
	fmt.Fprintf(&b, "host      %s (%s/%s), %d cpus, %s memory\n", st.Hostname, st.Os, st.Arch, st.Cpus, Bytes(st.MemoryBytes))
	if len(st.Ancestors) == 0 {
		fmt.Fprintf(&b, "ancestors none (a root)\n")
	} else {
		var names []string
		for _, a := range st.Ancestors {
			names = append(names, fmt.Sprintf("%s(%d)", a.Name, a.Depth))
		}
		fmt.Fprintf(&b, "ancestors %s\n", strings.Join(names, " "))
	}
	b.WriteString("\n")
	b.WriteString(Relations(st))
	if st.UnknownMessages > 0 {
		fmt.Fprintf(&b, "\nignored %d message(s) this version does not know, from newer peers (requests among them were answered UNSUPPORTED)\n", st.UnknownMessages)
	}
	if len(st.Failovers) > 0 {
		fmt.Fprintf(&b, "\nlooking for a superior in place of: %s (see the events)\n", strings.Join(st.Failovers, ", "))
	}
	if len(st.Events) > 0 {
		events := st.Events // oldest first
		if n > 0 && len(events) > n {
			events = events[len(events)-n:]
			if hint != "" {
				hint = "; " + hint
			}
			fmt.Fprintf(&b, "\nrecent events (the last %d of %d%s):\n", n, len(st.Events), hint)
		} else {
			b.WriteString("\nrecent events:\n")
		}
		for _, e := range events {
			fmt.Fprintf(&b, "  %8s ago  %s: %s\n", Dur(time.Duration(e.MsAgo)*time.Millisecond), e.Name, e.What)
		}
	}
	return b.String()
}

// OneLine is s on one line (newlines become spaces), clipped to 120 bytes.
func OneLine(s string) string {
	return text.Clip(strings.ReplaceAll(s, "\n", " "), 117)
}

// Bytes is n bytes for a person: "512 B", "1.5 MiB".
func Bytes(n uint64) string { return text.Bytes(n) }

// Resources renders a resources reply: the manager's values as queries
// see them — every variable an expression reads (values.matched, in the
// order of query.Variables), or from a manager that does not send them the
// few the offer carries, with its attributes — and the policy.
func Resources(rep *wire.ResourcesReply) string {
	v := rep.Values
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %s (%s/%s)\n", v.Name, v.Hostname, v.Os, v.Arch)
	if len(v.Matched) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		for _, a := range v.Matched {
			fmt.Fprintf(tw, "%s\t%s\n", a.Key, strings.ReplaceAll(valueNote(a), "\n", " "))
		}
		if rep.Policy != "" {
			fmt.Fprintf(tw, "policy\t%s\n", strings.ReplaceAll(rep.Policy, "\n", " "))
		}
		fmt.Fprintf(tw, "sampled\t%s ago\n", Dur(time.Duration(rep.SampledMsAgo)*time.Millisecond))
		tw.Flush()
		return b.String()
	}
	fmt.Fprintf(&b, "cpus       %d (%d free)\n", v.Cpus, v.CpusFree)
	fmt.Fprintf(&b, "mem        %s (%s free)\n", Bytes(uint64(v.Mem)), Bytes(uint64(max(v.MemFree, 0))))
	if v.CpuUtil >= 0 {
		fmt.Fprintf(&b, "cpu_util   %.1f%% (smoothed)\n", v.CpuUtil*100)
	} else {
		b.WriteString("cpu_util   unknown (not sampled yet)\n")
	}
	if v.NetMbps > 0 {
		fmt.Fprintf(&b, "net_mbps   %s\n", Number(v.NetMbps))
	} else {
		b.WriteString("net_mbps   unknown (the host does not report a link speed)\n")
	}
	var ks []string
	for k := range rep.Attributes {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	for _, k := range ks {
		fmt.Fprintf(&b, "attrs.%-5s %s\n", k, rep.Attributes[k])
	}
	if rep.Policy != "" {
		fmt.Fprintf(&b, "policy     %s\n", rep.Policy)
	}
	fmt.Fprintf(&b, "sampled    %s ago\n", Dur(time.Duration(rep.SampledMsAgo)*time.Millisecond))
	return b.String()
}

// valueNote is a variable's value as Resources shows it: bytes also in
// their unit, the utilisation also in percent, why a value is unknown.
func valueNote(a *wire.Attr) string {
	x, ok := query.VarOf(a.Key)
	if !ok {
		return a.Value
	}
	switch {
	case a.Value == "unknown" && x.Name == "cpu_util":
		return "unknown (not sampled yet)"
	case a.Value == "unknown" && x.Name == "net_mbps":
		return "unknown (the host does not report a link speed)"
	case a.Value == "unknown" && x.Live:
		return "unknown (not measured here; the owner may declare it in [resources])"
	case x.Name == "cpu_util":
		if f, err := strconv.ParseFloat(a.Value, 64); err == nil {
			return fmt.Sprintf("%s (%.1f%%, smoothed)", a.Value, f*100)
		}
	case x.Unit == "bytes":
		if n, err := strconv.ParseUint(a.Value, 10, 64); err == nil && n >= 1024 {
			return fmt.Sprintf("%s (%s)", a.Value, Bytes(n))
		}
	}
	return a.Value
}

// Number prints a number as people write it: a whole number in full
// (134217728, not 1.34218e+08), others with up to six significant digits.
func Number(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatFloat(f, 'f', 0, 64)
	}
	return strconv.FormatFloat(f, 'g', 6, 64)
}

// Amounts renders reservation amounts ("cpus 2, mem 1.0 GiB").
func Amounts(as []*wire.Amount) string {
	var parts []string
	for _, a := range as {
		if a.Kind == "mem" {
			parts = append(parts, "mem "+Bytes(uint64(a.N)))
		} else {
			parts = append(parts, fmt.Sprintf("%s %d", a.Kind, a.N))
		}
	}
	return strings.Join(parts, ", ")
}

// ReservationState is "held", "committed", "released" or "expired".
func ReservationState(s wire.ReservationState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "RESERVATION_STATE_"))
}

// Time shows t for a person, in the zone of now (the CLI passes its
// local time.Now(); a manager, its own): the clock, "15:04:05", when t is
// on now's day, else the weekday and date before it, "Thu 11-26
// 09:00:00". Every time gridmgr prints for a person, in a listing, a
// window or a refusal (Message), has this form; wire and JSON keep Unix
// milliseconds.
func Time(t, now time.Time) string {
	t = t.In(now.Location())
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04:05")
	}
	return t.Format("Mon 01-02 15:04:05")
}

// Span shows [s, e) as Time does s, and e with its date only when it is
// not s's day: "Thu 11-26 09:00:00–13:00:00".
func Span(s, e, now time.Time) string {
	return Time(s, now) + "–" + Time(e, s.In(now.Location()))
}

// Message is msg (a manager's refusal, a reservation's reason) with the
// times it names (text.MessageTime, RFC 3339 in UTC) shown as Time and
// Span show them, in now's zone: "not enough free from
// 2026-11-25T15:09:24Z to 2026-11-25T17:09:24Z" reads "not enough free
// from 16:09:24 to 18:09:24" in Paris that day.
func Message(msg string, now time.Time) string {
	return text.MessageTimes(msg, func(t, prev time.Time) string {
		if prev.IsZero() {
			return Time(t, now)
		}
		return Time(t, prev.In(now.Location()))
	})
}

// Until says when ms (Unix milliseconds) is, seen from now: "12:15:00
// (in 5m)".
func Until(ms int64, now time.Time) string {
	t := time.UnixMilli(ms)
	switch d := t.Sub(now).Round(time.Second); {
	case d < 0:
		return fmt.Sprintf("%s (%s ago)", Time(t, now), text.FormatDuration(-d))
	case d > 0:
		return fmt.Sprintf("%s (in %s)", Time(t, now), text.FormatDuration(d))
	}
	return Time(t, now) + " (now)"
}

// Ended says whether a reservation has ended (released or expired).
func Ended(r *wire.Reservation) bool {
	return r.State == wire.ReservationState_RESERVATION_STATE_RELEASED || r.State == wire.ReservationState_RESERVATION_STATE_EXPIRED
}

// When says when a live reservation expires ("expires 12:05:00 (in
// 4m)") or when an ended one ended ("ended 12:01:00 (3m ago)"): an
// ended record's expiry is only when the manager forgets it.
func When(r *wire.Reservation, now time.Time) string {
	if Ended(r) {
		return "ended " + Until(r.UpdatedUnixMs, now)
	}
	if r.Window && r.State == wire.ReservationState_RESERVATION_STATE_COMMITTED {
		return "window " + Window(r, now)
	}
	return "expires " + Until(r.ExpiresUnixMs, now)
}

// Window shows a reservation's window [start, end) from now, as Span
// does: "Wed 11-25 09:00:00–13:00:00 (begins in 2h)".
func Window(r *wire.Reservation, now time.Time) string {
	s, e := time.UnixMilli(r.StartUnixMs), time.UnixMilli(r.EndUnixMs)
	when := ""
	switch {
	case s.After(now):
		when = " (begins in " + text.FormatDuration(s.Sub(now).Round(time.Second)) + ")"
	case e.After(now):
		when = " (ends in " + text.FormatDuration(e.Sub(now).Round(time.Second)) + ")"
	}
	return Span(s, e, now) + when
}

// ReservationList renders reservations as a table; times are relative to now.
func ReservationList(rs []*wire.Reservation, now time.Time) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tMANAGER\tSTATE\tAMOUNTS\tUSER\tWHEN\tNOTE")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Id, r.OwnerName, ReservationState(r.State), Amounts(r.Amounts),
			r.User, When(r, now), Message(r.Reason, now))
	}
	tw.Flush()
	return b.String()
}

// Reservations renders a reservations reply: usage per kind, then the
// list, then how many more there are. When there are more, next (if not
// nil) says how to list the next page, which starts after rep.Next.
func Reservations(rep *wire.ReservationsReply, now time.Time, next func(after string) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d live reservation(s)\n", rep.Name, rep.Live)
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tCAPACITY\tRESERVED\tFREE")
	for _, u := range rep.Usage {
		capS, usedS, freeS := strconv.FormatInt(u.Capacity, 10), strconv.FormatInt(u.Used, 10), strconv.FormatInt(max(0, u.Capacity-u.Used), 10)
		if u.Kind == "mem" {
			capS, usedS, freeS = Bytes(uint64(u.Capacity)), Bytes(uint64(u.Used)), Bytes(uint64(max(0, u.Capacity-u.Used)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", u.Kind, capS, usedS, freeS)
	}
	tw.Flush()
	if len(rep.Reservations) > 0 {
		b.WriteString("\n")
		b.WriteString(ReservationList(rep.Reservations, now))
	}
	if rep.More > 0 {
		fmt.Fprintf(&b, "… and %d more (oldest shown first)\n", rep.More)
		if next != nil && rep.Next != "" {
			fmt.Fprintln(&b, next(rep.Next))
		}
	}
	return b.String()
}

// Relations renders the relations table of a status reply (what the admin
// command relations prints; Status includes it).
func Relations(st *wire.StatusReply) string {
	var b strings.Builder
	b.WriteString("relations:\n")
	if len(st.Relations) == 0 {
		b.WriteString("  none\n")
	} else {
		rels := slices.Clone(st.Relations)
		slices.SortStableFunc(rels, func(a, b *wire.RelationInfo) int {
			if a.Role != b.Role {
				return int(b.Role) - int(a.Role) // superiors first
			}
			return strings.Compare(a.Name, b.Name)
		})
		tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ROLE\tNAME\tSTATE\tFOR\tLAST HEARD\tRTT\tPEER\tNOTE")
		for _, r := range rels {
			role := "inferior"
			if r.Role == wire.Role_ROLE_SUPERIOR {
				role = "superior"
				if r.Origin != "" && r.Origin != "configured" {
					role += " (" + r.Origin + ")"
				}
			} else if r.Configured {
				role = "inferior*"
			}
			heard := "never"
			if r.Heard {
				heard = Dur(time.Duration(r.LastHeardMsAgo)*time.Millisecond) + " ago"
			}
			rtt := "-"
			if r.RttUs > 0 {
				rtt = Dur(time.Duration(r.RttUs) * time.Microsecond)
			}
			note := r.LastError
			if r.NextDialMs > 0 || r.DialAttempts > 0 {
				note = fmt.Sprintf("%d failed attempt(s), next in %s; %s", r.DialAttempts, Dur(time.Duration(r.NextDialMs)*time.Millisecond), r.LastError)
			}
			if r.StandsFor != "" && r.State == wire.RelationState_RELATION_STATE_UP {
				note = "in place of " + r.StandsFor
			}
			if r.Standby {
				note = "failed, replaced; dialled to move back once it is up for failover.settle. " + note
			}
			name := r.Name
			if name == "" {
				name = "?"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", role, name, StateName(r.State),
				Dur(time.Duration(r.SinceMsAgo)*time.Millisecond), heard, rtt, text.ShortPeer(r.Peer), OneLine(note))
		}
		tw.Flush()
		for _, r := range st.Relations {
			if r.Role == wire.Role_ROLE_INFERIOR && r.Configured {
				b.WriteString("  * named as a superior in the properties file, but it connected first as an inferior\n")
				break
			}
		}
	}
	return b.String()
}
