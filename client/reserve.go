package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// NewRequestID returns a fresh client request id: a retry of a reservation
// request carries the same id and gets the original answer.
func NewRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Reserve asks the manager to reserve req.Amounts of its own resources. An
// empty RequestId is filled in (and left in req, so that a retry of req is
// recognised). retry reports that the manager had seen the request id and
// answered with the original reservation.
func (c *Client) Reserve(ctx context.Context, req *wire.ReserveRequest) (r *wire.Reservation, retry bool, err error) {
	if req.RequestId == "" {
		req.RequestId = NewRequestID()
	}
	rep, err := ask(ctx, c, "reserve", &wire.Envelope{Body: &wire.Envelope_ReserveRequest{ReserveRequest: req}},
		(*wire.Envelope).GetReservationReply)
	if err != nil {
		return nil, false, err
	}
	return rep.Reservation, rep.Retry, nil
}

// ReservationOp commits, renews or releases reservation id at this
// manager (its owner). lease 0 means the manager's default; requestID ""
// gets a fresh one.
func (c *Client) ReservationOp(ctx context.Context, op wire.ReservationOpRequest_Op, id string, lease time.Duration, requestID string) (*wire.Reservation, bool, error) {
	if requestID == "" {
		requestID = NewRequestID()
	}
	rep, err := ask(ctx, c, op.String(), &wire.Envelope{Body: &wire.Envelope_ReservationOp{ReservationOp: &wire.ReservationOpRequest{
		RequestId: requestID, Op: op, Id: id, LeaseMs: uint64(lease / time.Millisecond),
	}}}, (*wire.Envelope).GetReservationReply)
	if err != nil {
		return nil, false, err
	}
	return rep.Reservation, rep.Retry, nil
}

// Reservations lists the manager's reservations: live ones, or all it
// remembers; only the caller's with mine. It is the first page, the oldest
// 5,000 at most: the reply's Next, if set, is where the next page starts
// (ReservationsPage); ReservationPages and AllReservations follow every
// page.
func (c *Client) Reservations(ctx context.Context, all, mine bool) (*wire.ReservationsReply, error) {
	return c.ReservationsPage(ctx, &wire.ReservationsRequest{All: all, Mine: mine})
}

// ReservationsPage asks for one page of a listing: the first (req.After
// empty) or the one after req.After, the previous page's Next. req is not
// changed.
func (c *Client) ReservationsPage(ctx context.Context, req *wire.ReservationsRequest) (*wire.ReservationsReply, error) {
	if req == nil {
		req = &wire.ReservationsRequest{}
	}
	return ask(ctx, c, "reservations", &wire.Envelope{Body: &wire.Envelope_ReservationsRequest{
		ReservationsRequest: proto.CloneOf(req)}}, (*wire.Envelope).GetReservationsReply)
}

// ReservationPages yields the pages of the listing req describes, from
// req.After (empty: the first page) to the last, each asked for once the
// loop has taken the one before. A failure is yielded with a nil page and
// ends the pages. Paging misses no reservation that stays at the manager
// throughout and lists none twice, whatever is made or ended meanwhile; a
// page is as of when it was asked for. req is not changed.
func (c *Client) ReservationPages(ctx context.Context, req *wire.ReservationsRequest) iter.Seq2[*wire.ReservationsReply, error] {
	return func(yield func(*wire.ReservationsReply, error) bool) {
		if req == nil {
			req = &wire.ReservationsRequest{}
		}
		req := proto.CloneOf(req)
		for {
			rep, err := c.ReservationsPage(ctx, req)
			if err == nil && rep.Next != "" && (rep.Next == req.After || len(rep.Reservations) == 0) {
				err = fmt.Errorf("the manager's listing does not advance: after %q it gave %d reservations and next %q", req.After, len(rep.Reservations), rep.Next)
			}
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(rep, nil) || rep.Next == "" {
				return
			}
			req.After = rep.Next
		}
	}
}

// AllReservations follows every page of the listing req describes (from
// req.After) and returns them as one reply: every reservation listed, in
// order; Name, Peer, Usage and Live as the last page said; More 0 and
// Next empty.
func (c *Client) AllReservations(ctx context.Context, req *wire.ReservationsRequest) (*wire.ReservationsReply, error) {
	var all *wire.ReservationsReply
	for page, err := range c.ReservationPages(ctx, req) {
		if err != nil {
			return nil, err
		}
		if all != nil {
			page.Reservations = append(all.Reservations, page.Reservations...)
		}
		all = page
	}
	all.More, all.Next = 0, ""
	return all, nil
}

// Reserver makes reservations across a grid from a client: it queries
// through an entry manager, reserves at the managers that own the offers
// (dialling them over the entry's client host, so the client keeps one
// identity), falls back to the next offer when one was taken meanwhile,
// co-reserves on several managers at once, and finds the owner of a
// reservation number. Safe for concurrent use.
type Reserver struct {
	entry *Client
	d     Dialer

	mu      sync.Mutex
	conns   map[string]*Client // owner peer id → session
	dialing map[string]*ownerDial

	// Progress, if set, is told what is being tried (for a CLI to show).
	Progress func(msg string)
	// OnOffers, if set, sees ReserveBest's offers before any is tried:
	// the window in which another client may take one (tests use it).
	OnOffers func(offers []*wire.Offer)
}

// NewReserver returns a Reserver that queries through entry and reaches
// owners through the Dialer entry was made with (so the client keeps one
// identity). Close it to end the sessions it opened (entry stays open).
func NewReserver(entry *Client) *Reserver {
	return &Reserver{entry: entry, d: entry.d, conns: map[string]*Client{entry.Peer(): entry}}
}

// Close ends the sessions the Reserver opened.
func (r *Reserver) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, c := range r.conns {
		if c != r.entry {
			_ = c.Close()
		}
		delete(r.conns, p)
	}
}

func (r *Reserver) progress(format string, args ...any) {
	if r.Progress != nil {
		r.Progress(fmt.Sprintf(format, args...))
	}
}

// Owner returns a session with the manager peer, reached at addrs
// (transport multiaddrs without /p2p); sessions are reused. One dial to an
// owner runs at a time: callers that ask meanwhile wait for it and share
// its session or its error.
func (r *Reserver) Owner(ctx context.Context, peer string, addrs []string) (*Client, error) {
	for {
		r.mu.Lock()
		c := r.conns[peer]
		if c != nil {
			select {
			case <-c.Done():
				if c != r.entry {
					delete(r.conns, peer)
					_ = c.Close()
				}
			default:
				r.mu.Unlock()
				return c, nil
			}
		}
		if len(addrs) == 0 {
			r.mu.Unlock()
			return nil, fmt.Errorf("manager %s has no known address", text.ShortPeer(peer))
		}
		if r.d == nil {
			r.mu.Unlock()
			return nil, fmt.Errorf("cannot reach manager %s: this client has no dialer", text.ShortPeer(peer))
		}
		// One dial per owner at a time: the others wait for it.
		if d := r.dialing[peer]; d != nil {
			d.waiting++
			r.mu.Unlock()
			select {
			case <-d.done:
			case <-ctx.Done():
				return nil, fmt.Errorf("cannot reach manager %s: %w", text.ShortPeer(peer), ctx.Err())
			}
			if d.err != nil && d.ctxErr != nil && ctx.Err() == nil {
				continue // the dialler's own context ended, not ours: try again
			}
			if d.err != nil {
				return nil, d.err
			}
			continue // its session, from r.conns (unless already lost)
		}
		d := &ownerDial{done: make(chan struct{})}
		if r.dialing == nil {
			r.dialing = make(map[string]*ownerDial)
		}
		r.dialing[peer] = d
		r.mu.Unlock()
		c, err := DialPeer(ctx, r.d, peeraddr.PeerAddrs{Peer: peer, Addrs: addrs})
		r.mu.Lock()
		delete(r.dialing, peer)
		if err != nil {
			d.err, d.ctxErr = fmt.Errorf("cannot reach manager %s: %w", text.ShortPeer(peer), err), ctx.Err()
		} else {
			r.conns[peer] = c
		}
		r.mu.Unlock()
		close(d.done)
		if err != nil {
			return nil, d.err
		}
		return c, nil
	}
}

// ownerDial is a dial to an owner in flight; done is closed when it
// ends, with err set if it failed (ctxErr: the dialler's context had
// ended then). waiting counts the callers that waited on it (under the
// Reserver's lock).
type ownerDial struct {
	done    chan struct{}
	err     error
	ctxErr  error
	waiting int
}

func (r *Reserver) drop(peer string, c *Client) {
	r.mu.Lock()
	if r.conns[peer] == c && c != r.entry {
		delete(r.conns, peer)
		_ = c.Close()
	}
	r.mu.Unlock()
}

// Locate finds the manager named name (and, if tag is not "", whose peer id
// has that reservation.Tag) with a query through the entry manager, which
// answers for itself too.
func (r *Reserver) Locate(ctx context.Context, name, tag string) (*wire.Offer, error) {
	rep, err := r.entry.Query(ctx, &wire.QueryRequest{
		Requirement: "name == " + strconv.Quote(name), Down: 255, Up: 255, Want: 8, Limit: 8, Locate: true,
	})
	if err != nil {
		return nil, fmt.Errorf("looking for manager %s: %w", name, err)
	}
	named := false
	for _, o := range rep.Offers {
		if o.Name == name && (tag == "" || reservation.Tag(o.Peer) == tag) {
			return o, nil
		}
		named = named || o.Name == name
	}
	if named {
		return nil, fmt.Errorf("manager %s now has another peer id than the one whose reservation numbers end in -%s (a new identity key?)", name, tag)
	}
	missing := ""
	if len(rep.Missing) > 0 {
		missing = fmt.Sprintf("; %d did not answer in time", len(rep.Missing))
	}
	return nil, fmt.Errorf("no manager named %s in the grid (%d manager(s) searched%s)", name, rep.Visited, missing)
}

// OwnerOf returns a session with the manager that owns reservation id.
func (r *Reserver) OwnerOf(ctx context.Context, id string) (*Client, error) {
	name, _, tag, err := reservation.ParseID(id)
	if err != nil {
		return nil, err
	}
	if reservation.Tag(r.entry.Peer()) == tag {
		return r.entry, nil
	}
	o, err := r.Locate(ctx, name, tag)
	if err != nil {
		return nil, err
	}
	return r.Owner(ctx, o.Peer, o.Addrs)
}

// Op commits, renews or releases reservation id at its owner, wherever it
// is. A lost connection is retried once with the same request id, so the
// operation happens at most once.
func (r *Reserver) Op(ctx context.Context, op wire.ReservationOpRequest_Op, id string, lease time.Duration) (*wire.Reservation, error) {
	reqID := NewRequestID()
	var last error
	for try := 0; try < 2; try++ {
		c, err := r.OwnerOf(ctx, id)
		if err != nil {
			return nil, err
		}
		res, _, err := c.ReservationOp(ctx, op, id, lease, reqID)
		if err == nil || !retryable(err) {
			return res, err
		}
		last = err
		r.drop(c.Peer(), c)
	}
	return nil, last
}

// retryable reports whether err lost the request on the way (the answer
// is unknown), as opposed to an answer.
func retryable(err error) bool {
	var re *RemoteError
	return !errors.As(err, &re) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

// reserveOnce reserves at one owner, retrying once with the same request
// id if the connection was lost (exactly-once: a retry that reaches a
// manager which had granted it gets the original reservation).
func (r *Reserver) reserveOnce(ctx context.Context, peer string, addrs []string, req *wire.ReserveRequest) (*wire.Reservation, error) {
	q := proto.Clone(req).(*wire.ReserveRequest)
	if q.RequestId == "" {
		q.RequestId = NewRequestID()
	}
	var last error
	for try := 0; try < 2; try++ {
		c, err := r.Owner(ctx, peer, addrs)
		if err != nil {
			return nil, err
		}
		res, _, err := c.Reserve(ctx, q)
		if err == nil || !retryable(err) {
			return res, err
		}
		last = err
		r.drop(peer, c)
	}
	return nil, last
}

// Attempt is one try at one offer.
type Attempt struct {
	Name string
	Peer string
	Err  error // nil: granted
}

// String says in a line what the manager answered: "gm164: refused: the
// requirement no longer holds here (...)", or "gm164: granted".
func (a Attempt) String() string {
	if a.Err == nil {
		return a.Name + ": granted"
	}
	msg := a.Err.Error()
	var re *RemoteError
	if errors.As(a.Err, &re) {
		msg = strings.Replace(msg, re.Error(), codeText(re.Code)+": "+strings.TrimPrefix(re.Message, a.Name+": "), 1)
	}
	return a.Name + ": " + msg
}

// ReserveBest queries through the entry manager and reserves at the best
// offer's owner; if that owner refuses (taken meanwhile, policy, access),
// it tries the next offer, and so on. It returns the reservation and every
// attempt made.
func (r *Reserver) ReserveBest(ctx context.Context, q *wire.QueryRequest, req *wire.ReserveRequest) (*wire.Reservation, []Attempt, error) {
	rep, err := r.entry.Query(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	if len(rep.Offers) == 0 {
		return nil, nil, fmt.Errorf("no offers: no manager reached (%d visited) meets %q", rep.Visited, q.Requirement)
	}
	if r.OnOffers != nil {
		r.OnOffers(rep.Offers)
	}
	return r.ReserveFrom(ctx, rep.Offers, req)
}

// ReserveFrom tries the offers in order (best first, as a query returned
// them) until one owner grants req.
func (r *Reserver) ReserveFrom(ctx context.Context, offers []*wire.Offer, req *wire.ReserveRequest) (*wire.Reservation, []Attempt, error) {
	if len(offers) == 0 {
		return nil, nil, errors.New("no offers to try")
	}
	var tries []Attempt
	for _, o := range offers {
		r.progress("trying %s (%s)", o.Name, text.ShortPeer(o.Peer))
		res, err := r.reserveOnce(ctx, o.Peer, o.Addrs, req)
		tries = append(tries, Attempt{Name: o.Name, Peer: o.Peer, Err: err})
		if err == nil {
			return res, tries, nil
		}
		r.progress("%s", tries[len(tries)-1])
		if ctx.Err() != nil {
			break
		}
	}
	return nil, tries, fmt.Errorf("all %d offers refused; the last said: %w", len(tries), tries[len(tries)-1].Err)
}

// ReserveAt reserves at the manager named by a peer id or a name.
func (r *Reserver) ReserveAt(ctx context.Context, peerOrName string, req *wire.ReserveRequest) (*wire.Reservation, error) {
	var o *wire.Offer
	if _, err := peeraddr.ParsePeerID(peerOrName); err == nil {
		// The schema has no peer id: list the grid and pick it.
		rep, err := r.entry.Query(ctx, &wire.QueryRequest{Requirement: "true", Down: 255, Up: 255, Want: 1 << 16, Limit: 1 << 16, Locate: true})
		if err != nil {
			return nil, err
		}
		for _, x := range rep.Offers {
			if x.Peer == peerOrName {
				o = x
			}
		}
		if o == nil {
			return nil, fmt.Errorf("no manager with peer id %s in the grid (%d manager(s) searched)", peerOrName, rep.Visited)
		}
	} else {
		var err error
		if o, err = r.Locate(ctx, peerOrName, ""); err != nil {
			return nil, err
		}
	}
	return r.reserveOnce(ctx, o.Peer, o.Addrs, req)
}

// CoReserve reserves req's amounts on count distinct managers at once, or
// on none: it queries through the entry manager, asks the best count
// offers for holds, replaces any that refuse with the next offer, and when
// count holds are in commits them all (reservation.Coordinator decides;
// this drives it). A refusal that leaves too few candidates, a failed
// commit or the deadline releases everything granted. If this process dies
// midway, the holds lapse at their managers by the hold timeout. The
// committed reservations come back in the order of the offers.
func (r *Reserver) CoReserve(ctx context.Context, q *wire.QueryRequest, req *wire.ReserveRequest, count int) ([]*wire.Reservation, []Attempt, error) {
	if count < 1 {
		return nil, nil, fmt.Errorf("co-reservation of %d managers: the count must be at least 1", count)
	}
	q = proto.Clone(q).(*wire.QueryRequest)
	q.Want = max(q.Want, uint32(2*count))
	q.Limit = max(q.Limit, uint32(2*count))
	rep, err := r.entry.Query(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	offers := rep.Offers
	if len(offers) < count {
		return nil, nil, fmt.Errorf("only %d offer(s) meet %q, %d wanted", len(offers), q.Requirement, count)
	}
	// Commit before the holds lapse: by then, or by ctx's deadline.
	hold := 30 * time.Second
	if req.HoldMs > 0 {
		hold = time.Duration(req.HoldMs) * time.Millisecond
	}
	deadline := time.Now().Add(hold * 8 / 10)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	co, err := reservation.NewCoordinator(len(offers), count, deadline)
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, len(offers))
	for i, o := range offers {
		names[i] = o.Name
	}
	co.SetNames(names)
	group := NewRequestID()
	hreq := proto.Clone(req).(*wire.ReserveRequest)
	hreq.Commit, hreq.Group, hreq.RequestId = false, group, ""

	type answer struct {
		a   reservation.Action
		res *wire.Reservation
		err error
	}
	answers := make(chan answer)
	granted := make(map[int]*wire.Reservation)
	var tries []Attempt
	perform := func(a reservation.Action) {
		o := offers[a.Target]
		var res *wire.Reservation
		var err error
		switch a.Kind {
		case reservation.ActHold:
			res, err = r.reserveOnce(ctx, o.Peer, o.Addrs, hreq)
		case reservation.ActCommit, reservation.ActRelease:
			op, actx := wire.ReservationOpRequest_OP_COMMIT, ctx
			if a.Kind == reservation.ActRelease {
				// Releases go out even when ctx has ended.
				var cancel context.CancelFunc
				actx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				op = wire.ReservationOpRequest_OP_RELEASE
			}
			var c *Client
			if c, err = r.Owner(actx, o.Peer, o.Addrs); err == nil {
				res, _, err = c.ReservationOp(actx, op, a.ID, time.Duration(req.LeaseMs)*time.Millisecond, "")
			}
		}
		answers <- answer{a, res, err}
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	inflight := 0
	for {
		for _, a := range co.Actions() {
			inflight++
			if a.Kind == reservation.ActHold {
				r.progress("hold at %s", offers[a.Target].Name)
			} else {
				r.progress("%s %s at %s", a.Kind, a.ID, offers[a.Target].Name)
			}
			go perform(a)
		}
		if co.Done() && inflight == 0 {
			break
		}
		select {
		case x := <-answers:
			inflight--
			now := time.Now()
			switch x.a.Kind {
			case reservation.ActHold:
				id := ""
				if x.err == nil {
					id = x.res.Id
					granted[x.a.Target] = x.res
				}
				tries = append(tries, Attempt{Name: offers[x.a.Target].Name, Peer: offers[x.a.Target].Peer, Err: x.err})
				co.OnHold(now, x.a.Target, id, x.err)
			case reservation.ActCommit:
				if x.err == nil {
					granted[x.a.Target] = x.res
				}
				co.OnCommit(now, x.a.Target, x.err)
			case reservation.ActRelease:
				co.OnRelease(now, x.a.Target, x.err)
			}
		case <-tick.C:
			co.Tick(time.Now())
		}
	}
	done, err := co.Result()
	if err != nil {
		return nil, tries, err
	}
	out := make([]*wire.Reservation, len(done))
	for i, g := range done {
		out[i] = granted[g.Target]
	}
	return out, tries, nil
}
