package p2p

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	"github.com/libp2p/go-msgio/pbio"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gridmgr/gridmgr/wire"
)

// ErrAddr is wrapped by errors about a manager address given to Dial.
var ErrAddr = errors.New("p2p: bad manager address")

// ErrClosed is returned by calls on a client whose stream has ended.
var ErrClosed = errors.New("p2p: client stream closed")

// RemoteError is an ErrorReply from a manager.
type RemoteError struct {
	Code    wire.ErrorReply_Code
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("manager answered %s: %s", e.Code, e.Message)
}

// ClientOptions configure Dial.
type ClientOptions struct {
	PSK pnet.PSK       // the grid's pre-shared key, if it has one
	Key crypto.PrivKey // client identity; nil: a fresh key per client
	// MaxFrame bounds one reply, bytes. Default 4 MiB.
	MaxFrame int
}

// Client talks to one manager over /gridmgr/client/1.0.0. Calls may be made
// from several goroutines; replies are matched by request id.
type Client struct {
	h       host.Host
	ownHost bool
	s       network.Stream
	peer    peer.ID

	wmu sync.Mutex
	bw  *bufio.Writer
	w   pbio.Writer

	mu       sync.Mutex
	pending  map[uint64]chan *wire.Envelope
	progress map[uint64]func(*wire.AdminReply) // --all progress by request id
	nextID   uint64
	err      error
	done     chan struct{}
}

// Dial connects to the manager at addr, a full multiaddr ending in
// /p2p/<peer id>, on a client host of its own that Close closes.
func Dial(ctx context.Context, addr string, opts ClientOptions) (*Client, error) {
	ai, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	h, err := NewClientHost(opts)
	if err != nil {
		return nil, err
	}
	c, err := dialOn(ctx, h, ai, addr, opts)
	if err != nil {
		h.Close()
		return nil, err
	}
	c.ownHost = true
	return c, nil
}

// DialOn connects to the manager at addr over the client host h (made by
// NewClientHost), which several clients may share; Close leaves h open.
func DialOn(ctx context.Context, h host.Host, addr string, opts ClientOptions) (*Client, error) {
	ai, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	return dialOn(ctx, h, ai, addr, opts)
}

func parseAddr(addr string) (*peer.AddrInfo, error) {
	m, err := ma.NewMultiaddr(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrAddr, addr, err)
	}
	ai, err := peer.AddrInfoFromP2pAddr(m)
	if err != nil {
		return nil, fmt.Errorf("%w: %q has no /p2p/<peer id> part; use a full address as printed by `gridmgr id` or found in DATA_DIR/addr", ErrAddr, addr)
	}
	if len(ai.Addrs) == 0 {
		return nil, fmt.Errorf("%w: %q has no transport part before /p2p", ErrAddr, addr)
	}
	return ai, nil
}

// NewClientHost makes the libp2p host a client speaks from: no listening,
// the client's identity (opts.Key, or a fresh one), the grid's PSK.
func NewClientHost(opts ClientOptions) (host.Host, error) {
	key := opts.Key
	if key == nil {
		var err error
		if key, err = GenerateIdentity(); err != nil {
			return nil, err
		}
	}
	o := []libp2p.Option{
		libp2p.Identity(key),
		libp2p.NoListenAddrs,
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.DisableRelay(),
		libp2p.DisableMetrics(),
		libp2p.UserAgent("gridmgr-client"),
	}
	if opts.PSK != nil {
		o = append(o, libp2p.PrivateNetwork(opts.PSK))
	}
	h, err := libp2p.New(o...)
	if err != nil {
		return nil, fmt.Errorf("p2p: client host: %w", err)
	}
	return h, nil
}

func dialOn(ctx context.Context, h host.Host, ai *peer.AddrInfo, addr string, opts ClientOptions) (*Client, error) {
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	if err := h.Connect(ctx, *ai); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	s, err := h.NewStream(ctx, ai.ID, ClientProtocol)
	if err != nil {
		return nil, fmt.Errorf("open client stream to %s: %w", addr, err)
	}
	c := &Client{h: h, s: s, peer: ai.ID, pending: make(map[uint64]chan *wire.Envelope), progress: make(map[uint64]func(*wire.AdminReply)), done: make(chan struct{})}
	c.bw = bufio.NewWriter(s)
	c.w = pbio.NewDelimitedWriter(c.bw)
	go c.readLoop(pbio.NewDelimitedReader(s, opts.MaxFrame))
	return c, nil
}

// Peer is the manager's peer id.
func (c *Client) Peer() string { return c.peer.String() }

func (c *Client) readLoop(r pbio.ReadCloser) {
	defer close(c.done)
	for {
		env := new(wire.Envelope)
		if err := r.ReadMsg(env); err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			// The manager closed its side (shutting down) or the stream
			// broke: close ours too, so that a manager waiting for our EOF
			// need not wait out its close timeout.
			_ = c.s.Close()
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
		return nil, fmt.Errorf("%w: %v", ErrClosed, err)
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

	c.wmu.Lock()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.s.SetWriteDeadline(dl)
	}
	err := c.w.WriteMsg(env)
	if err == nil {
		err = c.bw.Flush()
	}
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
		return nil, fmt.Errorf("%w: %v", ErrClosed, err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
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
		return zero, fmt.Errorf("p2p: %s: unexpected answer %T", what, rep.Body)
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
	return nil, fmt.Errorf("p2p: admin --all: unexpected answer %T", rep.Body)
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

// Close ends the session, and closes the client host if Dial made it.
func (c *Client) Close() error {
	err := c.s.Close()
	if c.ownHost {
		return c.h.Close()
	}
	return err
}

// Host is the client host the session runs over.
func (c *Client) Host() host.Host { return c.h }

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
