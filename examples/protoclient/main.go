package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	pb "example.com/protoclient/gridmgrpb"
)

// The client protocol id, and the most a manager sends (or accepts) in one
// frame.
const (
	clientProtocol = "/gridmgr/client/1.0.0"
	maxFrame       = 4 << 20
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("protoclient", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pskFile := fs.String("psk", "", "the grid's pre-shared key (swarm.key format), if it has one")
	timeout := fs.Duration("timeout", 20*time.Second, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: protoclient [-psk FILE] [-timeout D] MANAGER_MULTIADDR   (ending in /p2p/<peer id>)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := tour(ctx, fs.Arg(0), *pskFile, stdout); err != nil {
		fmt.Fprintln(stderr, "protoclient:", err)
		return 1
	}
	return 0
}

// tour is the whole conversation.
func tour(ctx context.Context, addr, pskFile string, out io.Writer) error {
	m, err := ma.NewMultiaddr(addr)
	if err != nil {
		return fmt.Errorf("manager address %q: %w", addr, err)
	}
	ai, err := peer.AddrInfoFromP2pAddr(m)
	if err != nil {
		return fmt.Errorf("manager address %q must end in /p2p/<peer id>: %w", addr, err)
	}
	h, err := newHost(pskFile)
	if err != nil {
		return err
	}
	defer h.Close()
	fmt.Fprintf(out, "client peer %s\n", h.ID())

	entry, err := open(ctx, h, *ai)
	if err != nil {
		return err
	}
	defer entry.close()

	// Two requests in flight at once: the replies may come in any order and
	// are told apart by reply_to.
	statusID, err := entry.send(&pb.Envelope{Body: &pb.Envelope_StatusRequest{StatusRequest: &pb.StatusRequest{}}})
	if err != nil {
		return err
	}
	queryID, err := entry.send(&pb.Envelope{Body: &pb.Envelope_QueryRequest{QueryRequest: &pb.QueryRequest{
		Requirement: "cpus_free >= 1",
		Rank:        "cpus_free",
		User:        "protoclient",
		Cpus:        1,
		Down:        255, // 0 would search the entry manager only
		Up:          255,
		Want:        5, // climb above the entry until 5 offers are found
		Limit:       5,
		BudgetMs:    5000,
	}}})
	if err != nil {
		return err
	}
	replies := map[uint64]*pb.Envelope{}
	for len(replies) < 2 {
		env, err := entry.recv()
		if err != nil {
			return err
		}
		if env.ReplyTo != statusID && env.ReplyTo != queryID {
			return fmt.Errorf("a reply to %d, which was never asked", env.ReplyTo)
		}
		replies[env.ReplyTo] = env
	}
	st, err := body(replies[statusID], (*pb.Envelope).GetStatusReply)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	fmt.Fprintf(out, "manager %s %s (gridmgr %s), %d relation(s), up %s\n",
		st.Name, st.Peer, st.Version, len(st.Relations), time.Duration(st.UptimeMs)*time.Millisecond)
	qr, err := body(replies[queryID], (*pb.Envelope).GetQueryReply)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	fmt.Fprintf(out, "query: %d offer(s), %d matched, %d manager(s) visited, %d missing\n",
		len(qr.Offers), qr.Matched, qr.Visited, len(qr.Missing))
	for i, o := range qr.Offers {
		fmt.Fprintf(out, "offer %d: %s %s cpus_free=%d/%d mem_free=%d/%d rank=%g\n",
			i+1, o.Name, o.Peer, o.CpusFree, o.Cpus, o.MemFree, o.Mem, o.Rank)
	}
	if len(qr.Offers) == 0 {
		return errors.New("no manager offers a free cpu")
	}

	// Reserve at the owner of the best offer: the entry itself, or a
	// session of its own opened from the offer's peer id and addresses.
	best := qr.Offers[0]
	owner := entry
	if best.Peer != ai.ID.String() {
		pid, err := peer.Decode(best.Peer)
		if err != nil {
			return fmt.Errorf("offer from %s: peer id: %w", best.Name, err)
		}
		oai := peer.AddrInfo{ID: pid}
		for _, a := range best.Addrs {
			if m, err := ma.NewMultiaddr(a); err == nil {
				oai.Addrs = append(oai.Addrs, m)
			}
		}
		if owner, err = open(ctx, h, oai); err != nil {
			return err
		}
		defer owner.close()
	}
	reserve := &pb.ReserveRequest{
		RequestId: newRequestID(), // a retry carries the same one
		User:      "protoclient",
		Amounts:   []*pb.Amount{{Kind: "cpus", N: 1}},
		// HoldMs 0: the owner's hold timeout; Commit false: a hold.
	}
	rr, err := call(owner, &pb.Envelope{Body: &pb.Envelope_ReserveRequest{ReserveRequest: reserve}}, (*pb.Envelope).GetReservationReply)
	if err != nil {
		return fmt.Errorf("reserve at %s: %w", best.Name, err)
	}
	res := rr.Reservation
	fmt.Fprintf(out, "reserved %s at %s: %s, %s until %s (request id %s)\n", res.Id, res.OwnerName,
		amounts(res.Amounts), res.State, time.UnixMilli(res.ExpiresUnixMs).UTC().Format(time.RFC3339), reserve.RequestId)

	// The same request again, as after a lost connection: the original
	// reservation comes back, marked retry, and nothing more is reserved.
	again, err := call(owner, &pb.Envelope{Body: &pb.Envelope_ReserveRequest{ReserveRequest: reserve}}, (*pb.Envelope).GetReservationReply)
	if err != nil {
		return fmt.Errorf("retry of the reservation: %w", err)
	}
	if !again.Retry || again.Reservation.GetId() != res.Id {
		return fmt.Errorf("retry of request %s answered %s (retry=%t), want %s (retry=true)",
			reserve.RequestId, again.Reservation.GetId(), again.Retry, res.Id)
	}
	fmt.Fprintf(out, "retry: %s (retry=%t)\n", again.Reservation.Id, again.Retry)

	rel, err := call(owner, &pb.Envelope{Body: &pb.Envelope_ReservationOp{ReservationOp: &pb.ReservationOpRequest{
		RequestId: newRequestID(), Op: pb.ReservationOpRequest_OP_RELEASE, Id: res.Id,
	}}}, (*pb.Envelope).GetReservationReply)
	if err != nil {
		return fmt.Errorf("release %s: %w", res.Id, err)
	}
	if rel.Reservation.GetState() != pb.ReservationState_RESERVATION_STATE_RELEASED {
		return fmt.Errorf("release %s: the reservation is %s afterwards", res.Id, rel.Reservation.GetState())
	}
	fmt.Fprintf(out, "released %s: %s (%s)\n", rel.Reservation.Id, rel.Reservation.State, rel.Reservation.Reason)
	return nil
}

// newHost makes the client's libp2p host: TCP, Noise, yamux, no listening,
// and the grid's pre-shared key if it has one. Its key is fresh, so its
// peer id (the reservations' holder) lives as long as this process.
func newHost(pskFile string) (host.Host, error) {
	opts := []libp2p.Option{
		libp2p.NoListenAddrs,
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.DisableRelay(),
		libp2p.DisableMetrics(),
		libp2p.UserAgent("gridmgr-protoclient"),
	}
	if pskFile != "" {
		f, err := os.Open(pskFile)
		if err != nil {
			return nil, fmt.Errorf("pre-shared key: %w", err)
		}
		psk, err := pnet.DecodeV1PSK(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("pre-shared key %s: %w", pskFile, err)
		}
		opts = append(opts, libp2p.PrivateNetwork(psk))
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("libp2p host: %w", err)
	}
	return h, nil
}

// session is one long-lived client stream. Every frame is an unsigned
// varint (the length of what follows), then one protobuf Envelope.
type session struct {
	s      network.Stream
	r      *bufio.Reader
	w      *bufio.Writer
	lastID uint64
}

func open(ctx context.Context, h host.Host, ai peer.AddrInfo) (*session, error) {
	if err := h.Connect(ctx, ai); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", ai.ID, err)
	}
	s, err := h.NewStream(ctx, ai.ID, clientProtocol)
	if err != nil {
		return nil, fmt.Errorf("open %s to %s: %w", clientProtocol, ai.ID, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	return &session{s: s, r: bufio.NewReader(s), w: bufio.NewWriter(s)}, nil
}

// send gives env the next id (never 0: a request with id 0 cannot be
// answered) and writes it as one frame.
func (s *session) send(env *pb.Envelope) (uint64, error) {
	s.lastID++
	env.Id = s.lastID
	b, err := proto.Marshal(env)
	if err != nil {
		return 0, err
	}
	if len(b) > maxFrame {
		return 0, fmt.Errorf("request of %d bytes is over the %d-byte frame limit", len(b), maxFrame)
	}
	if _, err := s.w.Write(binary.AppendUvarint(nil, uint64(len(b)))); err != nil {
		return 0, fmt.Errorf("send: %w", err)
	}
	if _, err := s.w.Write(b); err != nil {
		return 0, fmt.Errorf("send: %w", err)
	}
	if err := s.w.Flush(); err != nil {
		return 0, fmt.Errorf("send: %w", err)
	}
	return env.Id, nil
}

// recv reads one frame.
func (s *session) recv() (*pb.Envelope, error) {
	n, err := binary.ReadUvarint(s.r)
	if err != nil {
		return nil, fmt.Errorf("read frame length: %w", err)
	}
	if n > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes is over the %d-byte limit", n, maxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(s.r, b); err != nil {
		return nil, fmt.Errorf("read frame: %w", err)
	}
	env := new(pb.Envelope)
	if err := proto.Unmarshal(b, env); err != nil {
		return nil, fmt.Errorf("decode frame: %w", err)
	}
	return env, nil
}

// close ends the session: half-close (the manager reads our end), then
// release the stream. Only once every reply is in: a manager that reads
// the end of a session drops the replies still due on it.
func (s *session) close() {
	_ = s.s.CloseWrite()
	_ = s.s.Close()
}

// call sends one request and waits for the reply that names it.
func call[T comparable](s *session, env *pb.Envelope, get func(*pb.Envelope) T) (T, error) {
	var zero T
	id, err := s.send(env)
	if err != nil {
		return zero, err
	}
	rep, err := s.recv()
	if err != nil {
		return zero, err
	}
	if rep.ReplyTo != id {
		return zero, fmt.Errorf("a reply to %d, which was never asked (waiting for %d)", rep.ReplyTo, id)
	}
	return body(rep, get)
}

// body picks the expected reply out of env, or turns an ErrorReply into
// an error.
func body[T comparable](env *pb.Envelope, get func(*pb.Envelope) T) (T, error) {
	var zero T
	if e := env.GetError(); e != nil {
		return zero, fmt.Errorf("manager answered %s: %s", e.Code, e.Message)
	}
	v := get(env)
	if v == zero {
		return zero, fmt.Errorf("unexpected answer %T", env.Body)
	}
	return v, nil
}

func amounts(as []*pb.Amount) string {
	s := ""
	for i, a := range as {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", a.Kind, a.N)
	}
	return s
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
