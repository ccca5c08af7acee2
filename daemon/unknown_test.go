package daemon_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/wire"
)

// unknownFrame is a frame as a newer version would send it: an Envelope
// with id (0: a one-way message) and a body in oneof field 999, which this
// version does not know.
func unknownFrame(id uint64) []byte {
	inner := protowire.AppendTag(nil, 1, protowire.BytesType)
	inner = protowire.AppendString(inner, "a message from a newer version")
	var b []byte
	if id != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, id)
	}
	b = protowire.AppendTag(b, 999, protowire.BytesType)
	b = protowire.AppendBytes(b, inner)
	return append(binary.AppendUvarint(nil, uint64(len(b))), b...)
}

// frameStream writes and reads whole frames on a raw libp2p stream.
type frameStream struct {
	t   testing.TB
	s   network.Stream
	r   *bufio.Reader
	wmu sync.Mutex
}

func newFrameStream(t testing.TB, s network.Stream) *frameStream {
	_ = s.SetDeadline(time.Now().Add(30 * time.Second))
	return &frameStream{t: t, s: s, r: bufio.NewReader(s)}
}

func (f *frameStream) writeRaw(frame []byte) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	_, err := f.s.Write(frame)
	return err
}

func (f *frameStream) write(env *wire.Envelope) error {
	b, err := proto.Marshal(env)
	if err != nil {
		return err
	}
	return f.writeRaw(append(binary.AppendUvarint(nil, uint64(len(b))), b...))
}

func (f *frameStream) read() (*wire.Envelope, error) {
	n, err := binary.ReadUvarint(f.r)
	if err != nil {
		return nil, err
	}
	if n > 4<<20 {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(f.r, b); err != nil {
		return nil, err
	}
	env := new(wire.Envelope)
	return env, proto.Unmarshal(b, env)
}

func startSolo(t *testing.T) *daemon.Manager {
	t.Helper()
	cfg := config.Default()
	cfg.Name = "solo"
	cfg.DataDir = t.TempDir()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.HeartbeatInterval = 100 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m, err := daemon.Start(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

// TestUnknownBodyOnClientProtocol: a request whose body this version does
// not know is answered UNSUPPORTED with the request's id, and the session
// goes on; a request with id 0 is answered BAD_REQUEST with reply_to 0.
func TestUnknownBodyOnClientProtocol(t *testing.T) {
	m := startSolo(t)
	f := newFrameStream(t, openStream(t, rawHost(t), m.Addr(), "client"))
	defer f.s.Reset()

	if err := f.writeRaw(unknownFrame(7)); err != nil {
		t.Fatal(err)
	}
	rep, err := f.read()
	if err != nil {
		t.Fatalf("no answer to an unknown request: %v", err)
	}
	if rep.ReplyTo != 7 || rep.GetError().GetCode() != wire.ErrorReply_CODE_UNSUPPORTED || !strings.Contains(rep.GetError().GetMessage(), "field 999") {
		t.Fatalf("unknown request 7 answered %v, want UNSUPPORTED naming field 999, reply_to 7", rep)
	}

	if err := f.write(&wire.Envelope{Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}}); err != nil {
		t.Fatal(err)
	}
	if rep, err = f.read(); err != nil || rep.ReplyTo != 0 || rep.GetError().GetCode() != wire.ErrorReply_CODE_BAD_REQUEST {
		t.Fatalf("a request with id 0 answered %v, %v; want BAD_REQUEST with reply_to 0", rep, err)
	}

	if err := f.write(&wire.Envelope{Id: 8, Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}}); err != nil {
		t.Fatal(err)
	}
	if rep, err = f.read(); err != nil || rep.ReplyTo != 8 || rep.GetStatusReply().GetName() != "solo" {
		t.Fatalf("status on the same session afterwards: %v, %v", rep, err)
	}
}

// TestUnknownBodyOnMeshProtocol: a related manager that sends a body this
// version does not know (a newer peer in a rolling upgrade) keeps its
// relation: a one-way message is ignored, a request is answered
// UNSUPPORTED, both are counted in status.unknown_messages, and the
// channel goes on carrying heartbeats and requests.
func TestUnknownBodyOnMeshProtocol(t *testing.T) {
	m := startSolo(t)
	h := rawHost(t)
	f := newFrameStream(t, openStream(t, h, m.Addr(), "mesh"))
	defer f.s.Reset()

	// Join as an inferior, as a newer manager would.
	if err := f.write(&wire.Envelope{Body: &wire.Envelope_Hello{Hello: &wire.Hello{
		ProtocolVersion: node.ProtocolVersion, Name: "newer", Role: wire.Role_ROLE_INFERIOR, Version: "9.9.9",
	}}}); err != nil {
		t.Fatal(err)
	}
	if env, err := f.read(); err != nil || env.GetWelcome().GetName() != "solo" {
		t.Fatalf("hello answered %v, %v; want a welcome from solo", env, err)
	}

	// Heartbeats from here on, as a live inferior sends them; everything
	// the manager sends goes to got.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for seq := uint64(1); ; seq++ {
			if f.write(&wire.Envelope{Body: &wire.Envelope_Heartbeat{Heartbeat: &wire.Heartbeat{Seq: seq, IntervalMs: 50}}}) != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	got := make(chan *wire.Envelope, 64)
	readErr := make(chan error, 1)
	go func() {
		for {
			env, err := f.read()
			if err != nil {
				readErr <- err
				return
			}
			if env.GetHeartbeat() == nil {
				got <- env
			}
		}
	}()
	next := func(what string) *wire.Envelope {
		t.Helper()
		select {
		case env := <-got:
			return env
		case err := <-readErr:
			t.Fatalf("%s: the manager ended the channel: %v", what, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer", what)
		}
		return nil
	}

	if err := f.writeRaw(unknownFrame(0)); err != nil {
		t.Fatal(err)
	}
	if err := f.writeRaw(unknownFrame(5)); err != nil {
		t.Fatal(err)
	}
	if env := next("unknown request 5"); env.ReplyTo != 5 || env.GetError().GetCode() != wire.ErrorReply_CODE_UNSUPPORTED {
		t.Fatalf("unknown request 5 answered %v, want UNSUPPORTED with reply_to 5", env)
	}
	// A request after them is still served on the same channel: the
	// manager handles a channel's messages in order, so both unknown ones
	// have been dealt with when this answer comes.
	if err := f.write(&wire.Envelope{Id: 6, Body: &wire.Envelope_PingRequest{PingRequest: &wire.PingRequest{}}}); err != nil {
		t.Fatal(err)
	}
	if env := next("ping 6"); env.ReplyTo != 6 || env.GetPingReply().GetName() != "solo" {
		t.Fatalf("ping 6 answered %v", env)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := m.Driver.Request(ctx, &wire.Envelope{Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}})
	if err != nil {
		t.Fatal(err)
	}
	st := rep.GetStatusReply()
	if st.GetUnknownMessages() != 2 {
		t.Errorf("status.unknown_messages = %d, want 2", st.GetUnknownMessages())
	}
	if len(st.Relations) != 1 || st.Relations[0].Name != "newer" || st.Relations[0].State != wire.RelationState_RELATION_STATE_UP {
		t.Errorf("relations after the unknown messages: %v, want newer up", st.Relations)
	}
	for _, e := range st.Events {
		if e.Name == "newer" && !strings.Contains(e.What, "→ up") {
			t.Errorf("event for newer: %q", e.What)
		}
	}
}
