package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/deploy/runner"
	"github.com/gridmgr/gridmgr/jobs"
	jobstore "github.com/gridmgr/gridmgr/jobs/store"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/p2p/transfer"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// JobsDir is the job queue's directory in the data dir.
const JobsDir = "jobs"

// jobRuntime is the manager's job runtime (the node.Runner of
// node.CallJob): it writes the queue (in order, many writes to one
// fsync), keeps the files jobs use and bring back, and does the queue's
// acts as a client of the grid — this manager in-process, the others over
// client streams from its own host — each on a goroutine of its own, after
// the writes asked before it are on disk.
type jobRuntime struct {
	m       *Manager
	st      *jobstore.Store
	deliver func(node.Input) bool
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	// goMu orders starting a goroutine counted in wg (after the load)
	// with close's Wait: one started once close began is not started.
	goMu    sync.Mutex
	closing bool

	saves   saveQueue
	barrier *barrier // the last write asked for, in call order
	sem     chan struct{}

	// refs are the files each job known to the queue names (its bundle
	// and inputs), kept from the writes, for the spool's collection
	refsMu sync.Mutex
	refs   map[string][]string
	resv   map[string][]string // the reservations each job's record names

	upMu    sync.Mutex
	uploads map[string]*uploadLock

	once  sync.Once
	entry *client.Client
	res   *client.Reserver
	wg    sync.WaitGroup
}

// barrier is closed when a write is on disk (or failed: err).
type barrier struct {
	done chan struct{}
	err  error
}

type pendingSave struct {
	call node.Call
	req  node.JobSave
	b    *barrier
}

// jobActs bounds the acts done at once.
const jobActs = 64

func openJobs(m *Manager) (*jobRuntime, error) {
	st, err := jobstore.Open(filepath.Join(m.Cfg.DataDir, JobsDir))
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := &barrier{done: make(chan struct{})}
	close(done.done)
	r := &jobRuntime{m: m, st: st, log: m.log.With("manager", m.Cfg.Name), ctx: ctx, cancel: cancel,
		saves: saveQueue{ready: make(chan struct{}, 1)}, barrier: done, sem: make(chan struct{}, jobActs), refs: map[string][]string{},
		resv: map[string][]string{}, uploads: map[string]*uploadLock{}}
	r.wg.Add(1)
	go r.saver()
	return r, nil
}

// close stops the acts and the writer and closes the store.
func (r *jobRuntime) close() {
	r.goMu.Lock()
	r.closing = true
	r.goMu.Unlock()
	r.cancel()
	r.saves.close()
	r.wg.Wait()
	if r.res != nil {
		r.res.Close()
	}
	if r.entry != nil {
		_ = r.entry.Close()
	}
	_ = r.st.Close()
}

// saveQueue holds the saves asked for and not yet taken by the saver. It
// grows with its backlog and lets go of its memory when the saver empties
// it: an idle manager holds nothing here, and the Driver, which puts
// saves while the saver reports through the Driver's inbox, never waits
// on it (a bounded channel here would have to be large enough for any
// burst, and its ring becomes resident as it is written through).
type saveQueue struct {
	mu     sync.Mutex
	q      []pendingSave
	closed bool
	ready  chan struct{} // a token: something was put, or the queue closed (capacity 1)
}

// saveBatch is the most saves one transaction takes.
const saveBatch = 1024

func (s *saveQueue) put(p pendingSave) {
	s.mu.Lock()
	s.q = append(s.q, p)
	s.mu.Unlock()
	s.signal()
}

func (s *saveQueue) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
}

func (s *saveQueue) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// take appends to batch, in the order put, what waits, until batch holds
// max; it reports whether the queue is still open.
func (s *saveQueue) take(batch []pendingSave, max int) ([]pendingSave, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(len(s.q), max-len(batch))
	if n <= 0 {
		return batch, !s.closed
	}
	batch = append(batch, s.q[:n]...)
	left := copy(s.q, s.q[n:])
	clear(s.q[left:])
	s.q = s.q[:left]
	if left == 0 && cap(s.q) > 64 {
		s.q = nil // a burst's worth of slots is not kept
	}
	return batch, !s.closed
}

// saver writes the queue's saves in the order asked, as many as are
// waiting in one transaction, until the queue is closed and empty.
func (r *jobRuntime) saver() {
	defer r.wg.Done()
	want, took := 1, time.Duration(0)
	for {
		batch, open := r.saves.take(nil, saveBatch)
		if len(batch) == 0 {
			if !open {
				return
			}
			<-r.saves.ready
			continue
		}
		// While fewer came than the last batch had, wait for them a
		// little (at most a quarter of the last write, 2 ms): the
		// answers of the last batch bring their askers' next writes.
		linger := time.NewTimer(min(took/4, 2*time.Millisecond))
	more:
		for open && len(batch) < min(want, saveBatch) {
			select {
			case <-r.saves.ready:
				batch, open = r.saves.take(batch, saveBatch)
			case <-linger.C:
				break more
			}
		}
		linger.Stop()
		want = len(batch)
		start := time.Now()
		var saves []*wire.JobRecord
		var next uint64
		var forget []string
		for _, s := range batch {
			saves = append(saves, s.req.Saves...)
			next = max(next, s.req.Next)
			forget = append(forget, s.req.Forget...)
		}
		err := r.st.Write(saves, next, forget)
		took = time.Since(start)
		if err == nil {
			r.noteRefs(saves, forget)
		}
		if err == nil {
			for _, id := range forget {
				if ferr := r.st.ForgetJob(id); ferr != nil {
					r.log.Warn("forgetting a job's files", "job", id, "err", ferr)
				}
			}
		}
		for _, s := range batch {
			s.b.err = err
			close(s.b.done)
			r.deliver(s.call.Done(nil, err))
		}
	}
}

// Run implements node.Runner for node.CallJob. It is called in the
// order of Ready.Calls: a write is queued before the acts that follow it,
// and each act waits for the last write asked before it.
func (r *jobRuntime) Run(call node.Call) {
	switch req := call.Req.(type) {
	case node.JobSave:
		b := &barrier{done: make(chan struct{})}
		r.barrier = b
		r.saves.put(pendingSave{call: call, req: req, b: b})
		return
	case jobs.Act:
		b := r.barrier
		go func() {
			<-b.done
			if b.err != nil {
				return // the module stopped taking jobs; nothing is done
			}
			select {
			case r.sem <- struct{}{}:
			case <-r.ctx.Done():
				return
			}
			res := r.act(req)
			<-r.sem
			res.ID = req.ID
			r.deliver(call.Done(res, nil))
		}()
		return
	}
	go func() {
		var res any
		var err error
		switch req := call.Req.(type) {
		case node.JobLoad:
			var l node.JobLoaded
			l.Next, l.Records, err = r.st.Load()
			var ce *jobstore.CorruptError
			if errors.As(err, &ce) {
				// the others are whole: go on with them, and say which not
				r.log.Error("job records that cannot be read are left out", "err", err)
				err = nil
			}
			if err == nil {
				r.noteRefs(l.Records, nil)
				known := map[string]bool{}
				for _, rec := range l.Records {
					for _, a := range append([]*wire.JobAttempt{rec.GetAttempt()}, rec.GetOrphans()...) {
						known[a.GetReservation()] = true
					}
				}
				// A queue that never held a job (no job number handed out)
				// made no reservation: no whole-grid query at every start.
				sweep := l.Next != 0 || len(l.Records) > 0
				r.goMu.Lock()
				if !r.closing { // a manager stopped as soon as it started
					r.wg.Add(1)
					go r.collect()
					if sweep {
						r.wg.Add(1)
						go r.sweep(time.Now(), known)
					}
				}
				r.goMu.Unlock()
				if loadedHook != nil {
					loadedHook(sweep)
				}
			}
			res = l
		case node.JobHas:
			var missing []string
			for _, sha := range req.Shas {
				if !r.st.Has(sha) {
					missing = append(missing, sha)
				}
			}
			res = missing
		case node.JobBlob:
			var n int64
			n, err = r.st.PutPiece(req.Req.Sha256, req.Req.Size, req.Req.Offset, req.Req.Data)
			res = n
			if err != nil {
				err = node.AppErrorf(wire.ErrorReply_CODE_BAD_REQUEST, "%v", err)
			}
		case node.JobGet:
			res, err = r.get(req)
		case node.JobWhy:
			res, err = r.why(req)
		default:
			err = fmt.Errorf("jobs: unknown call %T", call.Req)
		}
		r.deliver(call.Done(res, err))
	}()
}

// noteRefs keeps which files the jobs written name, and forgets those of
// the jobs forgotten.
func (r *jobRuntime) noteRefs(saves []*wire.JobRecord, forget []string) {
	r.refsMu.Lock()
	defer r.refsMu.Unlock()
	for _, rec := range saves {
		sp := rec.GetSpec()
		shas := []string{sp.GetBundleSha256()}
		for _, in := range sp.GetInputs() {
			shas = append(shas, in.Sha256)
		}
		r.refs[rec.GetInfo().GetId()] = shas
		var ids []string
		for _, a := range append([]*wire.JobAttempt{rec.GetAttempt()}, rec.GetOrphans()...) {
			if a.GetReservation() != "" {
				ids = append(ids, a.GetReservation())
			}
		}
		r.resv[rec.GetInfo().GetId()] = ids
	}
	for _, id := range forget {
		delete(r.refs, id)
		delete(r.resv, id)
	}
}

// jobsCollect is how often the spool's files no job names any more are
// deleted (those uploaded within the store's grace, a day, are kept: a
// submit may follow its uploads).
const jobsCollect = time.Hour

// collect deletes, now and every jobsCollect, the spool's files that no
// job names and the result directories of jobs no longer known.
func (r *jobRuntime) collect() {
	defer r.wg.Done()
	for {
		r.refsMu.Lock()
		keep, live := map[string]bool{}, map[string]bool{}
		for id, shas := range r.refs {
			live[id] = true
			for _, s := range shas {
				keep[s] = true
			}
		}
		r.refsMu.Unlock()
		if n, err := r.st.GC(keep); err != nil {
			r.log.Warn("collecting the job spool", "err", err)
		} else if n > 0 {
			r.log.Info("job spool: files no job names deleted", "files", n)
		}
		if n, err := r.st.GCJobs(live); err != nil {
			r.log.Warn("collecting the job spool", "err", err)
		} else if n > 0 {
			r.log.Info("job spool: results of forgotten jobs deleted", "jobs", n)
		}
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(jobsCollect):
		}
	}
}

// sweep, once after a start, releases the reservations this manager made
// for its jobs before it stopped that its queue does not name: those
// granted while it went down, before their answer was written, and the
// ones it kept for a user's next job (claims live in memory). Left alone
// they would hold their amounts until their leases end. It asks every
// manager a query of the whole grid finds for the reservations this
// manager holds (a bounded walk: at most sweepManagers).
//
// known are the reservations the queue's records named when it was read:
// a job's placement may end and its reservation be kept, in memory, for
// the next job (a claim) before the sweep looks.
func (r *jobRuntime) sweep(loaded time.Time, known map[string]bool) {
	defer r.wg.Done()
	// let the manager join its grid first
	select {
	case <-r.ctx.Done():
		return
	case <-time.After(sweepAfter):
	}
	entry, rs := r.clients()
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
	defer cancel()
	q, err := entry.Query(ctx, &wire.QueryRequest{Requirement: "true", Down: client.AllLevels, Up: client.AllLevels,
		Want: sweepManagers, Limit: sweepManagers, Locate: true})
	if err != nil {
		r.log.Warn("jobs: looking for reservations left from before the restart", "err", err)
		return
	}
	self, prefix := r.m.Host.PeerID(), r.m.Cfg.Name+"."
	released := 0
	for _, o := range q.Offers {
		c, err := rs.Owner(ctx, o.Peer, o.Addrs)
		if err != nil {
			continue
		}
		list, err := c.AllReservations(ctx, &wire.ReservationsRequest{Mine: true})
		if err != nil {
			continue
		}
		for _, res := range list.Reservations {
			live := res.State == wire.ReservationState_RESERVATION_STATE_HELD || res.State == wire.ReservationState_RESERVATION_STATE_COMMITTED
			if !live || res.HolderPeer != self || !strings.HasPrefix(res.Group, prefix) ||
				res.CreatedUnixMs >= loaded.UnixMilli() || known[res.Id] || r.named(res.Id) {
				continue
			}
			if _, _, err := c.ReservationOp(ctx, wire.ReservationOpRequest_OP_RELEASE, res.Id, 0, client.NewRequestID()); err == nil {
				released++
			}
		}
	}
	if released > 0 {
		r.log.Info("jobs: released reservations left from before the restart that no job names", "reservations", released)
	}
}

// loadedHook, when set (by tests), hears that the queue was read and
// whether the sweep was started.
var loadedHook func(sweep bool)

// sweepAfter is how long after a start the sweep waits for the grid;
// sweepManagers bounds the managers it asks.
const (
	sweepAfter    = 3 * time.Second
	sweepManagers = 1000
)

// named says whether a job record written names reservation id.
func (r *jobRuntime) named(id string) bool {
	r.refsMu.Lock()
	defer r.refsMu.Unlock()
	for _, ids := range r.resv {
		if slices.Contains(ids, id) {
			return true
		}
	}
	return false
}

// get reads a piece of a job's result file.
func (r *jobRuntime) get(g node.JobGet) (*wire.JobReply, error) {
	f, err := r.st.ResultFile(g.Job, g.Path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, node.AppErrorf(wire.ErrorReply_CODE_NOT_FOUND, "%v", err)
		}
		return nil, node.AppErrorf(wire.ErrorReply_CODE_BAD_REQUEST, "%v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(g.Offset, 0)
	buf := make([]byte, max(0, min(int64(g.Limit), fi.Size()-off)))
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return &wire.JobReply{Data: buf[:n], Offset: fi.Size()}, nil
}

// clients makes the in-process client of this manager and the Reserver
// that reaches the others, once.
func (r *jobRuntime) clients() (*client.Client, *client.Reserver) {
	r.once.Do(func() {
		d := jobDialer{m: r.m}
		r.entry = client.New(newLocalConn(r.m), d)
		r.res = client.NewReserver(r.entry)
	})
	return r.entry, r.res
}

// need is the query a job's spec asks: its requirement with the amounts
// it needs free.
func need(s *wire.JobSpec) string {
	tokens := append([]*wire.Amount(nil), s.Tokens...)
	if s.Disk > 0 {
		tokens = append(tokens, &wire.Amount{Kind: node.DiskToken, N: (s.Disk + 1<<20 - 1) >> 20})
	}
	req := query.Need{CPUs: s.Cpus, Mem: s.Mem, Tokens: tokens}.Requirement()
	if r := strings.TrimSpace(s.Requirement); r != "" {
		if len(query.SplitClauses(r)) > 1 {
			// a conjunction: its clauses stay clauses of the whole, so a
			// verdict names the one that was false
			req = r + " && " + req
		} else {
			req = "(" + r + ") && " + req
		}
	}
	return req
}

func (r *jobRuntime) querySpec(s *wire.JobSpec, user string) client.QuerySpec {
	tokens := append([]*wire.Amount(nil), s.Tokens...)
	return client.QuerySpec{Requirement: need(s), Rank: s.Rank, Down: client.AllLevels, Up: client.AllLevels,
		Want: 4, Limit: 16, User: user, CPUs: s.Cpus, Mem: s.Mem, Tokens: tokens, Attrs: s.Attrs}
}

// why asks the grid the job's query with explain.
func (r *jobRuntime) why(w node.JobWhy) (*wire.QueryReply, error) {
	entry, _ := r.clients()
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	qs := r.querySpec(w.Spec, w.User)
	qs.Limit = 16
	f, err := entry.Find(ctx, explain(qs))
	if err != nil {
		return nil, err
	}
	return f.Reply, nil
}

// failure says how an error of a grid call fails an act.
func failure(err error) *jobs.Failure {
	var re *client.RemoteError
	if errors.As(err, &re) {
		switch re.Code {
		case wire.ErrorReply_CODE_GONE, wire.ErrorReply_CODE_NOT_FOUND:
			return jobs.Fail(jobs.Gone, "%s", re.Message)
		case wire.ErrorReply_CODE_REFUSED:
			return jobs.Fail(jobs.Refused, "%s", re.Message)
		case wire.ErrorReply_CODE_FORBIDDEN:
			return jobs.Fail(jobs.Forbidden, "%s", re.Message)
		case wire.ErrorReply_CODE_UNAVAILABLE, wire.ErrorReply_CODE_TIMEOUT, wire.ErrorReply_CODE_OVERLOADED:
			return jobs.Fail(jobs.Unreachable, "%s", re.Message)
		}
		return jobs.Fail(jobs.Broken, "%s", re.Message)
	}
	var te *transfer.RemoteError
	if errors.As(err, &te) {
		return failure(&client.RemoteError{Code: te.Code, Message: te.Message})
	}
	return jobs.Fail(jobs.Unreachable, "%v", err)
}

// lockUpload takes the lock of key (a manager and a bundle), and returns
// its unlock.
func (r *jobRuntime) lockUpload(key string) func() {
	r.upMu.Lock()
	l := r.uploads[key]
	if l == nil {
		l = &uploadLock{}
		r.uploads[key] = l
	}
	l.users++
	r.upMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		r.upMu.Lock()
		if l.users--; l.users == 0 {
			delete(r.uploads, key)
		}
		r.upMu.Unlock()
	}
}

type uploadLock struct {
	mu    sync.Mutex
	users int
}

// actWait bounds a short request to an executing manager (status, start,
// remove, release).
const actWait = 8 * time.Second

// act does one act of the queue.
func (r *jobRuntime) act(a jobs.Act) (res jobs.Result) {
	// A manager that does not answer a short request within actWait is
	// taken as silent for this try (lost_after counts from its last
	// answer); staging and fetching move files and get longer.
	timeout := actWait
	if a.Kind == jobs.ActStage || a.Kind == jobs.ActFetch {
		timeout = 15 * time.Minute
	} else if a.Kind == jobs.ActMatch || a.Kind == jobs.ActReserve {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(r.ctx, timeout)
	defer cancel()
	entry, rs := r.clients()
	s := a.Spec
	owner := func() (*client.Client, bool) {
		c, err := rs.Owner(ctx, a.Attempt.Peer, a.Attempt.Addrs)
		if err != nil {
			res.Err = jobs.Fail(jobs.Unreachable, "%v", err)
			return nil, false
		}
		return c, true
	}
	app := func(c *client.Client, req *wire.AppRequest) (*wire.AppReply, bool) {
		rep, err := c.App(ctx, req)
		if err != nil {
			res.Err = failure(err)
			var re *client.RemoteError
			if res.Err.Kind == jobs.Unreachable && errors.As(err, &re) {
				// it answered: it cannot do it (it runs no applications,
				// say), which waiting will not change
				res.Err.Kind = jobs.Refused
			}
			return nil, false
		}
		return rep, true
	}
	// status is the attempt's instance as its manager has it (gone:
	// a Gone failure).
	status := func(c *client.Client) (*wire.AppInstance, bool) {
		rep, ok := app(c, &wire.AppRequest{Op: wire.AppRequest_OP_STATUS, Instance: a.Attempt.Instance})
		if !ok {
			return nil, false
		}
		if len(rep.Instances) == 0 {
			res.Err = jobs.Fail(jobs.Gone, "%s is not at %s any more", a.Attempt.Instance, a.Attempt.Name)
			return nil, false
		}
		return rep.Instances[0], true
	}
	switch a.Kind {
	case jobs.ActMatch:
		var rep *wire.QueryReply
		if a.Begin.IsZero() {
			qs := r.querySpec(s, a.User)
			qs.Want += uint32(len(a.Avoid))
			qs.Limit = max(qs.Limit, qs.Want)
			f, err := entry.Find(ctx, qs)
			if err != nil {
				res.Err = failure(err)
				return res
			}
			rep = f.Reply
			res.Offers = rep.Offers
		}
		if len(res.Offers) == 0 {
			// nothing free now (or its begin is ahead): the earliest
			// window on the calendars
			if w, offers := r.earliest(ctx, entry, s, a); len(offers) > 0 {
				res.Window, res.Offers = w, offers
				return res
			}
			if rep == nil {
				rep = &wire.QueryReply{}
			}
			res.Why, res.PolicyOnly = r.noMatch(ctx, entry, s, a.User, rep)
		}
	case jobs.ActReserve:
		amounts := []*wire.Amount{}
		if s.Cpus > 0 {
			amounts = append(amounts, &wire.Amount{Kind: reservation.CPUs, N: s.Cpus})
		}
		if s.Mem > 0 {
			amounts = append(amounts, &wire.Amount{Kind: reservation.Mem, N: s.Mem})
		}
		amounts = append(amounts, s.Tokens...)
		if s.Disk > 0 {
			amounts = append(amounts, &wire.Amount{Kind: node.DiskToken, N: (s.Disk + 1<<20 - 1) >> 20})
		}
		req := &wire.ReserveRequest{RequestId: a.RequestID, User: a.User, Amounts: amounts, Requirement: s.Requirement,
			Commit: true, LeaseMs: uint64(a.Lease / time.Millisecond), Attrs: s.Attrs, Group: a.Job}
		if !a.Begin.IsZero() {
			// a window on the calendar: [begin, begin + lease)
			req.BeginUnixMs, req.DurationMs, req.LeaseMs = a.Begin.UnixMilli(), uint64(a.Lease/time.Millisecond), 0
			req.Requirement = "" // what is free then is the calendar's to say, not today's values
		}
		got, tries, err := rs.ReserveFrom(ctx, a.Offers, req)
		if err != nil {
			res.Err = reserveFailure(tries, err)
			return res
		}
		name := got.OwnerName
		addrs := got.OwnerAddrs
		for _, o := range a.Offers {
			if o.Peer == got.OwnerPeer {
				name, addrs = o.Name, o.Addrs
			}
		}
		res.Attempt = &wire.JobAttempt{Peer: got.OwnerPeer, Name: name, Addrs: addrs, Reservation: got.Id, LeaseEndUnixMs: got.ExpiresUnixMs}
		if !a.Begin.IsZero() {
			res.Attempt.BeginUnixMs = got.StartUnixMs
			if got.EndUnixMs > 0 {
				res.Attempt.LeaseEndUnixMs = got.EndUnixMs
			}
		}
	case jobs.ActStage:
		c, ok := owner()
		if !ok {
			return res
		}
		if a.Lease > 0 {
			if _, _, err := c.ReservationOp(ctx, wire.ReservationOpRequest_OP_RENEW, a.Attempt.Reservation, a.Lease, client.NewRequestID()); err != nil {
				res.Err = failure(err)
				return res
			}
		}
		inst := a.Attempt.Reservation + "." + s.App
		res.Instance = inst
		if rep, err := c.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_STATUS, Instance: inst}); err == nil && len(rep.Instances) > 0 {
			res.Status.State = rep.Instances[0].State
			if res.Status.State != "installed" {
				return res // started before this manager's restart
			}
			// installed, maybe without all its inputs: put them again
		} else if err != nil && failure(err).Kind == jobs.Unreachable {
			res.Err = failure(err)
			return res
		} else {
			// one upload of a bundle to a manager at a time: the others
			// wait and find it there
			unlock := r.lockUpload(a.Attempt.Peer + "/" + s.BundleSha256)
			// sha is the bundle's, or that of the copy deflated for a
			// manager that reads no Zstandard (an older version).
			sha, err := c.SendBundle(ctx, r.st.BlobPath(s.BundleSha256), a.Attempt.Reservation, nil)
			unlock()
			if err != nil {
				res.Err = failure(err)
				return res
			}
			if _, ok := app(c, &wire.AppRequest{Op: wire.AppRequest_OP_INSTALL, Reservation: a.Attempt.Reservation, BundleSha256: sha}); !ok {
				return res
			}
		}
		res.Status.State = ""
		for _, in := range s.Inputs {
			data, err := os.ReadFile(r.st.BlobPath(in.Sha256))
			if err != nil {
				res.Err = jobs.Fail(jobs.Broken, "input %s: %v", in.Path, err)
				return res
			}
			if _, ok := app(c, &wire.AppRequest{Op: wire.AppRequest_OP_PUT, Instance: inst, Path: path.Join(s.InDir, in.Path), Data: data}); !ok {
				return res
			}
		}
	case jobs.ActStart:
		c, ok := owner()
		if !ok {
			return res
		}
		// Started only from "installed": a start whose answer was lost
		// went through, and the program running or ended must not be run
		// again by this retry.
		in, ok := status(c)
		if !ok {
			return res
		}
		if in.State != "installed" {
			return res
		}
		app(c, &wire.AppRequest{Op: wire.AppRequest_OP_START, Instance: a.Attempt.Instance, Args: s.Args, Env: s.Env})
	case jobs.ActPoll:
		c, ok := owner()
		if !ok {
			return res
		}
		in, ok := status(c)
		if !ok {
			return res
		}
		if in.LastExit == runner.SupervisorEnded {
			// Not the program's doing: the executor lost it (its
			// supervisor was killed). Like a lost host, the placement is
			// given up and the job matched again; the try is not held
			// against the program.
			res.Err = jobs.Fail(jobs.Gone, "the instance's supervisor there ended unexpectedly (not the program's exit)")
			return res
		}
		res.Status = jobs.Status{State: in.State, Exit: in.LastExit, CPUSeconds: in.CpuSeconds, MemBytes: in.MemBytes}
		if code, ok := strings.CutPrefix(in.LastExit, "exit "); ok {
			if n, err := strconv.Atoi(code); err == nil {
				res.Status.Exited, res.Status.ExitCode = true, int32(n)
			}
		}
	case jobs.ActFetch:
		c, ok := owner()
		if !ok {
			return res
		}
		dir, err := r.st.TryDir(a.Job, a.Attempt.Try)
		if err != nil {
			res.Err = jobs.Fail(jobs.Broken, "%v", err)
			return res
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			res.Err = jobs.Fail(jobs.Broken, "%v", err)
			return res
		}
		defer root.Close()
		for _, stream := range []string{"stdout", "stderr"} {
			f, ok := r.fetchLogs(ctx, c, root, a.Attempt.Instance, stream, &res)
			if !ok {
				return res
			}
			res.Files = append(res.Files, f)
		}
		for _, out := range s.Outputs {
			f, err := r.fetchFile(ctx, c, root, a.Attempt.Instance, path.Join(s.OutDir, out), out)
			if err != nil {
				if fl := failure(err); fl.Kind == jobs.Gone || fl.Kind == jobs.Broken {
					res.Missing = append(res.Missing, out)
					continue
				}
				res.Err = failure(err)
				return res
			}
			res.Files = append(res.Files, f)
		}
	case jobs.ActAccept:
		files, err := r.st.Accept(a.Job, a.Try)
		if err != nil {
			res.Err = jobs.Fail(jobs.Broken, "%v", err)
		}
		res.Files = files
	case jobs.ActClean:
		c, ok := owner()
		if !ok {
			return res
		}
		if a.Attempt.Instance != "" {
			if _, err := c.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_REMOVE, Instance: a.Attempt.Instance}); err != nil {
				if f := failure(err); f.Kind == jobs.Unreachable {
					res.Err = f
					return res
				}
			}
		}
		if a.Release {
			if _, _, err := c.ReservationOp(ctx, wire.ReservationOpRequest_OP_RELEASE, a.Attempt.Reservation, 0, client.NewRequestID()); err != nil {
				if f := failure(err); f.Kind == jobs.Unreachable {
					res.Err = f
				}
			}
		}
	}
	return res
}

// reserveFailure says why no offer was granted: Forbidden when every
// owner refused the user (policy, access list), else what the last said.
func reserveFailure(tries []client.Attempt, err error) *jobs.Failure {
	forbidden := len(tries) > 0
	var lines []string
	for _, t := range tries {
		lines = append(lines, t.String())
		f := failure(t.Err)
		if f.Kind != jobs.Forbidden && !(f.Kind == jobs.Refused && (strings.Contains(f.Msg, "policy") || strings.Contains(f.Msg, "access"))) {
			forbidden = false
		}
	}
	if len(tries) == 0 {
		return failure(err)
	}
	f := failure(tries[len(tries)-1].Err)
	f.Msg = strings.Join(lines, "; ")
	if forbidden {
		f.Kind = jobs.Forbidden
	}
	return f
}

// fetchLogs copies an instance's stdout or stderr into root/stream.
func (r *jobRuntime) fetchLogs(ctx context.Context, c *client.Client, root *os.Root, inst, stream string, res *jobs.Result) (*wire.JobFile, bool) {
	f, err := root.OpenFile(stream, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		res.Err = jobs.Fail(jobs.Broken, "%v", err)
		return nil, false
	}
	defer f.Close()
	h := sha256.New()
	var off, n int64
	for {
		rep, err := c.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_LOGS, Instance: inst, Stderr: stream == "stderr", Offset: off, Limit: 1 << 20})
		if err != nil {
			res.Err = failure(err)
			return nil, false
		}
		if len(rep.Data) == 0 || rep.Offset <= off {
			break
		}
		if _, err := f.Write(rep.Data); err != nil {
			res.Err = jobs.Fail(jobs.Broken, "%v", err)
			return nil, false
		}
		h.Write(rep.Data)
		n += int64(len(rep.Data))
		off = rep.Offset
	}
	if err := f.Sync(); err != nil {
		res.Err = jobs.Fail(jobs.Broken, "%v", err)
		return nil, false
	}
	return &wire.JobFile{Path: stream, Sha256: hex.EncodeToString(h.Sum(nil)), Size: n}, true
}

// fetchFile copies an instance's file rel (under its out dir) to
// root/name.
func (r *jobRuntime) fetchFile(ctx context.Context, c *client.Client, root *os.Root, inst, rel, name string) (*wire.JobFile, error) {
	if d := path.Dir(name); d != "." {
		if err := root.MkdirAll(d, 0o700); err != nil {
			return nil, jobs.Fail(jobs.Broken, "%v", err)
		}
	}
	f, err := root.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, jobs.Fail(jobs.Broken, "%v", err)
	}
	defer f.Close()
	h := sha256.New()
	var off int64
	for {
		rep, err := c.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_GET, Instance: inst, Path: rel, Offset: off, Limit: 1 << 20})
		if err != nil {
			return nil, err
		}
		if _, err := f.Write(rep.Data); err != nil {
			return nil, jobs.Fail(jobs.Broken, "%v", err)
		}
		h.Write(rep.Data)
		off += int64(len(rep.Data))
		if len(rep.Data) == 0 || off >= rep.Offset {
			break
		}
	}
	if err := f.Sync(); err != nil {
		return nil, jobs.Fail(jobs.Broken, "%v", err)
	}
	return &wire.JobFile{Path: name, Sha256: hex.EncodeToString(h.Sum(nil)), Size: off}, nil
}

// earliest looks for the earliest window of the job's lease from its
// begin (or now), before its deadline: when it begins and the offers of
// the managers where it fits, best first; none found: no offers.
func (r *jobRuntime) earliest(ctx context.Context, entry *client.Client, s *wire.JobSpec, a jobs.Act) (time.Time, []*wire.Offer) {
	qs := r.querySpec(s, a.User)
	qs.Requirement = s.Requirement // free amounts are the window's: the search checks them
	if qs.Requirement == "" {
		qs.Requirement = "true"
	}
	qs.Earliest, qs.Duration, qs.Begin, qs.Want = true, a.Lease, a.Begin, 1
	if s.DeadlineUnixMs > 0 {
		from := a.Begin
		if from.IsZero() {
			from = time.Now()
		}
		h := time.UnixMilli(s.DeadlineUnixMs).Sub(from)
		if h <= 0 {
			return time.Time{}, nil
		}
		qs.Horizon = h
	}
	f, err := entry.Find(ctx, qs)
	if err != nil {
		return time.Time{}, nil
	}
	w := f.Window()
	if w == nil {
		return time.Time{}, nil
	}
	var offers []*wire.Offer
	for _, name := range w.Managers {
		for _, o := range f.Reply.Offers {
			if o.Name == name {
				offers = append(offers, o)
				break
			}
		}
	}
	begin := time.UnixMilli(w.BeginUnixMs)
	if a.Begin.IsZero() && time.Until(begin) < 2*time.Second {
		return time.Time{}, offers // as good as now: a lease from now
	}
	return begin, offers
}

// noMatch says why a query found nothing, and whether only owners'
// policies stood in the way.
func (r *jobRuntime) noMatch(ctx context.Context, entry *client.Client, s *wire.JobSpec, user string, rep *wire.QueryReply) (string, bool) {
	why := fmt.Sprintf("no manager offers what it asks (%d managers looked)", rep.Visited)
	f, err := entry.Find(ctx, explain(r.querySpec(s, user)))
	if err != nil {
		return why, false
	}
	return explained(why, f.Reply)
}

// jobDialer reaches managers for the job runtime: this one in-process,
// the others over client streams of its own host (from the private
// network a peer is on, if it is on one: p2p.Host.For); it sends bundles.
type jobDialer struct{ m *Manager }

func (d jobDialer) Open(ctx context.Context, pa peeraddr.PeerAddrs) (client.Conn, error) {
	if pa.Peer == d.m.Host.PeerID() {
		return newLocalConn(d.m), nil
	}
	return dialer(d).Open(ctx, pa)
}

// SendBundle implements client.BundleSender.
func (d jobDialer) SendBundle(ctx context.Context, to, file, reservation string, progress func(sent, total int64)) (string, error) {
	if to == d.m.Host.PeerID() {
		if d.m.apps == nil {
			return "", &client.RemoteError{Code: wire.ErrorReply_CODE_UNSUPPORTED, Message: d.m.Cfg.Name + ": this manager does not run applications"}
		}
		return d.m.apps.store.Add(file)
	}
	// A blob of the job spool is named by its sha256, checked when it
	// was written: offered by it, a bundle the manager has already (the
	// job before on that manager) is not sent again.
	var sha string
	if base := filepath.Base(file); d.m.jobs != nil && transfer.ValidSHA(base) && d.m.jobs.st.BlobPath(base) == file {
		sha = base
	}
	// From the libp2p host the peer is on: a glide-in on a private
	// network is reached only through it.
	res, err := d.m.Host.SendBundle(ctx, to, file, reservation, transfer.SendOptions{SHA256: sha, Progress: progress})
	return res.SHA256, err
}

// localConn is a client session with this manager in-process (the
// Driver), speaking as the manager itself.
type localConn struct {
	m    *Manager
	in   chan *wire.Envelope
	done chan struct{}
	once sync.Once
}

func newLocalConn(m *Manager) *localConn {
	return &localConn{m: m, in: make(chan *wire.Envelope, 64), done: make(chan struct{})}
}

func (c *localConn) Peer() string { return c.m.Host.PeerID() }
func (c *localConn) Self() string { return c.m.Host.PeerID() }

func (c *localConn) Send(env *wire.Envelope, deadline time.Time) error {
	select {
	case <-c.done:
		return io.ErrClosedPipe
	default:
	}
	go func() {
		ctx := context.Background()
		if !deadline.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		rep, err := c.m.Driver.Request(ctx, env)
		if err != nil {
			rep = &wire.Envelope{Body: &wire.Envelope_Error{Error: &wire.ErrorReply{Code: wire.ErrorReply_CODE_UNAVAILABLE, Message: c.m.Cfg.Name + ": " + err.Error()}}}
		}
		rep.ReplyTo = env.Id
		select {
		case c.in <- rep:
		case <-c.done:
		}
	}()
	return nil
}

func (c *localConn) Recv() (*wire.Envelope, error) {
	select {
	case e := <-c.in:
		return e, nil
	case <-c.done:
		return nil, io.EOF
	}
}

func (c *localConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return nil
}

// explain asks qs with explain: every manager that does not offer says
// why.
func explain(qs client.QuerySpec) client.QuerySpec {
	qs.Explain = true
	return qs
}

// explained is why a query found nothing, in a line, from its verdicts,
// and whether every manager that answered refused by its policy.
func explained(why string, rep *wire.QueryReply) (string, bool) {
	vs := rep.GetVerdicts()
	if len(vs) == 0 {
		return why, false
	}
	policy := true
	for _, v := range vs {
		if v.Why != "policy" {
			policy = false
		}
	}
	lines := client.SummarizeVerdicts(vs)
	if len(lines) > 3 {
		lines = append(lines[:3], fmt.Sprintf("and %d more reasons (gridmgr job why)", len(lines)-3))
	}
	return strings.Join(lines, "; "), policy
}
