package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/wire"
)

// ErrClosed is returned by calls on a client whose stream has ended.
var ErrClosed = errors.New("client: stream closed")

// RemoteError is an ErrorReply from a manager.
type RemoteError struct {
	Code    wire.ErrorReply_Code
	Message string
}

// Error is the code in words, then the manager's message: "not found:
// gm154 has no relation with \"x\"".
func (e *RemoteError) Error() string {
	return codeText(e.Code) + ": " + e.Message
}

// codeText is an error code in words: CODE_NOT_FOUND → "not found".
func codeText(c wire.ErrorReply_Code) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(c.String(), "CODE_")), "_", " ")
}

// Conn is one client stream to a manager, as node/p2p's ClientStream
// provides it over libp2p: envelopes in, envelopes out.
type Conn interface {
	// Peer is the manager's peer id.
	Peer() string
	// Self is the client's own peer id, as the manager authenticates it.
	Self() string
	// Send writes one envelope, giving up at deadline (zero: none). The
	// Client serialises calls.
	Send(env *wire.Envelope, deadline time.Time) error
	// Recv reads the next envelope; the Client calls it from one goroutine.
	Recv() (*wire.Envelope, error)
	// Close ends the session.
	Close() error
}

// Dialer opens Conns to managers. node/p2p's ClientHost is one: every
// Conn it opens speaks as the same client peer id.
type Dialer interface {
	Open(ctx context.Context, pa peeraddr.PeerAddrs) (Conn, error)
}

// Client talks to one manager over a Conn. Calls may be made from several
// goroutines; replies are matched to requests by id.
type Client struct {
	conn   Conn
	d      Dialer
	owned  io.Closer // closed by Close (DialNew's host)
	keyErr error     // Connect could not keep the identity

	wmu sync.Mutex // serialises Send

	mu       sync.Mutex
	pending  map[uint64]chan *wire.Envelope
	progress map[uint64]func(*wire.AdminReply) // --all progress by request id
	nextID   uint64
	err      error
	done     chan struct{}
}

// Dial connects to the manager at addr, a full multiaddr ending in
// /p2p/<peer id> (peeraddr.ParsePeerMaddr), through d.
func Dial(ctx context.Context, d Dialer, addr string) (*Client, error) {
	pa, err := peeraddr.ParsePeerMaddr(addr)
	if err != nil {
		return nil, err
	}
	return DialPeer(ctx, d, pa)
}

// DialPeer connects to the manager pa through d.
func DialPeer(ctx context.Context, d Dialer, pa peeraddr.PeerAddrs) (*Client, error) {
	conn, err := d.Open(ctx, pa)
	if err != nil {
		return nil, err
	}
	return New(conn, d), nil
}

// New runs a Client over conn; d (may be nil) is kept for the Reserver,
// which reaches other managers through it.
func New(conn Conn, d Dialer) *Client {
	c := &Client{conn: conn, d: d, pending: make(map[uint64]chan *wire.Envelope),
		progress: make(map[uint64]func(*wire.AdminReply)), done: make(chan struct{})}
	go c.readLoop()
	return c
}

// Peer is the manager's peer id.
func (c *Client) Peer() string { return c.conn.Peer() }

func (c *Client) readLoop() {
	defer close(c.done)
	for {
		env, err := c.conn.Recv()
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			// The manager closed its side (shutting down) or the stream
			// broke: close ours too, so that a manager waiting for our EOF
			// need not wait out its close timeout.
			_ = c.conn.Close()
			return
		}
		c.mu.Lock()
		if ar := env.GetAdminReply(); ar != nil && ar.Partial {
			// Progress of an --all command: the final reply follows.
			fn := c.progress[env.ReplyTo]
			c.mu.Unlock()
			if fn != nil {
				fn(ar)
			}
			continue
		}
		ch := c.pending[env.ReplyTo]
		delete(c.pending, env.ReplyTo)
		c.mu.Unlock()
		if ch != nil {
			ch <- env
		}
	}
}

// Call sends one request and waits for its answer. An ErrorReply comes back
// as a *RemoteError.
func (c *Client) Call(ctx context.Context, env *wire.Envelope) (*wire.Envelope, error) {
	return c.call(ctx, env, nil)
}

// call is Call; progress, if set, sees partial admin replies to env.
func (c *Client) call(ctx context.Context, env *wire.Envelope, progress func(*wire.AdminReply)) (*wire.Envelope, error) {
	ch := make(chan *wire.Envelope, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, closedErr(err)
	}
	c.nextID++
	env.Id = c.nextID
	c.pending[env.Id] = ch
	if progress != nil {
		c.progress[env.Id] = progress
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, env.Id)
		delete(c.progress, env.Id)
		c.mu.Unlock()
	}()

	dl, _ := ctx.Deadline()
	c.wmu.Lock()
	err := c.conn.Send(env, dl)
	c.wmu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("send request: %w", err)
	}
	select {
	case rep := <-ch:
		if e := rep.GetError(); e != nil {
			return rep, &RemoteError{Code: e.Code, Message: e.Message}
		}
		return rep, nil
	case <-c.done:
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return nil, closedErr(err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// closedErr is the error of a call on a session that ended with err. A
// stream the manager refused by one of its resource limits (it never read
// the request; libp2p agrees on the protocol lazily, so the refusal comes
// with the first reply) is also p2p.ErrLimit.
func closedErr(err error) error {
	if p2p.LimitReset(err) {
		return fmt.Errorf("%w: %w: %v", ErrClosed, p2p.ErrLimit, err)
	}
	return fmt.Errorf("%w: %v", ErrClosed, err)
}

// budget is the share of ctx's remaining time a manager may spend.
func budget(ctx context.Context, def time.Duration) uint32 {
	d := def
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl) * 9 / 10
	}
	return uint32(max(d, time.Millisecond) / time.Millisecond)
}

// ask sends a request and returns the part of the answer get picks, or an
// error naming what was asked if the answer is of another kind.
func ask[T comparable](ctx context.Context, c *Client, what string, env *wire.Envelope, get func(*wire.Envelope) T) (T, error) {
	var zero T
	rep, err := c.Call(ctx, env)
	if err != nil {
		return zero, err
	}
	out := get(rep)
	if out == zero {
		return zero, fmt.Errorf("the manager answered a %s request with %s (another version of the protocol?)", what, bodyName(rep))
	}
	return out, nil
}

// Admin sends one admin command string to the manager. A command that
// ran but failed comes back as a reply with Ok false (and Code); err is
// for transport failures.
func (c *Client) Admin(ctx context.Context, command string) (*wire.AdminReply, error) {
	return ask(ctx, c, "admin", &wire.Envelope{Body: &wire.Envelope_AdminRequest{AdminRequest: &wire.AdminRequest{Command: command}}},
		func(e *wire.Envelope) *wire.AdminReply { return e.GetAdminReply() })
}

// AdminAll sends command to every manager of the grid through this one.
// progress (called on the reading goroutine; it must not block) sees the
// answers as subtrees send them; the final reply holds every answer and
// the relations that did not answer within the budget (ctx's deadline).
func (c *Client) AdminAll(ctx context.Context, command string, progress func(*wire.AdminReply)) (*wire.AdminReply, error) {
	env := &wire.Envelope{Body: &wire.Envelope_AdminRequest{AdminRequest: &wire.AdminRequest{
		Command: command, All: true, BudgetMs: budget(ctx, 5*time.Second),
	}}}
	rep, err := c.call(ctx, env, progress)
	if err != nil {
		return nil, err
	}
	if ar := rep.GetAdminReply(); ar != nil {
		return ar, nil
	}
	return nil, fmt.Errorf("the manager answered an admin --all request with %s (another version of the protocol?)", bodyName(rep))
}

// bodyName names an envelope's body as the .proto does ("tree_reply"),
// for messages that should not show Go types.
func bodyName(env *wire.Envelope) string {
	m := env.ProtoReflect()
	if f := m.WhichOneof(m.Descriptor().Oneofs().ByName("body")); f != nil {
		return string(f.Name())
	}
	return "an empty envelope"
}

// Status asks the manager for its status.
func (c *Client) Status(ctx context.Context) (*wire.StatusReply, error) {
	return ask(ctx, c, "status", &wire.Envelope{Body: &wire.Envelope_StatusRequest{StatusRequest: &wire.StatusRequest{}}},
		(*wire.Envelope).GetStatusReply)
}

// Tree asks for the subtree under the manager, maxDepth levels deep (0:
// all). The manager answers within ctx's deadline, marking subtrees that
// did not answer in time.
func (c *Client) Tree(ctx context.Context, maxDepth uint32) (*wire.TreeNode, error) {
	return ask(ctx, c, "tree", &wire.Envelope{Body: &wire.Envelope_TreeRequest{TreeRequest: &wire.TreeRequest{
		BudgetMs: budget(ctx, 5*time.Second), MaxDepth: maxDepth,
	}}}, func(e *wire.Envelope) *wire.TreeNode { return e.GetTreeReply().GetRoot() })
}

// Ping asks the manager to answer (peer "") or to ping one of its
// relations (peer id or name) and report the round trip.
func (c *Client) Ping(ctx context.Context, peerOrName string) (*wire.PingReply, error) {
	return ask(ctx, c, "ping", &wire.Envelope{Body: &wire.Envelope_PingRequest{PingRequest: &wire.PingRequest{
		Peer: peerOrName, BudgetMs: budget(ctx, 5*time.Second),
	}}}, (*wire.Envelope).GetPingReply)
}

// Self is this client's peer id, as the manager authenticates it.
func (c *Client) Self() string { return c.conn.Self() }

// Close ends the session (and closes the host DialNew made).
func (c *Client) Close() error {
	err := c.conn.Close()
	if c.owned != nil {
		return c.owned.Close()
	}
	return err
}

// Done is closed when the session has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// Query asks the manager for offers. Zero fields of req take the manager's
// defaults (limit 10, want 1); Down and Up are taken as given, so set them
// (the CLI's defaults are 255: everywhere). The budget comes from ctx.
func (c *Client) Query(ctx context.Context, req *wire.QueryRequest) (*wire.QueryReply, error) {
	req.BudgetMs = budget(ctx, 5*time.Second)
	return ask(ctx, c, "query", &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: req}}, (*wire.Envelope).GetQueryReply)
}

// Resources asks for the manager's own live values.
func (c *Client) Resources(ctx context.Context) (*wire.ResourcesReply, error) {
	return ask(ctx, c, "resources", &wire.Envelope{Body: &wire.Envelope_ResourcesRequest{ResourcesRequest: &wire.ResourcesRequest{}}},
		(*wire.Envelope).GetResourcesReply)
}

// Calendar asks for the manager's calendar: each kind's use over
// [req.from, req.to) and the live reservations that meet it.
func (c *Client) Calendar(ctx context.Context, req *wire.CalendarRequest) (*wire.CalendarReply, error) {
	return ask(ctx, c, "calendar", &wire.Envelope{Body: &wire.Envelope_CalendarRequest{CalendarRequest: req}},
		(*wire.Envelope).GetCalendarReply)
}
