package query

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/wire"
)

// Neighbor is a relation as a walk needs it.
type Neighbor struct {
	Peer string
	Name string
	Live bool          // messages can flow (up or suspect)
	RTT  time.Duration // smoothed round trip; shrinks the budget passed on
}

// Self is the manager running a walk.
type Self struct {
	Peer string
	Name string
}

// Ask is a query a walk wants sent to a relation.
type Ask struct {
	To  string
	Req *wire.QueryRequest
}

// Budget shares. A manager that answers a query replies within 90% of the
// budget it was given (measured from receipt), so the asker, who waits the
// whole budget from sending, hears the answer in time. It gives its
// inferiors 80% of its budget, minus their round trip, when it will not
// climb; when it may climb it gives the down search 40% and keeps the rest
// for its superiors. Each hop thus answers before its asker gives up.
const (
	replyPct     = 90
	downPct      = 80
	downClimbPct = 40
	// MinHopBudget: below this a relation is not asked (it could not answer
	// in time); it is listed as missing with "no budget".
	MinHopBudget = 2 * time.Millisecond
)

type phase uint8

const (
	phaseDown phase = iota + 1
	phaseUp
	phaseDone
)

// Walk is one query at one manager: its own offer, the asks it sent down
// and up, and the merged answer. It is pure: the caller feeds it replies,
// losses and ticks with the time, sends the Asks it returns, and replies
// with Reply once Done.
type Walk struct {
	self      Self
	req       *wire.QueryRequest
	fromName  string
	superiors []Neighbor
	climb     bool

	need    uint32
	limit   int
	offers  []*wire.Offer
	matched uint32
	visited uint32
	missing []*wire.Silent
	visits  []*wire.Visit
	// with explain: why managers did not offer, bounded (MergeVerdicts)
	verdicts     []*wire.Verdict
	verdictsMore uint32

	phase    phase
	waiting  map[string]Neighbor // peer → relation asked in this phase
	phaseEnd time.Time
	replyBy  time.Time
}

// NewWalk starts a query at this manager. req is as received (its
// Direction says from whom: a client, a superior or an inferior); from is
// the asking relation's peer id ("" for a client) and fromName its name;
// own is this manager's offer (nil when it does not match or its policy
// refuses). It returns the walk and what to send now; the walk may already
// be Done.
func NewWalk(now time.Time, self Self, req *wire.QueryRequest, from, fromName string, own *wire.Offer,
	inferiors, superiors []Neighbor) (*Walk, []Ask) {
	w := &Walk{
		self:     self,
		req:      req,
		fromName: fromName,
		need:     req.Want,
		limit:    int(req.Limit),
		visited:  1,
		waiting:  make(map[string]Neighbor),
	}
	budget := time.Duration(req.BudgetMs) * time.Millisecond
	w.replyBy = now.Add(budget * replyPct / 100)
	if own != nil {
		w.matched = 1
		w.offers = []*wire.Offer{own}
	}
	if req.Trace {
		var n uint32
		if own != nil {
			n = 1
		}
		w.visits = []*wire.Visit{{Name: self.Name, Peer: self.Peer, AskedBy: fromName, Direction: req.Direction, Offers: n}}
	}
	for _, s := range superiors {
		if s.Peer != from {
			w.superiors = append(w.superiors, s)
		}
	}
	// Only the entry and managers reached on the way up climb.
	w.climb = req.Direction != wire.QueryRequest_DIRECTION_DOWN && req.Up > 0 && len(w.superiors) > 0

	w.phase = phaseDown
	share, wait := downPct, replyPct
	if w.climb {
		share, wait = downClimbPct, downClimbPct+5
	}
	w.phaseEnd = now.Add(budget * time.Duration(wait) / 100)
	var asks []Ask
	if req.Down > 0 {
		for _, r := range inferiors {
			if r.Peer == from {
				continue // never back into the subtree the query came from
			}
			// Everything the asker said travels on (the job's attrs, the
			// window, the earliest search); only the hop's fields change.
			child := forward(req)
			child.Down, child.Up, child.Want = req.Down-1, 0, 0
			child.Direction = wire.QueryRequest_DIRECTION_DOWN
			if a, ok := w.ask(r, child, budget*time.Duration(share)/100-r.RTT); ok {
				asks = append(asks, a)
			}
		}
	}
	if len(w.waiting) == 0 {
		asks = append(asks, w.next(now)...)
	}
	return w, asks
}

// forward is req as a manager passes it on: a copy (the asker's own must
// not change), without the budget, which ask sets.
func forward(req *wire.QueryRequest) *wire.QueryRequest {
	c := proto.Clone(req).(*wire.QueryRequest)
	c.BudgetMs = 0
	return c
}

// ask records an ask of r with budget b, or a missing entry if r cannot
// be asked.
func (w *Walk) ask(r Neighbor, req *wire.QueryRequest, b time.Duration) (Ask, bool) {
	switch {
	case !r.Live:
		w.addMissing(r, "down")
		return Ask{}, false
	case b < MinHopBudget:
		w.addMissing(r, "no budget")
		return Ask{}, false
	}
	req.BudgetMs = uint32(b / time.Millisecond)
	w.waiting[r.Peer] = r
	return Ask{To: r.Peer, Req: req}, true
}

func (w *Walk) addMissing(r Neighbor, why string) {
	w.missing = append(w.missing, &wire.Silent{Peer: r.Peer, Name: r.Name, Why: why})
}

// next ends the current phase: after the down search, climb if the walk
// may and is still short of offers; after the climb, finish.
func (w *Walk) next(now time.Time) []Ask {
	if w.phase == phaseDown && w.climb && w.matched < w.need {
		w.phase = phaseUp
		w.phaseEnd = w.replyBy
		remaining := w.replyBy.Sub(now)
		var asks []Ask
		for _, s := range w.superiors {
			up := forward(w.req)
			up.Up, up.Want = w.req.Up-1, w.need-w.matched
			up.Direction = wire.QueryRequest_DIRECTION_UP
			if a, ok := w.ask(s, up, remaining*downPct/replyPct-s.RTT); ok {
				asks = append(asks, a)
			}
		}
		if len(w.waiting) > 0 {
			return asks
		}
	}
	w.phase = phaseDone
	return nil
}

// AddVerdict adds this manager's own verdict (why it does not offer) to
// the walk's answer, when the query asks for them (explain); call it
// before the walk's Reply.
func (w *Walk) AddVerdict(v *wire.Verdict) {
	if v == nil || !w.req.Explain {
		return
	}
	w.verdicts, w.verdictsMore = MergeVerdicts(w.verdicts, w.verdictsMore, []*wire.Verdict{v}, 0, MaxVerdicts)
}

// Waiting reports whether the walk waits for an answer from peer.
func (w *Walk) Waiting(peer string) bool {
	_, ok := w.waiting[peer]
	return ok
}

// OnReply merges peer's answer. It returns what to send next (the climb,
// once the down search is complete).
func (w *Walk) OnReply(now time.Time, peer string, rep *wire.QueryReply) []Ask {
	if _, ok := w.waiting[peer]; !ok || w.phase == phaseDone {
		return nil
	}
	delete(w.waiting, peer)
	w.matched += rep.Matched
	w.visited += rep.Visited
	w.missing = append(w.missing, rep.Missing...)
	w.visits = append(w.visits, rep.Visits...)
	w.offers = Merge(w.offers, rep.Offers, w.limit)
	if w.req.Explain && (len(rep.Verdicts) > 0 || rep.VerdictsMore > 0) {
		w.verdicts, w.verdictsMore = MergeVerdicts(w.verdicts, w.verdictsMore, rep.Verdicts, rep.VerdictsMore, MaxVerdicts)
	}
	if len(w.waiting) == 0 {
		return w.next(now)
	}
	return nil
}

// OnLost records that peer will not answer (its relation went down, or it
// answered with an error) and moves on if it was the last one waited for.
func (w *Walk) OnLost(now time.Time, peer, why string) []Ask {
	r, ok := w.waiting[peer]
	if !ok || w.phase == phaseDone {
		return nil
	}
	delete(w.waiting, peer)
	w.addMissing(r, why)
	if len(w.waiting) == 0 {
		return w.next(now)
	}
	return nil
}

// OnTick ends the current phase if its time is up: whoever has not
// answered is missing ("timeout").
func (w *Walk) OnTick(now time.Time) []Ask {
	if w.phase == phaseDone || now.Before(w.phaseEnd) {
		return nil
	}
	peers := make([]string, 0, len(w.waiting))
	for p := range w.waiting {
		peers = append(peers, p)
	}
	slices.Sort(peers)
	for _, p := range peers {
		w.addMissing(w.waiting[p], "timeout")
		delete(w.waiting, p)
	}
	if w.phase == phaseUp || now.Before(w.replyBy) {
		return w.next(now)
	}
	w.phase = phaseDone
	return nil
}

// Done reports whether the walk can answer.
func (w *Walk) Done() bool { return w.phase == phaseDone }

// NextDeadline is when OnTick next has something to do (the end of the
// current phase), zero once Done.
func (w *Walk) NextDeadline() time.Time {
	if w.phase == phaseDone {
		return time.Time{}
	}
	return w.phaseEnd
}

// Deadline is when the walk will answer at the latest.
func (w *Walk) Deadline() time.Time { return w.replyBy }

// Reply is the walk's answer. A manager listed as missing by one part of
// the tree but answering through another (an inferior that moved to a new
// superior after a failure, while its old superior still lists it as down)
// is not reported missing when its offer is in the answer.
func (w *Walk) Reply() *wire.QueryReply {
	missing := w.missing
	if len(missing) > 0 && len(w.offers) > 0 {
		offered := make(map[string]bool, len(w.offers))
		for _, o := range w.offers {
			offered[o.Peer] = true
		}
		missing = slices.DeleteFunc(slices.Clone(missing), func(s *wire.Silent) bool { return offered[s.Peer] })
	}
	return &wire.QueryReply{
		Offers:  w.offers,
		Missing: missing,
		Visited: w.visited,
		Matched: w.matched,
		Visits:  w.visits,

		Verdicts:     w.verdicts,
		VerdictsMore: w.verdictsMore,
	}
}

// Merge adds more offers to a list kept best first and cut to limit
// (limit <= 0: no cut). Better is: ranked before unranked, higher rank;
// among equal ranks, the higher owner's rank (as in the ClassAd paper,
// where the machine's Rank breaks the job's ties; an owner without a rank,
// or whose rank is undefined for the request, counts as ranking it 0, as
// Condor's default machine Rank does); then name, then peer id, so every
// manager orders ties the same way.
func Merge(have, more []*wire.Offer, limit int) []*wire.Offer {
	out := append(have, more...)
	slices.SortStableFunc(out, Compare)
	if limit > 0 && len(out) > limit {
		clear(out[limit:])
		out = out[:limit]
	}
	return out
}

// Compare orders offers best first (see Merge).
func Compare(a, b *wire.Offer) int {
	if a.Ranked != b.Ranked {
		if a.Ranked {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(b.Rank, a.Rank); c != 0 {
		return c
	}
	if c := cmp.Compare(ownerRank(b), ownerRank(a)); c != 0 {
		return c
	}
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	return strings.Compare(a.Peer, b.Peer)
}

// ownerRank is the owner's rank of the request an offer answers, for
// breaking ties: 0 when the owner gives none (or it was undefined).
func ownerRank(o *wire.Offer) float64 {
	if !o.OwnerRanked {
		return 0
	}
	return o.OwnerRank
}
