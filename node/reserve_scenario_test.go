package node_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/gridmgr/gridmgr/node/memnet"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// reserveScenario adds reservations to the query scenario harness:
// clients are peer ids ("alice", "bob"), reservations are remembered by
// label so that later commands can name them.
type reserveScenario struct {
	*scenario
	labels map[string]string // label → reservation number
	reqN   int
}

// amounts parses "cpus=2 mem=1GiB gpus=1".
func (s *reserveScenario) amounts(d *datadriven.TestData, text string) []*wire.Amount {
	var out []*wire.Amount
	for _, f := range strings.Fields(text) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			d.Fatalf(s.t, "amount %q is not KIND=N", f)
		}
		var n int64
		if k == "mem" {
			n = int64(size(s.t, v))
		} else {
			var err error
			if n, err = strconv.ParseInt(v, 10, 64); err != nil {
				d.Fatalf(s.t, "amount %q: %v", f, err)
			}
		}
		out = append(out, &wire.Amount{Kind: k, N: n})
	}
	return out
}

func (s *reserveScenario) arg(d *datadriven.TestData, key, def string) string {
	if !d.HasArg(key) {
		return def
	}
	var v string
	d.ScanArgs(s.t, key, &v)
	return v
}

func (s *reserveScenario) dur(d *datadriven.TestData, key string) uint64 {
	v := s.arg(d, key, "")
	if v == "" {
		return 0
	}
	dd, err := time.ParseDuration(v)
	if err != nil {
		d.Fatalf(s.t, "%s: %v", key, err)
	}
	return uint64(dd / time.Millisecond)
}

// reserveReq builds a ReserveRequest from the command's arguments:
// id=REQUEST_ID [commit] [lease=D] [hold=D] [user=U] [need=EXPR].
func (s *reserveScenario) reserveReq(d *datadriven.TestData, amounts string) *wire.ReserveRequest {
	s.reqN++
	return &wire.ReserveRequest{
		RequestId:   s.arg(d, "id", fmt.Sprintf("req-%d", s.reqN)),
		User:        s.arg(d, "user", ""),
		Amounts:     s.amounts(d, amounts),
		Commit:      d.HasArg("commit"),
		LeaseMs:     s.dur(d, "lease"),
		HoldMs:      s.dur(d, "hold"),
		Requirement: s.arg(d, "need", ""),
		BeginUnixMs: s.begin(d),
		DurationMs:  s.dur(d, "duration"),
	}
}

// begin reads begin=+D (from the virtual now), 0 if absent.
func (s *reserveScenario) begin(d *datadriven.TestData) int64 {
	return beginArg(s.scenario, d)
}

func beginArg(s *scenario, d *datadriven.TestData) int64 {
	if !d.HasArg("begin") {
		return 0
	}
	var v string
	d.ScanArgs(s.t, "begin", &v)
	dd, err := time.ParseDuration(strings.TrimPrefix(v, "+"))
	if err != nil {
		d.Fatalf(s.t, "begin: %v", err)
	}
	return s.n.Now().Add(dd).UnixMilli()
}

// calendar prints a manager's calendar over [from, to) relative to now.
func (s *reserveScenario) calendar(d *datadriven.TestData) string {
	at := s.arg(d, "at", "")
	rel := func(key, def string) int64 {
		dd, err := time.ParseDuration(strings.TrimPrefix(s.arg(d, key, def), "+"))
		if err != nil {
			d.Fatalf(s.t, "%s: %v", key, err)
		}
		return s.n.Now().Add(dd).UnixMilli()
	}
	req := &wire.CalendarRequest{FromUnixMs: rel("from", "0s"), ToUnixMs: rel("to", "24h")}
	if k := s.arg(d, "kind", ""); k != "" {
		req.Kinds = []string{k}
	}
	rep := s.ask(at, memnet.Client, &wire.Envelope{Body: &wire.Envelope_CalendarRequest{CalendarRequest: req}})
	if e := rep.GetError(); e != nil {
		return fmt.Sprintf("%s: %s", strings.TrimPrefix(e.Code.String(), "CODE_"), e.Message)
	}
	cr := rep.GetCalendarReply()
	now := s.n.Now()
	off := func(ms int64) string {
		d := time.UnixMilli(ms).Sub(now).Round(time.Second)
		if d < 0 {
			return d.String()
		}
		return "+" + d.String()
	}
	var b strings.Builder
	for _, k := range cr.Kinds {
		fmt.Fprintf(&b, "%s cap %d:", k.Kind, k.Capacity)
		for _, st := range k.Steps {
			fmt.Fprintf(&b, " %s=%d", off(st.AtUnixMs), st.Used)
		}
		b.WriteString("\n")
	}
	for _, r := range cr.Bookings {
		fmt.Fprintf(&b, "%s %s window=%v [%s, %s)\n", r.Id, stateName(r.State), r.Window, off(r.StartUnixMs), off(r.EndUnixMs))
	}
	return b.String()
}

// describe renders a reply: the reservation (with times relative to now)
// or the error.
func (s *reserveScenario) describe(rep *wire.Envelope, label string) string {
	if rep == nil {
		return "no answer"
	}
	if e := rep.GetError(); e != nil {
		return fmt.Sprintf("%s: %s", strings.TrimPrefix(e.Code.String(), "CODE_"), e.Message)
	}
	rr := rep.GetReservationReply()
	if rr == nil {
		return fmt.Sprintf("unexpected %T", rep.Body)
	}
	r := rr.Reservation
	if label != "" {
		s.labels[label] = r.Id
	}
	var am []string
	for _, a := range r.Amounts {
		am = append(am, fmt.Sprintf("%s=%d", a.Kind, a.N))
	}
	exp := time.UnixMilli(r.ExpiresUnixMs).Sub(s.n.Now()).Round(time.Millisecond)
	out := fmt.Sprintf("%s %s %s holder=%s expires in %v", r.Id, stateName(r.State), strings.Join(am, " "), r.HolderPeer, exp)
	if r.Reason != "" {
		out += " (" + r.Reason + ")"
	}
	if rr.Retry {
		out += " [retry: original answer]"
	}
	return out
}

func stateName(st wire.ReservationState) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "RESERVATION_STATE_"))
}

func (s *reserveScenario) ask(at, from string, env *wire.Envelope) *wire.Envelope {
	nd := s.n.Node(pid(at))
	sid := s.n.RequestFrom(pid(at), from, env)
	s.n.RunUntil(func() bool { return len(nd.Replies[sid]) > 0 }, 10*time.Second)
	if r := nd.Replies[sid]; len(r) > 0 {
		return r[0]
	}
	return nil
}

// usage prints each named manager's semaphores and live reservations.
func (s *reserveScenario) usage(names []string) string {
	var b strings.Builder
	for _, name := range names {
		nd := s.n.Node(pid(name))
		if !nd.Up() {
			fmt.Fprintf(&b, "%s: down\n", name)
			continue
		}
		l := nd.Core.Ledger()
		var parts []string
		for _, u := range l.Usage() {
			if u.Kind == reservation.Mem {
				parts = append(parts, fmt.Sprintf("mem %dMiB/%dMiB", u.Used>>20, u.Capacity>>20))
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %d/%d", u.Kind, u.Used, u.Capacity))
		}
		var live []string
		for _, r := range l.List(nil) {
			if r.State.Live() {
				live = append(live, r.ID+":"+r.State.String())
			}
		}
		fmt.Fprintf(&b, "%s: %s; live %d %v\n", name, strings.Join(parts, ", "), l.Live(), live)
	}
	return b.String()
}

// coreserve drives a reservation.Coordinator over the simulated network,
// as the client library does over libp2p, and prints each step.
func (s *reserveScenario) coreserve(d *datadriven.TestData) string {
	from := s.arg(d, "from", memnet.Client)
	at := strings.Split(s.arg(d, "at", ""), ",")
	count := len(at)
	if d.HasArg("count") {
		d.ScanArgs(s.t, "count", &count)
	}
	co, err := reservation.NewCoordinator(len(at), count, s.n.Now().Add(time.Duration(s.dur(d, "within"))*time.Millisecond+5*time.Second))
	if err != nil {
		return err.Error()
	}
	co.SetNames(at)
	amounts := s.amounts(d, d.Input)
	type pending struct {
		a   reservation.Action
		sid uint64
	}
	var out strings.Builder
	var inflight []pending
	for {
		for _, a := range co.Actions() {
			if a.Kind == reservation.ActCommit && d.HasArg("die-before-commit") {
				out.WriteString("the coordinator dies before phase 2\n")
				out.WriteString(s.usage(at))
				return out.String()
			}
			var env *wire.Envelope
			switch a.Kind {
			case reservation.ActHold:
				s.reqN++
				env = &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{
					RequestId: fmt.Sprintf("co-%d", s.reqN), Amounts: amounts, Group: "g1",
					BeginUnixMs: s.begin(d), DurationMs: s.dur(d, "duration")}}}
			case reservation.ActCommit, reservation.ActRelease:
				op := wire.ReservationOpRequest_OP_COMMIT
				if a.Kind == reservation.ActRelease {
					op = wire.ReservationOpRequest_OP_RELEASE
				}
				s.reqN++
				env = &wire.Envelope{Body: &wire.Envelope_ReservationOp{ReservationOp: &wire.ReservationOpRequest{
					RequestId: fmt.Sprintf("co-%d", s.reqN), Op: op, Id: a.ID}}}
			}
			fmt.Fprintf(&out, "→ %s\n", strings.TrimSpace(fmt.Sprintf("%s %s %s", at[a.Target], a.Kind, a.ID)))
			inflight = append(inflight, pending{a, s.n.RequestFrom(pid(at[a.Target]), from, env)})
		}
		if co.Done() && len(inflight) == 0 {
			break
		}
		// Run until some answer is in, then feed every answer in.
		answered := func() bool {
			for _, p := range inflight {
				if len(s.n.Node(pid(at[p.a.Target])).Replies[p.sid]) > 0 {
					return true
				}
			}
			return false
		}
		if !s.n.RunUntil(answered, 10*time.Second) {
			co.Tick(s.n.Now())
			continue
		}
		rest := inflight[:0]
		for _, p := range inflight {
			reps := s.n.Node(pid(at[p.a.Target])).Replies[p.sid]
			if len(reps) == 0 {
				rest = append(rest, p)
				continue
			}
			rep := reps[0]
			var rerr error
			id := ""
			if e := rep.GetError(); e != nil {
				rerr = fmt.Errorf("%s", e.Message)
			} else {
				id = rep.GetReservationReply().GetReservation().GetId()
			}
			fmt.Fprintf(&out, "← %s %s: %s\n", at[p.a.Target], p.a.Kind, s.describe(rep, ""))
			switch p.a.Kind {
			case reservation.ActHold:
				co.OnHold(s.n.Now(), p.a.Target, id, rerr)
			case reservation.ActCommit:
				co.OnCommit(s.n.Now(), p.a.Target, rerr)
			case reservation.ActRelease:
				co.OnRelease(s.n.Now(), p.a.Target, rerr)
			}
		}
		inflight = rest
	}
	got, err := co.Result()
	if err != nil {
		fmt.Fprintf(&out, "failed: %v\n", err)
	} else {
		fmt.Fprintf(&out, "committed %d\n", len(got))
	}
	out.WriteString(s.usage(at))
	return out.String()
}

func TestReserveScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/reserve", func(t *testing.T, path string) {
		s := &reserveScenario{scenario: &scenario{t: t}, labels: map[string]string{}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			s.t = t
			if out, ok := s.common(d); ok {
				return out
			}
			if out, ok := s.reserveCmd(d); ok {
				return out
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

// reserveCmd runs the reservation commands; ok is false for others.
func (s *reserveScenario) reserveCmd(d *datadriven.TestData) (string, bool) {
	t := s.t
	out := func() string {
		switch d.Cmd {
		case "reserve":
			// reserve at=NAME [from=CLIENT] [as=LABEL] [id=...] [commit] ...
			// with the amounts as input.
			at, from := s.arg(d, "at", ""), s.arg(d, "from", memnet.Client)
			req := s.reserveReq(d, d.Input)
			rep := s.ask(at, from, &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: req}})
			return s.describe(rep, s.arg(d, "as", ""))
		case "race":
			// race at=NAME: every input line "CLIENT AMOUNTS..." is sent
			// at the same instant; then the answers are printed.
			at := s.arg(d, "at", "")
			nd := s.n.Node(pid(at))
			var sids []uint64
			var who []string
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				client, am, _ := strings.Cut(line, " ")
				s.reqN++
				req := &wire.ReserveRequest{RequestId: fmt.Sprintf("race-%d", s.reqN), Amounts: s.amounts(d, am)}
				sids = append(sids, s.n.RequestFrom(pid(at), client, &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: req}}))
				who = append(who, client)
			}
			s.n.RunFor(100 * time.Millisecond)
			var b strings.Builder
			for i, sid := range sids {
				var rep *wire.Envelope
				if r := nd.Replies[sid]; len(r) > 0 {
					rep = r[0]
				}
				fmt.Fprintf(&b, "%s: %s\n", who[i], s.describe(rep, ""))
			}
			return b.String()
		case "op":
			// op commit|renew|release res=LABEL [from=CLIENT] [id=...] [lease=D]
			opName := d.CmdArgs[0].Key
			op, ok := map[string]wire.ReservationOpRequest_Op{
				"commit": wire.ReservationOpRequest_OP_COMMIT, "renew": wire.ReservationOpRequest_OP_RENEW,
				"release": wire.ReservationOpRequest_OP_RELEASE}[opName]
			if !ok {
				d.Fatalf(t, "unknown op %q", opName)
			}
			id := s.labels[s.arg(d, "res", "")]
			if id == "" {
				id = s.arg(d, "rid", "")
			}
			at := s.arg(d, "at", "")
			if at == "" {
				name, _, _, err := reservation.ParseID(id)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				at = name
			}
			s.reqN++
			rep := s.ask(at, s.arg(d, "from", memnet.Client), &wire.Envelope{Body: &wire.Envelope_ReservationOp{ReservationOp: &wire.ReservationOpRequest{
				RequestId: s.arg(d, "id", fmt.Sprintf("op-%d", s.reqN)), Op: op, Id: id, LeaseMs: s.dur(d, "lease")}}})
			return s.describe(rep, "")
		case "usage":
			var names []string
			for _, a := range d.CmdArgs {
				names = append(names, a.Key)
			}
			return s.usage(names)
		case "coreserve":
			return s.coreserve(d)
		case "calendar":
			return s.calendar(d)
		case "restart":
			for _, a := range d.CmdArgs {
				s.n.Start(pid(a.Key))
			}
			return "ok"
		case "disk":
			// disk NAME: the records the manager's store holds.
			nd := s.n.Node(pid(d.CmdArgs[0].Key))
			snap := nd.Disk.Snapshot()
			var b strings.Builder
			fmt.Fprintf(&b, "next seq %d, %d record(s)\n", snap.NextSeq, len(snap.Records))
			for _, r := range snap.Records {
				fmt.Fprintf(&b, "%s %s %v\n", r.ID, r.State, r.Reason)
			}
			return b.String()
		}
		return "\x00"
	}()
	return out, out != "\x00"
}
