package node

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// fuzzCore is a Core with a live superior and a live inferior.
func fuzzCore(t testing.TB) (*Core, time.Time) {
	cfg := config.Default()
	cfg.Name = "fz"
	cfg.Superiors = []peeraddr.PeerAddrs{{Peer: "P-sup", Addrs: []string{"/ip4/127.0.0.1/tcp/1"}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewCore(cfg, "P-self", []string{"/ip4/127.0.0.1/tcp/2"}, rand.New(rand.NewPCG(1, 2)), nil)
	c.Start(now)
	c.Connected(now, "P-sup", true)
	c.Step(now, "P-sup", &wire.Envelope{Body: &wire.Envelope_Welcome{Welcome: &wire.Welcome{ProtocolVersion: 1, Name: "sup"}}})
	c.Connected(now, "P-inf", false)
	c.Step(now, "P-inf", &wire.Envelope{Body: &wire.Envelope_Hello{Hello: &wire.Hello{ProtocolVersion: 1, Name: "inf", Role: wire.Role_ROLE_INFERIOR}}})
	c.Ready()
	if c.Relations().Get("P-sup").State != relations.Up || c.Relations().Get("P-inf").State != relations.Up {
		t.Fatal("fuzz core not set up")
	}
	return c, now
}

// FuzzEnvelope feeds arbitrary bytes through the stream decoder (frames
// as pbio writes them, the frame limit, wire.UnmarshalEnvelope) and every envelope it yields to a Core from a superior, an
// inferior, a stranger and a client. Nothing may panic, and whatever the
// Core then asks for must be well formed.
func FuzzEnvelope(f *testing.F) {
	seeds := []*wire.Envelope{
		{Body: &wire.Envelope_Heartbeat{Heartbeat: &wire.Heartbeat{Seq: 1, EchoSeq: 1, HasAncestors: true, Ancestors: []*wire.Ancestor{{Peer: "P-x", Name: "x", Depth: 1}}}}},
		{Id: 3, Body: &wire.Envelope_TreeRequest{TreeRequest: &wire.TreeRequest{RequestId: 9, BudgetMs: 100}}},
		{ReplyTo: 1, Body: &wire.Envelope_TreeReply{TreeReply: &wire.TreeReply{Root: &wire.TreeNode{Name: "n"}}}},
		{Id: 4, Body: &wire.Envelope_PingRequest{PingRequest: &wire.PingRequest{Peer: "sup"}}},
		{Body: &wire.Envelope_Hello{Hello: &wire.Hello{ProtocolVersion: 1, Name: "h", Role: wire.Role_ROLE_INFERIOR}}},
		{Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: "bye"}}},
		{Id: 5, Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}},
		{Id: 6, Body: &wire.Envelope_AdminRequest{AdminRequest: &wire.AdminRequest{Command: "remove-inferior inf", All: true, RequestId: 7, Author: "P-sup"}}},
		{Id: 7, Body: &wire.Envelope_AdminRequest{AdminRequest: &wire.AdminRequest{Command: "tree 'x"}}},
		{ReplyTo: 2, Body: &wire.Envelope_AdminReply{AdminReply: &wire.AdminReply{Name: "n", Ok: true, Replies: []*wire.AdminReply{{Name: "m"}}}}},
		{Body: &wire.Envelope_Invite{Invite: &wire.Invite{Name: "i", Author: "P-sup"}}},
		{Body: &wire.Envelope_InviteReply{InviteReply: &wire.InviteReply{Accepted: true}}},
		{Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: "out", Removed: true}}},
	}
	for _, s := range seeds {
		var buf bytes.Buffer
		if err := pbio.NewDelimitedWriter(&buf).WriteMsg(s); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{0x06, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, now := fuzzCore(t)
		r := frames(data, 1<<16)
		for i := 0; i < 32; i++ {
			env := new(wire.Envelope)
			if err := r(env); err != nil {
				break
			}
			from := []string{"P-sup", "P-inf", "P-stranger"}[i%3]
			_ = c.Step(now, from, proto.Clone(env).(*wire.Envelope))
			_ = c.ClientStep(now, uint64(i+1), "client", proto.Clone(env).(*wire.Envelope))
			now = now.Add(300 * time.Millisecond)
			c.Tick(now)
			checkReady(t, c.Ready())
		}
		c.Tick(now.Add(time.Minute))
		checkReady(t, c.Ready())
	})
}

// frames reads data as a stream's frames, as node/p2p's stream reader
// does: a varint length up to max, then an envelope decoded by
// wire.UnmarshalEnvelope.
func frames(data []byte, max int) func(*wire.Envelope) error {
	return func(env *wire.Envelope) error {
		l, n := protowire.ConsumeVarint(data)
		if n < 0 || l > uint64(max) || uint64(len(data)-n) < l {
			return io.ErrUnexpectedEOF
		}
		frame := data[n : n+int(l)]
		data = data[n+int(l):]
		return wire.UnmarshalEnvelope(frame, env)
	}
}

func checkReady(t *testing.T, rd Ready) {
	t.Helper()
	for _, m := range rd.Messages {
		if m.To == "" || m.Env == nil || m.Env.Body == nil {
			t.Fatalf("malformed outgoing message %+v", m)
		}
		if _, err := proto.Marshal(m.Env); err != nil {
			t.Fatalf("outgoing message does not marshal: %v", err)
		}
	}
	for _, m := range rd.Client {
		if m.Env == nil || m.Env.Body == nil {
			t.Fatalf("malformed client reply %+v", m)
		}
		// reply_to 0 only tells a request with id 0 that it cannot be
		// answered.
		if m.Env.ReplyTo == 0 && m.Env.GetError().GetCode() != wire.ErrorReply_CODE_BAD_REQUEST {
			t.Fatalf("client reply with reply_to 0 that is not the id-0 refusal: %+v", m)
		}
	}
}

// FuzzReservationRequests decodes arbitrary bytes as client frames and
// hands each envelope to a Core with reservable cpus, memory and gpus, from
// one of two clients, with time moving on. Nothing may panic; a request
// answered with an error must leave the ledger as it was; and no kind may
// ever be reserved beyond its capacity.
func FuzzReservationRequests(f *testing.F) {
	res := func(id string, commit bool, am ...*wire.Amount) *wire.Envelope {
		return &wire.Envelope{Id: 1, Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{RequestId: id, Amounts: am, Commit: commit, LeaseMs: 60000}}}
	}
	op := func(o wire.ReservationOpRequest_Op, id, rid string) *wire.Envelope {
		return &wire.Envelope{Id: 2, Body: &wire.Envelope_ReservationOp{ReservationOp: &wire.ReservationOpRequest{RequestId: rid, Op: o, Id: id}}}
	}
	cpus := func(n int64) *wire.Amount { return &wire.Amount{Kind: "cpus", N: n} }
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	win := func(id string, aheadMs int64, durMs uint64, am ...*wire.Amount) *wire.Envelope {
		return &wire.Envelope{Id: 1, Body: &wire.Envelope_ReserveRequest{ReserveRequest: &wire.ReserveRequest{RequestId: id, Amounts: am, Commit: true,
			BeginUnixMs: epoch + aheadMs, DurationMs: durMs}}}
	}
	seeds := [][]*wire.Envelope{
		{res("a", false, cpus(2)), res("a", false, cpus(2)), op(wire.ReservationOpRequest_OP_COMMIT, "fz-1-"+fuzzTag, "c1")},
		{res("b", true, cpus(8), &wire.Amount{Kind: "gpus", N: 2}), op(wire.ReservationOpRequest_OP_RELEASE, "fz-1-"+fuzzTag, "r1")},
		{res("c", false, cpus(0)), res("d", false, &wire.Amount{Kind: "gpu", N: 1}), res("e", false, cpus(-1), cpus(3))},
		{res("f", true, &wire.Amount{Kind: "mem", N: 1 << 30}), op(wire.ReservationOpRequest_OP_RENEW, "fz-1-"+fuzzTag, "n1")},
		{{Id: 3, Body: &wire.Envelope_ReservationsRequest{ReservationsRequest: &wire.ReservationsRequest{All: true}}}},
		// Windows ahead, overlapping and adjacent, a renewal into one,
		// and the calendar read back.
		{win("w1", 3600_000, 7200_000, cpus(6)), win("w2", 5400_000, 3600_000, cpus(4)), win("w3", 10800_000, 3600_000, cpus(8)),
			res("l", true, cpus(4)), op(wire.ReservationOpRequest_OP_RENEW, "fz-4-"+fuzzTag, "n2"),
			{Id: 4, Body: &wire.Envelope_CalendarRequest{CalendarRequest: &wire.CalendarRequest{Kinds: []string{"cpus"}}}}},
		{win("x", -5, 1, cpus(1)), win("y", 1<<62, 1<<63, cpus(1)), {Id: 5, Body: &wire.Envelope_CalendarRequest{CalendarRequest: &wire.CalendarRequest{FromUnixMs: 1, ToUnixMs: 1 << 62}}}},
	}
	for _, seq := range seeds {
		var buf bytes.Buffer
		for _, s := range seq {
			if err := pbio.NewDelimitedWriter(&buf).WriteMsg(s); err != nil {
				f.Fatal(err)
			}
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := config.Default()
		cfg.Name = "fz"
		cfg.CPUs, cfg.Memory = 8, 4<<30
		cfg.Tokens = map[string]int64{"gpus": 2}
		cfg.Reservations.HoldTimeout = 2 * time.Second
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		c := NewCore(cfg, "P-self", nil, rand.New(rand.NewPCG(1, 2)), nil)
		c.Start(now)
		c.Ready()
		r := frames(data, 1<<16)
		for i := 0; i < 64; i++ {
			env := new(wire.Envelope)
			if err := r(env); err != nil {
				break
			}
			env.Id = uint64(i + 1)
			before := fmt.Sprint(c.Ledger().Usage(), c.Ledger().Live(), c.Ledger().List(nil))
			_ = c.ClientStep(now, uint64(i+1), []string{"alice", "bob"}[i%2], env)
			rd := c.Ready()
			checkReady(t, rd)
			for _, m := range rd.Client {
				if m.Env.GetError() != nil && fmt.Sprint(c.Ledger().Usage(), c.Ledger().Live(), c.Ledger().List(nil)) != before {
					t.Fatalf("request %v was refused (%s) but changed the ledger", env, m.Env.GetError().Message)
				}
			}
			for _, u := range c.Ledger().Usage() {
				if u.Used > u.Capacity || u.Used < 0 {
					t.Fatalf("%s reserved %d of %d", u.Kind, u.Used, u.Capacity)
				}
				// Never booked beyond capacity at any instant ahead.
				for _, st := range c.Ledger().Steps(u.Kind, now, now.Add(100*24*time.Hour), 0) {
					if st.Used > u.Capacity || st.Used < 0 {
						t.Fatalf("%s booked %d of %d at %v", u.Kind, st.Used, u.Capacity, st.At)
					}
				}
			}
			now = now.Add(time.Duration(i%4) * 700 * time.Millisecond)
			c.Tick(now)
			c.Ready()
		}
	})
}

// fuzzTag is the reservation tag of the fuzz Core's peer id.
var fuzzTag = reservation.Tag("P-self")
