package jobs

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/wire"
)

// Config bounds a Queue and sets its pace. Zero values take the defaults.
type Config struct {
	Self              string        // the manager's name: clusters are SELF.N
	MaxQueued         int           // jobs not ended, all users (default 100000)
	MaxQueuedPerUser  int           // jobs not ended, per user (default 20000)
	MaxRunning        int           // jobs placed at once (matched to staging out), all users (default 1000)
	MaxRunningPerUser int           // the same per user (default 500)
	MaxMatching       int           // match acts in flight (default 4)
	PollEvery         time.Duration // a running job's status is asked this often (default 1s)
	MatchRetry        time.Duration // first wait after a match found nothing; doubles to a minute (default 2s)
	ClaimIdle         time.Duration // a reservation with no job to run next is released after (default 3s)
	LostAfter         time.Duration // default of JobSpec.lost_after_ms (default 5m)
	LogMax            int           // log lines kept per job (default 100)
	KeepEnded         time.Duration // ended jobs are forgotten after (default 7 days)
	LeaseSlack        time.Duration // added to a job's run time for its lease (default 2m)
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxQueued, 100000)
	def(&c.MaxQueuedPerUser, 20000)
	def(&c.MaxRunning, 1000)
	def(&c.MaxRunningPerUser, 500)
	def(&c.MaxMatching, 4)
	def(&c.LogMax, 100)
	defd(&c.PollEvery, time.Second)
	defd(&c.MatchRetry, 2*time.Second)
	defd(&c.ClaimIdle, 3*time.Second)
	defd(&c.LostAfter, 5*time.Minute)
	defd(&c.KeepEnded, 7*24*time.Hour)
	defd(&c.LeaseSlack, 2*time.Minute)
	if c.Self == "" {
		c.Self = "gm"
	}
	return c
}

// Errors of the queue's requests; each is wrapped with what was wrong.
var (
	ErrNoJob     = errors.New("jobs: no such job")
	ErrForbidden = errors.New("jobs: not yours")
	ErrLimit     = errors.New("jobs: limit reached")
	ErrBadSpec   = errors.New("jobs: bad job")
	ErrState     = errors.New("jobs: wrong state")
)

// Change is one line added to a job's log, for events and metrics.
type Change struct {
	Job   string
	User  string
	State wire.JobState
	Entry *wire.JobLogEntry
	// Dag and Node: the workflow and node of the job, if any (for a
	// workflow's own change, Job and Dag are its id).
	Dag, Node string
	// Latency is, for "started" on a first try, how long since submission.
	Latency time.Duration
}

// Ready is what a Queue has for its runtime since the last Ready.
type Ready struct {
	// Saves are records to write, in order, before any of Acts starts and
	// before an answer that depends on them is sent.
	Saves []*wire.JobRecord
	// Next, when not 0, is the cluster counter to write with Saves.
	Next    uint64
	Acts    []Act
	Changes []Change
}

// Empty says whether r holds nothing.
func (r Ready) Empty() bool {
	return len(r.Saves) == 0 && r.Next == 0 && len(r.Acts) == 0 && len(r.Changes) == 0
}

// Queue is the job queue's state machine: it keeps the jobs, decides what
// happens to each, and asks its runtime for the work (Ready.Acts), which
// reports back through Done. It does no I/O and keeps no clock: time
// arrives as now. Not safe for concurrent use: one owner drives it.
type Queue struct {
	cfg      Config
	jobs     map[string]*job
	clusters map[string][]*job // by cluster, in index order
	byReq    map[string]string // submit request id → cluster
	next     uint64            // the last cluster number given
	acts     map[uint64]pending
	actSeq   uint64
	matching int
	claims   []*claim
	rd       Ready
	dirty    map[*job]bool
	order    []string // clusters, oldest first: the order Tick visits jobs in
	counts   [wire.JobState_JOB_STATE_WAITING + 1]int
	liveBy   map[string]int // jobs not ended, by user
	due      time.Time      // when Tick has something to do, as the last Tick saw
	changed  bool           // something happened since the last Tick
	lastTick time.Time
	wokeAt   time.Time // the last time a reservation was let go (wake)
	dags     map[string]*dag
	dagDirty map[*dag]bool // a job of it changed state since its last evaluation
}

type job struct {
	r         *wire.JobRecord
	epoch     uint64    // bumped when a transition makes acts in flight stale
	busy      uint64    // the main act in flight, 0 none
	cleaning  uint64    // the ActClean of an orphan in flight, 0 none
	notBefore time.Time // no match or poll before
	wait      time.Duration
	offers    []*wire.Offer
	avoid     []avoided     // peers it was lost at, and when
	pollWait  time.Duration // the wait before the next poll of a running job
	waitFrom  time.Time     // when it began waiting after a match found nothing
	waiting   bool          // waiting for its executor to answer (Reason says so)
	d         *dag          // its workflow, if any
	n         *dnode        // its node there
	ckey      string        // claimKey of ckeyOf, once asked
	ckeyOf    *wire.JobSpec
	rank      jobRank // its place in the queue's order, once asked (ranked)
	hasRank   bool
}

// jobRank is what orders idle jobs (Tick matches them in this order):
// higher priority first, then submitted earlier, then by cluster number
// and index. None of it changes after a job is queued; kept beside the
// job, it spares a sort of a long queue reading each job's record (and
// parsing its cluster's number) at every comparison.
type jobRank struct {
	prio      int32
	submitted int64
	cluster   uint64
	index     uint32
}

func (j *job) ranked() *jobRank {
	if !j.hasRank {
		i := j.r.Info
		j.rank, j.hasRank = jobRank{prio: i.Priority, submitted: i.SubmittedUnixMs, cluster: clusterNumber(i.Cluster), index: i.Index}, true
	}
	return &j.rank
}

// claimKey is claimKey(j's spec), worked out once: Tick asks it of every
// idle job while claims are kept, and formatting it anew each time cost
// more than the rest of a Tick.
func (j *job) claimKey() string {
	if j.ckeyOf != j.r.Spec {
		j.ckey, j.ckeyOf = claimKey(j.r.Spec), j.r.Spec
	}
	return j.ckey
}

// avoided is a manager a job was lost at, and when.
type avoided struct {
	peer string
	at   time.Time
}

// avoidFor is how long a job is not matched again at a manager it was
// lost at: long enough to go elsewhere, short enough that a job only that
// manager can run is not left waiting for good.
const avoidFor = time.Minute

// avoiding are the managers j is not matched at now.
func (j *job) avoiding(now time.Time) []string {
	var out []string
	for _, a := range j.avoid {
		if now.Sub(a.at) < avoidFor {
			out = append(out, a.peer)
		}
	}
	return out
}

// firstPoll is the first wait between polls of a job that runs.
const firstPoll = 50 * time.Millisecond

type pending struct {
	j     *job
	c     *claim
	epoch uint64
	act   Act
}

// claim is a reservation a job finished on, kept for the same user's next
// job that fits it (HTCondor's claim reuse).
type claim struct {
	user  string
	key   string
	a     *wire.JobAttempt
	since time.Time
	ready bool   // its instance is removed: a job may use it
	busy  uint64 // an ActClean in flight
	gone  bool
}

// New returns an empty Queue.
func New(cfg Config) *Queue {
	return &Queue{
		cfg:      cfg.withDefaults(),
		jobs:     make(map[string]*job),
		clusters: make(map[string][]*job),
		byReq:    make(map[string]string),
		acts:     make(map[uint64]pending),
		dirty:    make(map[*job]bool),
		liveBy:   make(map[string]int),
		dags:     make(map[string]*dag),
		dagDirty: make(map[*dag]bool),
	}
}

// count adds d jobs of user in state s to the counts.
func (q *Queue) count(user string, s wire.JobState, d int) {
	q.counts[s] += d
	if !ended(s) {
		q.liveBy[user] += d
		if q.liveBy[user] == 0 {
			delete(q.liveBy, user)
		}
	}
}

// Quiet says whether nothing is in flight or left to clean up: no act
// outstanding, no claim kept, no given-up placement still to stop.
func (q *Queue) Quiet() bool {
	if len(q.acts) > 0 || len(q.claims) > 0 {
		return false
	}
	for _, j := range q.jobs {
		if len(j.r.Orphans) > 0 {
			return false
		}
	}
	return true
}

// Ready hands over what the queue has for its runtime and starts a new
// Ready.
func (q *Queue) Ready() Ready {
	for _, j := range slices.SortedFunc(maps.Keys(q.dirty), func(a, b *job) int { return cmp.Compare(a.r.Info.Id, b.r.Info.Id) }) {
		q.rd.Saves = append(q.rd.Saves, proto.Clone(j.r).(*wire.JobRecord))
	}
	clear(q.dirty)
	rd := q.rd
	q.rd = Ready{}
	return rd
}

func (q *Queue) save(j *job) { q.dirty[j] = true }

// ended says whether a state is final.
func ended(s wire.JobState) bool {
	return s == wire.JobState_JOB_STATE_COMPLETED || s == wire.JobState_JOB_STATE_FAILED || s == wire.JobState_JOB_STATE_REMOVED
}

// Ended says whether a job in state s is done with (completed, failed,
// removed).
func Ended(s wire.JobState) bool { return ended(s) }

// placed says whether a job in state s holds, or is getting, a place.
func placed(s wire.JobState) bool {
	return s >= wire.JobState_JOB_STATE_MATCHED && s <= wire.JobState_JOB_STATE_STAGING_OUT
}

// StateName is a state's word: "idle", "staging-out".
func StateName(s wire.JobState) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATE_")), "_", "-")
}

// JobID is the id of index of a cluster of count jobs.
func JobID(cluster string, index, count uint32) string {
	if count <= 1 {
		return cluster
	}
	return cluster + "[" + strconv.FormatUint(uint64(index), 10) + "]"
}

func (q *Queue) log(now time.Time, j *job, typ, detail string) {
	info := j.r.Info
	e := &wire.JobLogEntry{TimeUnixMs: now.UnixMilli(), Type: typ, Detail: detail, Try: info.Tries}
	if a := j.r.Attempt; a != nil {
		e.Manager, e.Try = a.Name, a.Try
	}
	info.Log = append(info.Log, e)
	if n := len(info.Log) - q.cfg.LogMax; n > 0 {
		// keep the first line (submitted) and the newest
		info.Log = append(info.Log[:1], info.Log[1+n:]...)
	}
	c := Change{Job: info.Id, User: info.User, State: info.State, Entry: e, Dag: info.Dag, Node: info.Node}
	if typ == "started" && info.Tries == 1 && info.SubmittedUnixMs > 0 {
		c.Latency = now.Sub(time.UnixMilli(info.SubmittedUnixMs))
	}
	q.rd.Changes = append(q.rd.Changes, c)
	q.save(j)
}

func (q *Queue) setState(now time.Time, j *job, s wire.JobState) {
	if j.r.Info.State != s {
		q.count(j.r.Info.User, j.r.Info.State, -1)
		q.count(j.r.Info.User, s, 1)
		j.r.Info.State = s
		j.r.Info.SinceUnixMs = now.UnixMilli()
		if j.d != nil {
			q.dagDirty[j.d] = true
		}
	}
	if ended(s) && j.r.Info.EndedUnixMs == 0 {
		j.r.Info.EndedUnixMs = now.UnixMilli()
	}
}

// act queues an act for j (its main line).
func (q *Queue) act(j *job, a Act) {
	q.actSeq++
	a.ID = q.actSeq
	a.Job = j.r.Info.Id
	a.User = j.r.Info.User
	a.Spec = j.r.Spec
	if a.Attempt == nil && j.r.Attempt != nil {
		a.Attempt = proto.Clone(j.r.Attempt).(*wire.JobAttempt)
	}
	if a.Try == 0 {
		a.Try = j.r.Info.Tries
	}
	q.acts[a.ID] = pending{j: j, epoch: j.epoch, act: a}
	if a.Kind == ActClean {
		j.cleaning = a.ID
	} else {
		j.busy = a.ID
	}
	if a.Kind == ActMatch {
		q.matching++
	}
	q.rd.Acts = append(q.rd.Acts, a)
}

func (q *Queue) claimAct(c *claim, a Act) {
	q.actSeq++
	a.ID = q.actSeq
	a.User = c.user
	a.Attempt = proto.Clone(c.a).(*wire.JobAttempt)
	c.busy = a.ID
	q.acts[a.ID] = pending{c: c, act: a}
	q.rd.Acts = append(q.rd.Acts, a)
}

// Submission is a submit request as the queue sees it.
type Submission struct {
	RequestID string
	User      string // as the manager recognises the submitter
	Owner     string // the submitter's peer id
	Jobs      []*wire.JobSpec
}

// Submit queues the jobs of s as one cluster, or, for a request id seen
// before, answers its cluster again (dup). The jobs are in Ready.Saves:
// the caller must not answer before they are written.
func (q *Queue) Submit(now time.Time, s Submission) (cluster string, dup bool, err error) {
	if s.RequestID != "" {
		if c, ok := q.byReq[s.RequestID]; ok {
			if q.dags[c] != nil {
				return "", false, fmt.Errorf("%w: request id %q was used for a workflow", ErrBadSpec, s.RequestID)
			}
			if js := q.clusters[c]; len(js) > 0 && (js[0].r.Info.User != s.User || js[0].r.Info.OwnerPeer != s.Owner) {
				return "", false, fmt.Errorf("%w: request id %q was used by another submitter", ErrBadSpec, s.RequestID)
			}
			return c, true, nil
		}
	}
	if len(s.Jobs) == 0 {
		return "", false, fmt.Errorf("%w: a submit names no job", ErrBadSpec)
	}
	for i, sp := range s.Jobs {
		if err := CheckSpec(sp); err != nil {
			return "", false, fmt.Errorf("%w: job %d: %v", ErrBadSpec, i, err)
		}
		if sp.Index != uint32(i) || sp.Count != uint32(len(s.Jobs)) {
			return "", false, fmt.Errorf("%w: job %d of %d says it is index %d of %d", ErrBadSpec, i, len(s.Jobs), sp.Index, sp.Count)
		}
	}
	if err := q.roomFor(s.User, len(s.Jobs)); err != nil {
		return "", false, err
	}
	q.next++
	q.rd.Next = q.next
	cluster = q.cfg.Self + "." + strconv.FormatUint(q.next, 10)
	js := make([]*job, 0, len(s.Jobs))
	for _, sp := range s.Jobs {
		id := JobID(cluster, sp.Index, sp.Count)
		r := &wire.JobRecord{
			Spec:      proto.Clone(sp).(*wire.JobSpec),
			RequestId: s.RequestID,
			Info: &wire.JobInfo{
				Id: id, Cluster: cluster, Index: sp.Index, Name: sp.Name, User: s.User, OwnerPeer: s.Owner,
				State: wire.JobState_JOB_STATE_IDLE, SinceUnixMs: now.UnixMilli(), SubmittedUnixMs: now.UnixMilli(),
				Priority: sp.Priority, OutputDir: sp.OutputDir,
			},
		}
		j := &job{r: r}
		q.jobs[id] = j
		q.count(s.User, r.Info.State, 1)
		js = append(js, j)
		q.log(now, j, "submitted", fmt.Sprintf("by %s", s.User))
	}
	q.clusters[cluster] = js
	q.order = append(q.order, cluster)
	q.changed = true
	if s.RequestID != "" {
		q.byReq[s.RequestID] = cluster
	}
	return cluster, false, nil
}

// Load restores the queue from its records and cluster counter at a
// start; jobs that were placed are found again (polled, fetched) and
// ended jobs' reservations still held are released.
func (q *Queue) Load(now time.Time, next uint64, recs []*wire.JobRecord) {
	q.next = next
	for _, r := range recs {
		if r.GetInfo() == nil || r.GetSpec() == nil {
			continue
		}
		j := &job{r: r}
		id := r.Info.Id
		q.jobs[id] = j
		q.count(r.Info.User, r.Info.State, 1)
		if _, ok := q.clusters[r.Info.Cluster]; !ok {
			q.order = append(q.order, r.Info.Cluster)
		}
		q.clusters[r.Info.Cluster] = append(q.clusters[r.Info.Cluster], j)
		if r.RequestId != "" {
			q.byReq[r.RequestId] = r.Info.Cluster
		}
		if n := clusterNumber(r.Info.Cluster); n > q.next {
			q.next = n
		}
		if r.Attempt != nil && r.Attempt.HeardUnixMs < now.UnixMilli() {
			// the executor has lost_after from our return, not from before
			r.Attempt.HeardUnixMs = now.UnixMilli()
		}
		switch r.Info.State {
		case wire.JobState_JOB_STATE_MATCHED:
			q.setState(now, j, wire.JobState_JOB_STATE_IDLE)
		}
		if ended(r.Info.State) && r.Attempt != nil && !r.Attempt.Released {
			r.Orphans = append(r.Orphans, r.Attempt)
			r.Attempt = nil
		}
	}
	for _, js := range q.clusters {
		slices.SortFunc(js, func(a, b *job) int { return cmp.Compare(a.r.Info.Index, b.r.Info.Index) })
	}
	slices.SortFunc(q.order, func(a, b string) int { return cmp.Compare(clusterNumber(a), clusterNumber(b)) })
	q.loadDags(now)
	q.changed = true
}

func clusterNumber(c string) uint64 {
	i := strings.LastIndexByte(c, '.')
	n, _ := strconv.ParseUint(c[i+1:], 10, 64)
	return n
}

// Resolve names the jobs ids name (a cluster id names all of its jobs),
// in order, or says which is unknown.
func (q *Queue) Resolve(ids []string) ([]string, error) {
	var out []string
	for _, id := range ids {
		if _, ok := q.jobs[id]; ok {
			out = append(out, id)
			continue
		}
		if js, ok := q.clusters[id]; ok {
			for _, j := range js {
				out = append(out, j.r.Info.Id)
			}
			continue
		}
		if d, ok := q.dags[id]; ok {
			out = append(out, d.jobIDs()...)
			continue
		}
		return nil, fmt.Errorf("%w: %s is not a job of this manager (write CLUSTER or CLUSTER[INDEX], as `gridmgr job q` shows them)", ErrNoJob, id)
	}
	return out, nil
}

// Info is a copy of a job's info (with its log if withLog).
func (q *Queue) Info(id string, withLog bool) (*wire.JobInfo, bool) {
	j, ok := q.jobs[id]
	if !ok {
		return nil, false
	}
	in := proto.Clone(j.r.Info).(*wire.JobInfo)
	if !withLog {
		in.Log = nil
	}
	return in, true
}

// Spec is a job's spec (read only).
func (q *Queue) Spec(id string) (*wire.JobSpec, bool) {
	j, ok := q.jobs[id]
	if !ok {
		return nil, false
	}
	return j.r.Spec, true
}

// Filter selects jobs for List.
type Filter struct {
	User  string // "" any
	Owner string // "" any: the submitter's peer
	Ended bool   // also ended jobs
}

// List is the jobs f selects, by cluster number and index.
func (q *Queue) List(f Filter) []*wire.JobInfo {
	var out []*wire.JobInfo
	for _, j := range q.jobs {
		in := j.r.Info
		if (f.User != "" && in.User != f.User) || (f.Owner != "" && in.OwnerPeer != f.Owner) || (!f.Ended && ended(in.State)) {
			continue
		}
		c := proto.Clone(in).(*wire.JobInfo)
		c.Log = nil
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *wire.JobInfo) int {
		return cmp.Or(cmp.Compare(clusterNumber(a.Cluster), clusterNumber(b.Cluster)), cmp.Compare(a.Index, b.Index))
	})
	return out
}

// Placed is the job placed now (matched to staging out) whose spec's
// attrs[key] is val at index, if any: a glide-in's job, found by the
// name of the glide-in it runs.
func (q *Queue) Placed(key, val string, index uint32) (*wire.JobInfo, bool) {
	for _, js := range q.clusters {
		if len(js) == 0 || js[0].r.Spec.Attrs[key] != val {
			continue
		}
		for _, j := range js {
			if j.r.Info.Index == index && placed(j.r.Info.State) {
				in := proto.Clone(j.r.Info).(*wire.JobInfo)
				in.Log = nil
				return in, true
			}
		}
	}
	return nil, false
}

// Counts are the jobs by state (index: wire.JobState).
func (q *Queue) Counts() [wire.JobState_JOB_STATE_WAITING + 1]int { return q.counts }

// may says whether who (admin or not) may act on j.
func may(j *job, who string, admin bool) bool { return admin || j.r.Info.OwnerPeer == who }

// Hold holds the jobs ids (resolved) for reason: a placed job's program is
// stopped and its reservation released.
func (q *Queue) Hold(now time.Time, ids []string, who string, admin bool, reason string) error {
	js, err := q.own(ids, who, admin)
	if err != nil {
		return err
	}
	q.changed = true
	if reason == "" {
		reason = "held by " + shortPeer(who)
	}
	for _, j := range js {
		if ended(j.r.Info.State) || j.r.Info.State == wire.JobState_JOB_STATE_HELD {
			continue
		}
		q.hold(now, j, reason)
	}
	return nil
}

func (q *Queue) hold(now time.Time, j *job, reason string) {
	q.unplace(now, j)
	q.setState(now, j, wire.JobState_JOB_STATE_HELD)
	j.r.Info.Reason = reason
	q.log(now, j, "held", reason)
}

// Unhold puts held jobs back in the queue.
func (q *Queue) Unhold(now time.Time, ids []string, who string, admin bool) error {
	js, err := q.own(ids, who, admin)
	if err != nil {
		return err
	}
	q.changed = true
	for _, j := range js {
		if j.r.Info.State != wire.JobState_JOB_STATE_HELD {
			continue
		}
		if j.d != nil {
			// a workflow's job waits again for its turn (evaluate
			// releases it at once if its nodes before it completed)
			q.setState(now, j, wire.JobState_JOB_STATE_WAITING)
		} else {
			q.setState(now, j, wire.JobState_JOB_STATE_IDLE)
		}
		j.r.Info.Reason = ""
		j.wait, j.notBefore = 0, time.Time{}
		q.log(now, j, "unheld", "back in the queue")
	}
	return nil
}

// Remove removes the jobs: a placed job's program is stopped and its
// reservation released; its record is kept (ended) until forgotten.
func (q *Queue) Remove(now time.Time, ids []string, who string, admin bool) error {
	js, err := q.own(ids, who, admin)
	if err != nil {
		return err
	}
	q.changed = true
	for _, j := range js {
		if ended(j.r.Info.State) {
			continue
		}
		q.unplace(now, j)
		q.setState(now, j, wire.JobState_JOB_STATE_REMOVED)
		j.r.Info.Reason = "removed by " + shortPeer(who)
		q.log(now, j, "removed", j.r.Info.Reason)
	}
	return nil
}

func (q *Queue) own(ids []string, who string, admin bool) ([]*job, error) {
	rs, err := q.Resolve(ids)
	if err != nil {
		return nil, err
	}
	js := make([]*job, 0, len(rs))
	for _, id := range rs {
		j := q.jobs[id]
		if !may(j, who, admin) {
			return nil, fmt.Errorf("%w: job %s was submitted by another client; only its submitter or an admin may change it", ErrForbidden, id)
		}
		js = append(js, j)
	}
	return js, nil
}

// unplace gives up j's placement: whatever is in flight for it is stale,
// its instance is stopped and removed and its reservation released.
func (q *Queue) unplace(now time.Time, j *job) {
	j.epoch++
	j.waiting = false
	if j.busy != 0 {
		q.dropAct(j.busy)
		j.busy = 0
	}
	if a := j.r.Attempt; a != nil {
		j.r.Orphans = append(j.r.Orphans, a)
		j.r.Attempt = nil
	}
	j.offers = nil
	q.save(j)
}

func (q *Queue) dropAct(id uint64) {
	p, ok := q.acts[id]
	if !ok {
		return
	}
	if p.act.Kind == ActMatch {
		q.matching--
	}
	// a reserve in flight may still succeed: keep it to release what it got
	if p.act.Kind == ActReserve {
		return
	}
	delete(q.acts, id)
}

func shortPeer(p string) string {
	if len(p) > 12 {
		return p[:4] + "…" + p[len(p)-6:]
	}
	return p
}

// lostAfter is j's lost_after.
func (q *Queue) lostAfter(j *job) time.Duration {
	if ms := j.r.Spec.LostAfterMs; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return q.cfg.LostAfter
}

// claimKey says which jobs may share a reservation: the same amounts,
// requirement and policy attributes.
func claimKey(s *wire.JobSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d|%d|%d|%s|", s.Cpus, s.Mem, s.Disk, s.Requirement)
	for _, t := range s.Tokens {
		fmt.Fprintf(&b, "%s=%d,", t.Kind, t.N)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Attrs)) {
		fmt.Fprintf(&b, "%s=%s,", k, s.Attrs[k])
	}
	return b.String()
}

func (q *Queue) lease(s *wire.JobSpec) time.Duration {
	return time.Duration(s.RuntimeMs)*time.Millisecond + q.cfg.LeaseSlack
}

// tickGap is the least time between two Ticks that something that
// happened asks for: a burst of submissions or results is taken in one.
// A Tick reads every job (0.75 µs each on this project's 2-core test
// machine, most of it waiting on memory), so in a long queue the gap
// grows by tickGapPerJob a job: a stream of submissions into 40,000
// queued jobs is taken every 200 ms, and Ticks keep to about a sixth of
// a core rather than all of it (at 20 ms, 40,000 jobs took 61 % of the
// CPU of BenchmarkDurableJobSubmit).
const (
	tickGap       = 20 * time.Millisecond
	tickGapPerJob = 5 * time.Microsecond
)

// changeGap is the least time between two Ticks that something that
// happened asks for, at the queue's length now.
func (q *Queue) changeGap() time.Duration {
	return max(tickGap, time.Duration(len(q.jobs))*tickGapPerJob)
}

// NextDeadline is when Tick next has something to do (zero: nothing is
// waiting for time). It is cheap: the last Tick worked it out.
func (q *Queue) NextDeadline(now time.Time) time.Time {
	t := q.due
	if q.changed {
		if soon := q.lastTick.Add(q.changeGap()); t.IsZero() || soon.Before(t) {
			t = soon
		}
	}
	if !t.IsZero() && t.Before(now) {
		t = now
	}
	return t
}

// Tick moves every job that waits for nothing but time: matches idle jobs
// (or hands them a claim), polls running ones, retries what failed for
// want of an answer, cleans up given-up placements and releases idle
// claims.
func (q *Queue) Tick(now time.Time) {
	var idle []*job
	running := 0
	perUser := map[string]int{}
	for _, j := range q.jobs {
		if placed(j.r.Info.State) || (j.busy != 0 && j.r.Info.State == wire.JobState_JOB_STATE_IDLE) {
			running++
			perUser[j.r.Info.User]++
		}
	}
	q.lastTick, q.changed, q.due = now, false, time.Time{}
	due := func(t time.Time) {
		if q.due.IsZero() || t.Before(q.due) {
			q.due = t
		}
	}
	for _, d := range slices.SortedFunc(maps.Keys(q.dagDirty), func(a, b *dag) int { return cmp.Compare(clusterNumber(a.id), clusterNumber(b.id)) }) {
		q.evaluate(now, d)
	}
	for _, d := range q.dags {
		switch {
		case d.keepUntil.IsZero(): // runs
		case now.Before(d.keepUntil):
			due(d.keepUntil.Add(time.Millisecond))
		case q.dagForgettable(d):
			q.forgetDag(d)
		}
	}
	var all []*job
	for _, c := range q.order {
		all = append(all, q.clusters[c]...)
	}
	for _, j := range all {
		info := j.r.Info
		if len(j.r.Orphans) > 0 && j.cleaning == 0 && !now.Before(j.notBefore) {
			q.act(j, Act{Kind: ActClean, Attempt: j.r.Orphans[0], Release: true})
		}
		if ended(info.State) {
			if info.State == wire.JobState_JOB_STATE_COMPLETED && !j.r.Accepted && j.busy == 0 {
				q.act(j, Act{Kind: ActAccept})
			} else if info.State == wire.JobState_JOB_STATE_FAILED && !j.r.Accepted && j.busy == 0 && info.Tries > 0 {
				q.act(j, Act{Kind: ActAccept})
			} else if j.d != nil {
				// forgotten with its workflow
			} else if j.busy == 0 && len(j.r.Orphans) == 0 && now.Sub(time.UnixMilli(info.EndedUnixMs)) > q.cfg.KeepEnded {
				q.forget(j)
			} else if j.busy == 0 && len(j.r.Orphans) == 0 {
				due(time.UnixMilli(info.EndedUnixMs).Add(q.cfg.KeepEnded + time.Millisecond))
			}
			if len(j.r.Orphans) > 0 && j.cleaning == 0 {
				due(j.notBefore)
			}
			continue
		}
		if len(j.r.Orphans) > 0 && j.cleaning == 0 {
			due(j.notBefore)
		}
		if info.State == wire.JobState_JOB_STATE_HELD {
			continue
		}
		if j.busy != 0 {
			continue
		}
		if now.Before(j.notBefore) && !(info.State == wire.JobState_JOB_STATE_IDLE && j.waitFrom.Before(q.wokeAt)) {
			due(j.notBefore)
			continue
		}
		switch info.State {
		case wire.JobState_JOB_STATE_IDLE:
			if d := j.r.Spec.DeadlineUnixMs; d > 0 && now.UnixMilli() > d {
				q.setState(now, j, wire.JobState_JOB_STATE_FAILED)
				info.Reason = "its deadline " + time.UnixMilli(d).UTC().Format(time.RFC3339) + " passed before it could start"
				q.log(now, j, "failed", info.Reason)
				continue
			}
			idle = append(idle, j)
		case wire.JobState_JOB_STATE_RESERVED:
			if b := j.r.Attempt.GetBeginUnixMs(); b > now.UnixMilli() {
				due(time.UnixMilli(b)) // a window booked ahead: staged when it begins
				continue
			}
			q.act(j, Act{Kind: ActStage, Lease: q.lease(j.r.Spec)})
		case wire.JobState_JOB_STATE_STAGED:
			q.act(j, Act{Kind: ActStart})
		case wire.JobState_JOB_STATE_RUNNING:
			q.act(j, Act{Kind: ActPoll})
		case wire.JobState_JOB_STATE_STAGING_OUT:
			q.act(j, Act{Kind: ActFetch})
		}
	}
	if len(q.claims) == 0 && q.matching >= q.cfg.MaxMatching {
		// No idle job can act this Tick: there is no claim to take or
		// wait for, and no match may start. What the loop below would
		// do is only ask to look again (a burst of submissions into a
		// long queue would sort it at every Tick for nothing).
		for _, j := range idle {
			if running < q.cfg.MaxRunning && perUser[j.r.Info.User] < q.cfg.MaxRunningPerUser {
				due(now.Add(q.cfg.MatchRetry))
				break
			}
		}
		idle = nil
	}
	slices.SortFunc(idle, func(a, b *job) int {
		x, y := a.ranked(), b.ranked()
		return cmp.Or(cmp.Compare(y.prio, x.prio), cmp.Compare(x.submitted, y.submitted),
			cmp.Compare(x.cluster, y.cluster), cmp.Compare(x.index, y.index))
	})
	soon := map[*claim]bool{} // claims being readied, each promised to one idle job
	for _, j := range idle {
		u := j.r.Info.User
		if running >= q.cfg.MaxRunning || perUser[u] >= q.cfg.MaxRunningPerUser {
			continue
		}
		if j.r.Spec.Spread && q.siblingPlacing(j) {
			// spread jobs of a cluster are placed one at a time, so each
			// sees where the others went
			due(now.Add(q.cfg.MatchRetry))
			continue
		}
		due(now.Add(q.cfg.MatchRetry)) // limits or matches in flight may free up
		if c := q.takeClaim(now, j); c != nil && j.r.Spec.BeginUnixMs <= now.UnixMilli() {
			running++
			perUser[u]++
			q.place(now, j, c.a, fmt.Sprintf("%s at %s, reused from the job before (lease until %s)",
				c.a.Reservation, c.a.Name, clock(time.UnixMilli(c.a.LeaseEndUnixMs))))
			continue
		}
		if c := q.claimSoon(now, j, soon); c != nil && j.r.Spec.BeginUnixMs <= now.UnixMilli() {
			// The job before it just ended on a reservation that fits
			// it, whose instance is being removed: it waits the moment
			// that takes rather than query and reserve anew (a workflow's
			// next node is released that soon).
			soon[c] = true
			continue
		}
		if q.matching >= q.cfg.MaxMatching {
			continue
		}
		running++
		perUser[u]++
		a := Act{Kind: ActMatch, Lease: q.lease(j.r.Spec), Avoid: j.avoiding(now)}
		if j.r.Spec.Spread {
			a.Avoid = append(a.Avoid, q.siblingPeers(j)...)
		}
		if b := j.r.Spec.BeginUnixMs; b > now.UnixMilli() {
			a.Begin = time.UnixMilli(b)
		}
		q.act(j, a)
	}
	for _, c := range q.claims {
		if c.busy == 0 && !c.gone && c.ready && now.Sub(c.since) >= q.cfg.ClaimIdle {
			q.claimAct(c, Act{Kind: ActClean, Release: true})
		} else if c.busy == 0 && !c.gone {
			due(c.since.Add(q.cfg.ClaimIdle))
		}
	}
	q.claims = slices.DeleteFunc(q.claims, func(c *claim) bool { return c.gone })
}

// siblingPlacing says whether another job of j's cluster is matching or
// reserving now.
func (q *Queue) siblingPlacing(j *job) bool {
	for _, o := range q.clusters[j.r.Info.Cluster] {
		if o != j && o.busy != 0 && (o.r.Info.State == wire.JobState_JOB_STATE_IDLE || o.r.Info.State == wire.JobState_JOB_STATE_MATCHED) {
			return true
		}
	}
	return false
}

// siblingPeers are the managers where the other jobs of j's cluster are
// placed.
func (q *Queue) siblingPeers(j *job) []string {
	var ps []string
	for _, o := range q.clusters[j.r.Info.Cluster] {
		if o != j && o.r.Attempt != nil && placed(o.r.Info.State) {
			ps = append(ps, o.r.Attempt.Peer)
		}
	}
	return ps
}

// claimMargin is the least a claim's lease must still run for a job to
// be given it (its stage renews the lease for the job's run time).
const claimMargin = 10 * time.Second

// takeClaim finds a ready claim j may run on and takes it out of the
// spare ones.
func (q *Queue) takeClaim(now time.Time, j *job) *claim {
	if len(q.claims) == 0 {
		return nil
	}
	key := j.claimKey()
	end := now.Add(claimMargin)
	var taken []string
	if j.r.Spec.Spread {
		taken = q.siblingPeers(j)
	}
	for i, c := range q.claims {
		if c.ready && c.busy == 0 && !c.gone && c.user == j.r.Info.User && c.key == key &&
			!time.UnixMilli(c.a.LeaseEndUnixMs).Before(end) && !slices.Contains(j.avoiding(now), c.a.Peer) && !slices.Contains(taken, c.a.Peer) {
			q.claims = slices.Delete(q.claims, i, i+1)
			return c
		}
	}
	return nil
}

// claimSoonFor bounds how long a job waits for a claim being readied.
const claimSoonFor = 5 * time.Second

// claimSoon finds a claim j could run on once it is ready (its instance
// being removed now, for less than claimSoonFor), not promised to
// another job this Tick.
func (q *Queue) claimSoon(now time.Time, j *job, promised map[*claim]bool) *claim {
	if len(q.claims) == 0 {
		return nil
	}
	key := j.claimKey()
	end := now.Add(claimMargin)
	var taken []string
	if j.r.Spec.Spread {
		taken = q.siblingPeers(j)
	}
	for _, c := range q.claims {
		if !c.ready && c.busy != 0 && !c.gone && !promised[c] && c.user == j.r.Info.User && c.key == key && now.Sub(c.since) < claimSoonFor &&
			!time.UnixMilli(c.a.LeaseEndUnixMs).Before(end) && !slices.Contains(j.avoiding(now), c.a.Peer) && !slices.Contains(taken, c.a.Peer) {
			return c
		}
	}
	return nil
}

// place gives j the reservation of attempt a (fresh from a reserve, or a
// claim) and starts staging.
func (q *Queue) place(now time.Time, j *job, a *wire.JobAttempt, detail string) {
	a = proto.Clone(a).(*wire.JobAttempt)
	a.Try = j.r.Info.Tries + 1
	a.Instance = ""
	a.HeardUnixMs = now.UnixMilli()
	a.Released = false
	j.r.Attempt = a
	j.r.Accepted = false
	j.r.Info.Manager, j.r.Info.ManagerPeer, j.r.Info.Reservation = a.Name, a.Peer, a.Reservation
	j.r.Info.Reason = ""
	q.setState(now, j, wire.JobState_JOB_STATE_RESERVED)
	q.log(now, j, "reserved", detail)
	if a.BeginUnixMs > now.UnixMilli() {
		return // Tick stages it when its window begins
	}
	q.act(j, Act{Kind: ActStage, Lease: q.lease(j.r.Spec)})
}

// clock is a time in a log line: UTC, to the second, the day too when it
// is not today's.
func clock(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func (q *Queue) forget(j *job) {
	id := j.r.Info.Id
	delete(q.jobs, id)
	q.count(j.r.Info.User, j.r.Info.State, -1)
	c := j.r.Info.Cluster
	q.clusters[c] = slices.DeleteFunc(q.clusters[c], func(x *job) bool { return x == j })
	if len(q.clusters[c]) == 0 {
		delete(q.clusters, c)
		q.order = slices.DeleteFunc(q.order, func(x string) bool { return x == c })
		if j.r.RequestId != "" {
			delete(q.byReq, j.r.RequestId)
		}
	}
	delete(q.dirty, j)
	q.actSeq++
	q.rd.Acts = append(q.rd.Acts, Act{ID: q.actSeq, Kind: ActForget, Job: id})
}

// Done takes the Result of an Act.
func (q *Queue) Done(now time.Time, res Result) {
	p, ok := q.acts[res.ID]
	if !ok {
		return
	}
	delete(q.acts, res.ID)
	q.changed = true
	if p.c != nil {
		q.claimDone(now, p.c, p.act, res)
		return
	}
	j := p.j
	if p.act.Kind == ActMatch {
		q.matching--
	}
	if p.act.Kind == ActClean {
		if j.cleaning == res.ID {
			j.cleaning = 0
		}
		q.orphanCleaned(now, j, p.act, res)
		return
	}
	if j.busy == res.ID {
		j.busy = 0
	}
	if _, live := q.jobs[j.r.Info.Id]; !live {
		return
	}
	if p.epoch != j.epoch {
		// stale: the job moved on (held, removed, lost). A reservation
		// got meanwhile is released.
		if p.act.Kind == ActReserve && res.Err == nil && res.Attempt != nil {
			j.r.Orphans = append(j.r.Orphans, res.Attempt)
			q.save(j)
		}
		return
	}
	if j.r.Attempt != nil && res.Err == nil {
		j.r.Attempt.HeardUnixMs = now.UnixMilli()
		if j.waiting {
			// it answers again: what the job waited for is over
			j.waiting = false
			j.r.Info.Reason = ""
			q.save(j)
		}
	}
	switch p.act.Kind {
	case ActMatch:
		q.matched(now, j, res)
	case ActReserve:
		q.reserved(now, j, res)
	case ActStage:
		if res.Err != nil {
			q.placementFailed(now, j, "staging", res.Err)
			return
		}
		j.r.Attempt.Instance = res.Instance
		if st := res.Status.State; st != "" && st != "installed" {
			// started before the submit manager's restart: found again,
			// not run again
			q.started(now, j, "found "+st+" at "+j.r.Attempt.Name+" after this manager's restart")
			return
		}
		q.setState(now, j, wire.JobState_JOB_STATE_STAGED)
		q.log(now, j, "staged", "bundle and inputs installed as "+res.Instance)
		q.act(j, Act{Kind: ActStart})
	case ActStart:
		if res.Err != nil {
			q.placementFailed(now, j, "starting", res.Err)
			return
		}
		q.started(now, j, "")
	case ActPoll:
		if res.Err != nil {
			q.placementFailed(now, j, "asking after it", res.Err)
			return
		}
		st := res.Status
		j.r.Info.CpuSeconds, j.r.Info.MemBytes = st.CPUSeconds, max(j.r.Info.MemBytes, st.MemBytes)
		if !st.Ended() {
			// asked soon after the start, then less and less often: a
			// short job is seen to end soon, a long one costs a request
			// a PollEvery
			j.pollWait = min(max(2*j.pollWait, firstPoll), q.cfg.PollEvery)
			j.notBefore = now.Add(j.pollWait)
			return
		}
		j.r.Info.Exited, j.r.Info.ExitCode, j.r.Info.Exit = st.Exited, st.ExitCode, st.Exit
		if j.r.Info.Exit == "" {
			j.r.Info.Exit = st.State
		}
		q.setState(now, j, wire.JobState_JOB_STATE_STAGING_OUT)
		q.log(now, j, "exited", j.r.Info.Exit)
		q.act(j, Act{Kind: ActFetch})
	case ActFetch:
		if res.Err != nil {
			q.placementFailed(now, j, "bringing back its results", res.Err)
			return
		}
		q.fetched(now, j, res)
	case ActAccept:
		if res.Err != nil {
			j.notBefore = now.Add(q.cfg.PollEvery)
			q.log(now, j, "error", "keeping its results: "+res.Err.Msg)
			return
		}
		j.r.Accepted = true
		j.r.Info.Results = res.Files
		q.save(j)
	}
}

// started: j's program runs (or ran: found after a restart).
func (q *Queue) started(now time.Time, j *job, detail string) {
	j.r.Info.Tries++
	j.r.Attempt.Try = j.r.Info.Tries
	j.r.Info.StartedUnixMs = now.UnixMilli()
	j.r.Info.Exited, j.r.Info.ExitCode, j.r.Info.Exit = false, 0, ""
	q.setState(now, j, wire.JobState_JOB_STATE_RUNNING)
	if detail == "" {
		detail = fmt.Sprintf("try %d at %s", j.r.Info.Tries, j.r.Attempt.Name)
	}
	q.log(now, j, "started", detail)
	j.notBefore, j.pollWait = now.Add(firstPoll), 0
}

func (q *Queue) matched(now time.Time, j *job, res Result) {
	var offers []*wire.Offer
	var taken []string
	if j.r.Spec.Spread {
		taken = q.siblingPeers(j)
	}
	spreadOut := false
	avoid := j.avoiding(now)
	for _, o := range res.Offers {
		if slices.Contains(taken, o.Peer) {
			spreadOut = true
		} else if !slices.Contains(avoid, o.Peer) {
			offers = append(offers, o)
		}
	}
	if res.Err != nil || len(offers) == 0 {
		why := res.Why
		if res.Err != nil {
			why = res.Err.Msg
		} else if why == "" && spreadOut {
			why = "only managers that already run another job of its cluster offered (spread)"
		} else if why == "" && len(res.Offers) > 0 {
			why = "only managers it was lost at in the last minute offered"
		} else if why == "" {
			why = "no manager offers what it asks"
		}
		if res.PolicyOnly && res.Err == nil {
			q.hold(now, j, "every manager that has the resources refuses user "+j.r.Info.User+" by its policy: "+why+" (unhold once that changes)")
			return
		}
		q.backoff(now, j)
		if j.r.Info.Reason != why {
			j.r.Info.Reason = why
			q.save(j)
		}
		return
	}
	if !res.Window.IsZero() && j.r.Spec.BeginUnixMs <= now.UnixMilli() {
		// Nothing is free now. A window is booked ahead only for a job
		// whose begin is ahead: one that may run now waits for what frees
		// first (a claim, a match), rather than hold the calendar for a
		// lease's worth of time that may free much sooner.
		j.r.Info.Reason = fmt.Sprintf("nothing free now; the earliest window for it begins %s at %s", clock(res.Window), offers[0].Name)
		q.backoff(now, j)
		q.save(j)
		return
	}
	if d := j.r.Spec.DeadlineUnixMs; d > 0 && res.Window.UnixMilli() > d {
		j.r.Info.Reason = fmt.Sprintf("the earliest window, from %s, begins after its deadline %s", clock(res.Window), clock(time.UnixMilli(d)))
		q.backoff(now, j)
		q.save(j)
		return
	}
	j.offers = offers
	q.setState(now, j, wire.JobState_JOB_STATE_MATCHED)
	names := make([]string, 0, len(offers))
	for _, o := range offers {
		names = append(names, o.Name)
	}
	detail := names[0]
	if len(names) > 1 {
		detail += fmt.Sprintf(" (of %d: %s)", len(names), strings.Join(names[:min(len(names), 5)], ", "))
	}
	if !res.Window.IsZero() {
		detail += " for the earliest window, from " + clock(res.Window)
	}
	q.log(now, j, "matched", detail)
	q.act(j, Act{Kind: ActReserve, Offers: offers, Lease: q.lease(j.r.Spec), Begin: res.Window,
		RequestID: fmt.Sprintf("job/%s/%d/%d", j.r.Info.Id, j.r.Info.Tries+1, j.r.Info.Moves)})
}

func (q *Queue) reserved(now time.Time, j *job, res Result) {
	if res.Err != nil {
		j.offers = nil
		if res.Err.Kind == Forbidden {
			q.hold(now, j, res.Err.Msg+" (unhold once that changes)")
			return
		}
		q.setState(now, j, wire.JobState_JOB_STATE_IDLE)
		j.r.Info.Reason = "could not reserve: " + res.Err.Msg
		q.backoff(now, j)
		q.save(j)
		return
	}
	j.wait = 0
	a := res.Attempt
	if a.BeginUnixMs > now.UnixMilli() {
		q.place(now, j, a, fmt.Sprintf("%s at %s: a window booked ahead, %s to %s; staged when it begins", a.Reservation, a.Name,
			clock(time.UnixMilli(a.BeginUnixMs)), clock(time.UnixMilli(a.LeaseEndUnixMs))))
		return
	}
	q.place(now, j, a, fmt.Sprintf("%s at %s (lease until %s)", a.Reservation, a.Name, clock(time.UnixMilli(a.LeaseEndUnixMs))))
}

// placementFailed handles a failed act on j's placement: wait for an
// unreachable manager up to lost_after, give up a placement that is gone,
// count a broken one as a failed try.
func (q *Queue) placementFailed(now time.Time, j *job, doing string, f *Failure) {
	a := j.r.Attempt
	switch f.Kind {
	case Unreachable:
		silent := now.Sub(time.UnixMilli(a.HeardUnixMs))
		if silent < q.lostAfter(j) {
			j.notBefore = now.Add(q.cfg.PollEvery)
			if !j.waiting {
				j.waiting = true
				j.r.Info.Reason = fmt.Sprintf("no answer from %s (%s); waiting up to lost_after (%s) from its last answer", a.Name, f.Msg, q.lostAfter(j))
				q.log(now, j, "waiting", j.r.Info.Reason)
			}
			return
		}
		q.lost(now, j, fmt.Sprintf("%s has not answered for %s (lost_after %s): %s", a.Name, silent.Round(time.Second), q.lostAfter(j), f.Msg))
	case Gone, Refused, Forbidden:
		if f.Kind == Gone && j.r.Info.State == wire.JobState_JOB_STATE_RUNNING && a.LeaseEndUnixMs > 0 &&
			!now.Before(time.UnixMilli(a.LeaseEndUnixMs).Add(-leaseEndSlack)) {
			// its reservation's lease ran out under it: it ran past its
			// runtime, and its manager stopped it
			q.tryFailed(now, j, fmt.Sprintf("ran past its runtime of %s: its reservation's lease ended and %s stopped it",
				time.Duration(j.r.Spec.RuntimeMs)*time.Millisecond, a.Name), true)
			return
		}
		q.lost(now, j, fmt.Sprintf("%s while %s at %s", f.Msg, doing, a.Name))
	default:
		q.tryFailed(now, j, fmt.Sprintf("%s at %s: %s", doing, a.Name, f.Msg), true)
	}
}

// maxMatchWait bounds the wait between two matches of an idle job that
// found nothing; a release of this queue's wakes them sooner.
const maxMatchWait = 15 * time.Second

// backoff makes j, which found nothing to run on, wait before its next
// match: twice as long as the last time, from MatchRetry to
// maxMatchWait, or until this queue lets a reservation go (wake).
func (q *Queue) backoff(now time.Time, j *job) {
	j.wait = min(max(2*j.wait, q.cfg.MatchRetry), maxMatchWait)
	j.notBefore = now.Add(j.wait)
	j.waitFrom = now
}

// wake: the queue let a reservation go (or a job ended): idle jobs
// waiting after a match that found nothing may look again now.
func (q *Queue) wake(now time.Time) { q.wokeAt = now }

// leaseEndSlack: a placement gone this close to its lease's end ended
// with the lease (clocks differ a little).
const leaseEndSlack = 5 * time.Second

// lost gives up j's placement: the copy there is stopped when its manager
// answers again and its results are never taken; the job is matched anew
// elsewhere.
func (q *Queue) lost(now time.Time, j *job, why string) {
	peer := j.r.Attempt.Peer
	q.unplace(now, j)
	j.avoid = append(slices.DeleteFunc(j.avoid, func(a avoided) bool { return a.peer == peer || now.Sub(a.at) >= avoidFor }), avoided{peer, now})
	j.r.Info.Moves++
	j.r.Info.Reason = ""
	q.setState(now, j, wire.JobState_JOB_STATE_IDLE)
	j.notBefore = time.Time{}
	q.log(now, j, "lost", why+"; its copy there will be stopped and its results discarded; matching again")
}

// fetched decides a try by what came back.
func (q *Queue) fetched(now time.Time, j *job, res Result) {
	info := j.r.Info
	ok := info.Exited && slices.Contains(successCodes(j.r.Spec), info.ExitCode)
	why := info.Exit
	if ok && len(res.Missing) > 0 {
		ok = false
		why = "exited " + info.Exit + " but did not write " + strings.Join(res.Missing, ", ")
	}
	info.Results = res.Files
	if ok {
		q.setState(now, j, wire.JobState_JOB_STATE_COMPLETED)
		q.endPlacement(now, j)
		q.log(now, j, "completed", fmt.Sprintf("%s at %s; %d files brought back", info.Exit, info.Manager, len(res.Files)))
		q.act(j, Act{Kind: ActAccept, Try: info.Tries})
		return
	}
	q.tryFailed(now, j, why, false)
}

// tryFailed counts a failed try: retried while max_retries allows, else
// failed or held.
func (q *Queue) tryFailed(now time.Time, j *job, why string, broken bool) {
	info := j.r.Info
	if broken && j.r.Attempt != nil && j.r.Attempt.Try > info.Tries {
		info.Tries = j.r.Attempt.Try // a try that could not even start counts
	}
	spec := j.r.Spec
	if info.Tries <= spec.MaxRetries {
		q.endPlacement(now, j)
		q.setState(now, j, wire.JobState_JOB_STATE_IDLE)
		info.Reason = ""
		q.log(now, j, "retried", fmt.Sprintf("try %d failed (%s); %d of %d retries left", info.Tries, why, spec.MaxRetries-info.Tries+1, spec.MaxRetries))
		return
	}
	reason := fmt.Sprintf("try %d failed (%s)", info.Tries, why)
	switch spec.MaxRetries {
	case 0:
	case 1:
		reason += "; its one retry is spent"
	default:
		reason += fmt.Sprintf("; its %d retries are spent", spec.MaxRetries)
	}
	if spec.HoldOnFailure {
		q.endPlacement(now, j)
		q.setState(now, j, wire.JobState_JOB_STATE_HELD)
		info.Reason = reason + " (on_failure = \"hold\": unhold to run it again)"
		q.log(now, j, "held", info.Reason)
		if !broken {
			q.act(j, Act{Kind: ActAccept, Try: info.Tries}) // its last try's output, to see why
		}
		return
	}
	q.endPlacement(now, j)
	q.setState(now, j, wire.JobState_JOB_STATE_FAILED)
	info.Reason = reason
	q.log(now, j, "failed", reason)
	if !broken {
		q.act(j, Act{Kind: ActAccept, Try: info.Tries})
	}
}

func successCodes(s *wire.JobSpec) []int32 {
	if len(s.SuccessExitCodes) == 0 {
		return []int32{0}
	}
	return s.SuccessExitCodes
}

// endPlacement ends j's placement after a try: the instance is removed
// and the reservation kept as a claim for the same user's next job.
func (q *Queue) endPlacement(now time.Time, j *job) {
	a := j.r.Attempt
	if a == nil {
		return
	}
	j.epoch++
	j.r.Attempt = nil
	a.Released = true // handed to the claim, which releases it
	c := &claim{user: j.r.Info.User, key: j.claimKey(), a: proto.Clone(a).(*wire.JobAttempt), since: now}
	q.claims = append(q.claims, c)
	q.claimAct(c, Act{Kind: ActClean, Job: j.r.Info.Id})
	q.save(j)
}

func (q *Queue) claimDone(now time.Time, c *claim, act Act, res Result) {
	c.busy = 0
	if res.Err != nil {
		if res.Err.Kind == Unreachable && now.Before(time.UnixMilli(c.a.LeaseEndUnixMs)) {
			c.since = now // try again after ClaimIdle
			return
		}
		c.gone = true // gone, or its lease ends by itself
		return
	}
	if act.Release {
		c.gone = true
		q.wake(now)
		return
	}
	c.ready = true
	c.since = now
	q.wake(now) // a claim is ready: the same user's idle jobs may take it
}

func (q *Queue) orphanCleaned(now time.Time, j *job, act Act, res Result) {
	i := slices.IndexFunc(j.r.Orphans, func(o *wire.JobAttempt) bool {
		return o.Reservation == act.Attempt.Reservation && o.Try == act.Attempt.Try
	})
	if i < 0 {
		return
	}
	o := j.r.Orphans[i]
	if res.Err != nil && res.Err.Kind == Unreachable && now.Before(time.UnixMilli(o.LeaseEndUnixMs)) {
		j.notBefore = now.Add(q.cfg.PollEvery * 5)
		return
	}
	detail := fmt.Sprintf("try %d at %s: its copy stopped and removed, %s released; its results were not taken", o.Try, o.Name, o.Reservation)
	if res.Err != nil {
		detail = fmt.Sprintf("try %d at %s: left to end with its lease (%s)", o.Try, o.Name, res.Err.Msg)
	}
	j.r.Orphans = slices.Delete(j.r.Orphans, i, i+1)
	q.wake(now)
	if o.Instance != "" || res.Err != nil {
		q.log(now, j, "discarded", detail)
	} else {
		q.save(j)
	}
}
