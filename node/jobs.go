package node

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/internal/keys"
	"github.com/gridmgr/gridmgr/jobs"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// The requests of a CallJob (Call.Req) and what each reports
// (CallDone.Result). A runtime that keeps no job queue leaves CallJob
// unserved: the module then answers every job request with why.
type (
	// JobLoad, once at the Core's start: read the queue from disk.
	// Result: JobLoaded.
	JobLoad struct{}
	// JobLoaded is the queue as the runtime read it.
	JobLoaded struct {
		Next    uint64
		Records []*wire.JobRecord
	}
	// JobSave: write Saves, the cluster counter Next (when not 0) and
	// forget the jobs Forget, durably, before the acts that follow it in
	// Ready.Calls start. Result: nil.
	JobSave struct {
		Saves  []*wire.JobRecord
		Next   uint64
		Forget []string
	}
	// JobHas: which of the files Shas the runtime does not hold whole.
	// Result: []string (the missing ones, maybe none).
	JobHas struct{ Shas []string }
	// JobBlob: store a piece of a file (OP_BLOB). Result: int64, the
	// bytes of it stored.
	JobBlob struct{ Req *wire.JobRequest }
	// JobGet: read a piece of a job's result file. Result: *wire.JobReply
	// (data, offset = the file's size).
	JobGet struct {
		Job    string
		Path   string
		Offset int64
		Limit  int
	}
	// JobWhy: ask the grid Spec's query with explain, as User. Result:
	// *wire.QueryReply.
	JobWhy struct {
		Spec *wire.JobSpec
		User string
	}
)

// An Act of the queue travels as the Req of a CallJob of its own (its
// ID the Act's, which the module keeps apart from its own call ids);
// its Result is a jobs.Result.

// jobCallBase is where the module's own call ids start: below it are the
// queue's act ids.
const jobCallBase = 1 << 62

// jobsEnv is what the job module sees of the Core besides env.
type jobsEnv interface {
	env
	isAdmin(peer string) bool
	userOf(client, declared string) string
	// wake says the queue has something due at t, sooner than the
	// runtime may look (Core.WakeAt).
	wake(t time.Time)
}

// jobsMod is the module of the job queue: it takes clients' job requests,
// keeps the queue (package jobs, which decides everything) and hands the
// queue's work and its writes to the runtime (CallJob), answering a
// request that changed the queue only once the runtime wrote the change.
type jobsMod struct {
	e     jobsEnv
	state int    // jobsLoading, jobsReady, jobsOff
	off   string // why jobsOff
	next  uint64
	calls map[uint64]jobCall
	// the rest is made once the runtime has loaded the queue: a manager
	// that keeps none (every one of a simulation) pays for none of it
	*jobsLive
}

// jobsLive is the job module's state once its queue is loaded.
type jobsLive struct {
	q       *jobs.Queue
	waiting []func() // answers waiting for the next save to be written
	saving  map[uint64][]func()
	// unsaved clusters, by the save call writing them: a retried submit
	// of one is answered when it is written
	clusterSave map[string]uint64
	// held are the files the runtime said it holds whole, and when: a
	// submit naming only those is not checked again for a while
	held map[string]time.Time
	// glideins are the glide-ins of this queue joined under this manager:
	// their peer → their job
	glideins map[string]string
	// job events: the token bucket, and what it held back by type
	tokens      float64
	tokensAt    time.Time
	unpublished map[string]int
	summaryAt   time.Time
}

// heldFor is how long a file the runtime holds is taken as held without
// asking (the spool keeps every file far longer than this).
const heldFor = time.Minute

const (
	jobsLoading = iota
	jobsReady
	jobsOff
)

type jobCall struct {
	o    origin
	kind string // load, save, has, blob, get, why
	// has: the submit waiting for the check, and the files asked about
	sub  *jobs.Submission
	dag  *jobs.DagSubmission
	shas []string
	spec *wire.JobSpec
	job  string
}

func newJobs(e jobsEnv) *jobsMod {
	// The queue and its tables are made when the runtime has loaded it:
	// a manager that keeps no queue (every one of a simulation) pays for
	// none of it.
	return &jobsMod{e: e, next: jobCallBase}
}

func jobsConfig(e env) jobs.Config {
	c := e.conf()
	return jobs.Config{
		Self: e.name(), MaxQueued: c.JobsMaxQueued, MaxQueuedPerUser: c.JobsMaxQueuedPerUser,
		MaxRunning: c.JobsMaxRunning, MaxRunningPerUser: c.JobsMaxRunningPerUser, LostAfter: c.JobsLostAfter,
		KeepEnded: c.JobsKeepEnded,
	}
}

func (m *jobsMod) newCall(c jobCall) uint64 {
	if m.calls == nil {
		m.calls = map[uint64]jobCall{}
	}
	m.next++
	m.calls[m.next] = c
	return m.next
}

// start asks the runtime for the queue on disk.
func (m *jobsMod) start() {
	if !m.e.conf().JobsEnabled {
		m.state, m.off = jobsOff, "this manager takes no jobs (its properties file says jobs.enabled = false)"
		return
	}
	m.e.call(CallJob, m.newCall(jobCall{kind: "load"}), JobLoad{})
}

func (m *jobsMod) handle(now time.Time, o origin, env *wire.Envelope) (bool, error) {
	req := env.GetJobRequest()
	if req == nil || o.peer != "" {
		return false, nil
	}
	m.onRequest(now, o, req)
	return true, nil
}

func (m *jobsMod) tick(now time.Time) {
	if m.state != jobsReady {
		return
	}
	m.q.Tick(now)
	m.flush(now)
	m.summarize(now)
}

func (m *jobsMod) deadline(now time.Time) time.Time {
	if m.state != jobsReady {
		return time.Time{}
	}
	t := m.q.NextDeadline(now)
	if len(m.unpublished) > 0 && (t.IsZero() || m.summaryAt.Before(t)) {
		t = m.summaryAt
		if t.Before(now) {
			t = now
		}
	}
	return t
}

// relationEnded: a glide-in of this queue that leaves (goodbye, down,
// removed) is a glidein-left event.
func (m *jobsMod) relationEnded(now time.Time, r *relations.Relation, why string) {
	if m.state != jobsReady || m.glideins[r.Peer] == "" {
		return
	}
	id := m.glideins[r.Peer]
	delete(m.glideins, r.Peer)
	in, _ := m.q.Info(id, false)
	m.glideinEvent(now, "glidein-left", "glide-in "+r.DisplayName()+" left ("+why+")", in)
}

// GlideinAttr is the attribute a glide-in carries, and its launch job's
// spec carries in attrs: its group's name (client.GlideinAttr).
const GlideinAttr = "glidein"

// inferiorChanged publishes glidein-joined when an inferior named
// NAME-INDEX comes up while this queue has the job of glide-in INDEX of
// group NAME placed (relationEnded says when it leaves).
func (m *jobsMod) inferiorChanged(now time.Time, ch relations.Change) {
	if m.state != jobsReady || ch.To != relations.Up || ch.From != relations.Connecting {
		return
	}
	i := strings.LastIndexByte(ch.Name, '-')
	if i <= 0 {
		return
	}
	idx, err := strconv.ParseUint(ch.Name[i+1:], 10, 32)
	if err != nil {
		return
	}
	in, ok := m.q.Placed(GlideinAttr, ch.Name[:i], uint32(idx))
	if !ok {
		return
	}
	m.glideins[ch.Peer] = in.Id
	m.glideinEvent(now, "glidein-joined", fmt.Sprintf("glide-in %s joined under this manager, on %s", ch.Name, in.Manager), in)
}

func (m *jobsMod) glideinEvent(now time.Time, typ, detail string, info *wire.JobInfo) {
	m.e.meter().Glideins(len(m.glideins))
	m.e.publish(now, wire.EventKind_EVENT_KIND_JOB, typ, "", func(ev *wire.Event) {
		c := &wire.JobChange{Detail: detail}
		if info != nil {
			c.Id, c.User, c.State, c.Manager, c.Try = info.Id, info.User, info.State, info.Manager, info.Tries
		}
		ev.Body = &wire.Event_Job{Job: c}
	})
}

// flush hands the queue's Ready to the runtime: one save call for its
// writes (the answers waiting on them go when it is done), then a call
// per act, then its events. It returns the save call's id (0: nothing
// to write).
func (m *jobsMod) flush(now time.Time) (saveID uint64) {
	rd := m.q.Ready()
	var forget []string
	acts := rd.Acts[:0:0]
	for _, a := range rd.Acts {
		if a.Kind == jobs.ActForget {
			forget = append(forget, a.Job)
		} else {
			acts = append(acts, a)
		}
	}
	if len(rd.Saves) > 0 || rd.Next != 0 || len(forget) > 0 {
		saveID = m.newCall(jobCall{kind: "save"})
		m.saving[saveID] = m.waiting
		m.waiting = nil
		m.e.call(CallJob, saveID, JobSave{Saves: rd.Saves, Next: rd.Next, Forget: forget})
	} else {
		for _, f := range m.waiting {
			f()
		}
		m.waiting = nil
	}
	for _, a := range acts {
		m.e.call(CallJob, a.ID, a)
	}
	for _, c := range rd.Changes {
		m.publish(now, c)
	}
	if len(rd.Changes) > 0 {
		m.e.meter().JobStates(m.q.Counts())
		m.e.meter().DagStates(m.q.DagCounts())
	}
	if t := m.q.NextDeadline(now); !t.IsZero() {
		m.e.wake(t)
	}
	return saveID
}

func (m *jobsMod) publish(now time.Time, c jobs.Change) {
	m.e.meter().Job(c.Entry.Type, c.Latency)
	if !strings.HasPrefix(c.Entry.Type, "dag-") && !m.takeToken(now) {
		// a workflow's own changes are few and always published
		m.unpublished[c.Entry.Type]++
		return
	}
	m.e.publish(now, wire.EventKind_EVENT_KIND_JOB, c.Entry.Type, "", func(ev *wire.Event) {
		ev.Body = &wire.Event_Job{Job: &wire.JobChange{Id: c.Job, User: c.User, State: c.State, Manager: c.Entry.Manager,
			Try: c.Entry.Try, Detail: c.Entry.Detail, Dag: c.Dag, Node: c.Node}}
	})
}

// Job events are published one by one up to jobEventRate a second (with
// bursts of as many); past it the changes are counted and published as
// one "summary" event a second, so a burst of thousands of jobs does not
// flood the grid's bus. Every change stays in its job's log.
const jobEventRate = 200

// takeToken says whether one more job event may go out at now.
func (m *jobsMod) takeToken(now time.Time) bool {
	if m.tokensAt.IsZero() {
		m.tokens, m.tokensAt = jobEventRate, now
	}
	m.tokens = min(jobEventRate, m.tokens+now.Sub(m.tokensAt).Seconds()*jobEventRate)
	m.tokensAt = now
	if m.tokens >= 1 {
		m.tokens--
		return true
	}
	return false
}

// summarize publishes the changes not published one by one, once a
// second.
func (m *jobsMod) summarize(now time.Time) {
	if len(m.unpublished) == 0 || now.Before(m.summaryAt) {
		return
	}
	var parts []string
	for _, typ := range keys.Sorted(m.unpublished) {
		parts = append(parts, fmt.Sprintf("%d %s", m.unpublished[typ], typ))
	}
	clear(m.unpublished)
	m.summaryAt = now.Add(time.Second)
	m.e.publish(now, wire.EventKind_EVENT_KIND_JOB, "summary", "", func(ev *wire.Event) {
		ev.Body = &wire.Event_Job{Job: &wire.JobChange{Detail: strings.Join(parts, ", ") +
			fmt.Sprintf(" (more than %d job changes a second: counted, not published one by one; each job's log has them)", jobEventRate)}}
	})
}

// afterSave answers once what the queue just did is written.
func (m *jobsMod) afterSave(f func()) { m.waiting = append(m.waiting, f) }

func (m *jobsMod) callDone(now time.Time, d CallDone) {
	if d.ID < jobCallBase {
		if m.state != jobsReady {
			return
		}
		res, _ := d.Result.(jobs.Result)
		res.ID = d.ID
		if d.Err != nil && res.Err == nil {
			res.Err = jobs.Fail(jobs.Broken, "%v", d.Err)
		}
		m.q.Done(now, res)
		m.flush(now)
		return
	}
	c, ok := m.calls[d.ID]
	if !ok {
		return
	}
	delete(m.calls, d.ID)
	switch c.kind {
	case "load":
		if d.Err != nil {
			m.state, m.off = jobsOff, d.Err.Error()
			if !errors.Is(d.Err, errNoJobs) {
				m.e.logger().Error("job queue not loaded", "err", d.Err)
			}
			if len(m.calls) == 0 {
				m.calls = nil
			}
			return
		}
		l, _ := d.Result.(JobLoaded)
		m.jobsLive = &jobsLive{q: jobs.New(jobsConfig(m.e)), saving: map[uint64][]func(){}, clusterSave: map[string]uint64{},
			held: map[string]time.Time{}, unpublished: map[string]int{}, glideins: map[string]string{}}
		m.q.Load(now, l.Next, l.Records)
		m.state = jobsReady
		m.e.meter().JobStates(m.q.Counts())
		m.flush(now)
	case "save":
		ws := m.saving[d.ID]
		delete(m.saving, d.ID)
		for cl, id := range m.clusterSave {
			if id == d.ID {
				delete(m.clusterSave, cl)
			}
		}
		if d.Err != nil {
			// Not written: nothing that waited on it is answered as done
			// (the askers time out and, asking again, hear why), and the
			// queue takes nothing more: in memory it is ahead of the disk.
			m.e.logger().Error("job queue write failed; no more jobs are taken", "err", d.Err)
			m.state, m.off = jobsOff, "its job queue could not be written ("+d.Err.Error()+"); an operator must look"
			return
		}
		for _, f := range ws {
			f()
		}
	case "has":
		if d.Err != nil {
			answerRuntimeErr(m.e, c.o, d.Err)
			return
		}
		missing, _ := d.Result.([]string)
		for _, sha := range c.shas {
			if !slices.Contains(missing, sha) {
				m.held[sha] = now
			}
		}
		if len(missing) > 0 {
			m.e.replyErr(c.o, wire.ErrorReply_CODE_BAD_REQUEST, fmt.Sprintf("%s: the job names a file this manager was not sent (sha256 %s…): send it with OP_BLOB first; %d file(s) missing",
				m.e.name(), missing[0][:min(12, len(missing[0]))], len(missing)))
			return
		}
		if c.dag != nil {
			m.submitDag(now, c.o, *c.dag)
			return
		}
		m.submit(now, c.o, *c.sub)
	case "blob":
		if d.Err != nil {
			answerRuntimeErr(m.e, c.o, d.Err)
			return
		}
		n, _ := d.Result.(int64)
		m.answer(c.o, &wire.JobReply{Offset: n})
	case "get":
		if d.Err != nil {
			answerRuntimeErr(m.e, c.o, d.Err)
			return
		}
		rep, _ := d.Result.(*wire.JobReply)
		m.answer(c.o, rep)
	case "why":
		if d.Err != nil {
			answerRuntimeErr(m.e, c.o, d.Err)
			return
		}
		qr, _ := d.Result.(*wire.QueryReply)
		rep := &wire.JobReply{Why: qr}
		if in, ok := m.q.Info(c.job, false); ok {
			rep.Jobs = []*wire.JobInfo{in}
		}
		m.answer(c.o, rep)
	}
}

var errNoJobs = errors.New("this manager keeps no job queue")

func (m *jobsMod) answer(o origin, rep *wire.JobReply) {
	m.e.reply(o, &wire.Envelope{Body: &wire.Envelope_JobReply{JobReply: rep}})
}

func (m *jobsMod) onRequest(now time.Time, o origin, req *wire.JobRequest) {
	e, name := m.e, m.e.name()
	bad := func(format string, args ...any) {
		e.replyErr(o, wire.ErrorReply_CODE_BAD_REQUEST, name+": "+fmt.Sprintf(format, args...))
	}
	switch m.state {
	case jobsLoading:
		e.replyErr(o, wire.ErrorReply_CODE_UNAVAILABLE, name+": still reading its job queue; ask again in a moment")
		return
	case jobsOff:
		e.replyErr(o, wire.ErrorReply_CODE_UNSUPPORTED, name+": "+m.off)
		return
	}
	admin := e.isAdmin(o.client)
	switch req.Op {
	case wire.JobRequest_OP_BLOB:
		if !validSHA256(req.Sha256) {
			bad("sha256 %q is not a sha256 (64 hex digits)", req.Sha256)
			return
		}
		if req.Size < 0 || req.Offset < 0 || req.Offset+int64(len(req.Data)) > req.Size || len(req.Data) > maxJobPiece {
			bad("piece at offset %d of %d bytes does not fit a file of %d bytes (pieces of at most %d bytes)", req.Offset, len(req.Data), req.Size, maxJobPiece)
			return
		}
		e.call(CallJob, m.newCall(jobCall{o: o, kind: "blob"}), JobBlob{Req: req})
	case wire.JobRequest_OP_SUBMIT:
		if len(req.Jobs) == 0 {
			bad("the submit names no job")
			return
		}
		if len(req.Jobs) > jobs.MaxCount {
			bad("%d jobs in one submit; at most %d", len(req.Jobs), jobs.MaxCount)
			return
		}
		if len(req.RequestId) > 128 {
			bad("request_id is %d bytes; at most 128", len(req.RequestId))
			return
		}
		sub := &jobs.Submission{RequestID: req.RequestId, User: e.userOf(o.client, req.User), Owner: o.client, Jobs: req.Jobs}
		if sub.User == "" {
			sub.User = "peer:" + o.client
		}
		if req.RequestId != "" {
			if cl, dup, err := m.q.Submit(now, jobs.Submission{RequestID: req.RequestId, User: sub.User, Owner: o.client}); dup && err == nil {
				m.answerSubmit(o, cl, true)
				return
			}
		}
		for _, s := range req.Jobs {
			if s == nil {
				bad("a job of the submit is empty")
				return
			}
		}
		list, err := m.unheld(now, req.Jobs)
		if err != nil {
			bad("%v", err)
			return
		}
		if len(list) == 0 {
			m.submit(now, o, *sub)
			return
		}
		e.call(CallJob, m.newCall(jobCall{o: o, kind: "has", sub: sub, shas: list}), JobHas{Shas: list})
	case wire.JobRequest_OP_SUBMIT_DAG:
		if len(req.RequestId) > 128 {
			bad("request_id is %d bytes; at most 128", len(req.RequestId))
			return
		}
		user := e.userOf(o.client, req.User)
		if user == "" {
			user = "peer:" + o.client
		}
		if req.RequestId != "" {
			if id, dup, err := m.q.SubmitDag(now, jobs.DagSubmission{RequestID: req.RequestId, User: user, Owner: o.client}); dup && err == nil {
				m.answerDag(o, id, true)
				return
			}
		}
		order, err := jobs.CheckDag(req.Dag)
		if err != nil {
			bad("%v", err)
			return
		}
		var specs []*wire.JobSpec
		for _, n := range order {
			specs = append(specs, n.Jobs...)
			for _, x := range []*wire.JobSpec{n.Pre, n.Post} {
				if x != nil {
					specs = append(specs, x)
				}
			}
		}
		sub := &jobs.DagSubmission{RequestID: req.RequestId, User: user, Owner: o.client, Dag: req.Dag}
		list, err := m.unheld(now, specs)
		if err != nil {
			bad("%v", err)
			return
		}
		if len(list) == 0 {
			m.submitDag(now, o, *sub)
			return
		}
		e.call(CallJob, m.newCall(jobCall{o: o, kind: "has", dag: sub, shas: list}), JobHas{Shas: list})
	case wire.JobRequest_OP_DAG_STATUS:
		f := jobs.Filter{Ended: req.Ended, User: req.ForUser}
		if !req.All && req.ForUser == "" && len(req.Ids) == 0 {
			f.Owner = o.client
		}
		ds, err := m.q.Dags(req.Ids, f)
		if err != nil {
			m.queueErr(o, err)
			return
		}
		rep := &wire.JobReply{Dags: ds}
		if len(ds) > maxDagList {
			rep.More, rep.Dags = uint32(len(ds)-maxDagList), ds[:maxDagList]
		}
		m.answer(o, rep)
	case wire.JobRequest_OP_DAG_RERUN:
		if len(req.Ids) != 1 {
			bad("name one workflow to rerun")
			return
		}
		d, err := m.q.Rerun(now, req.Ids[0], o.client, admin)
		if err != nil {
			m.queueErr(o, err)
			return
		}
		m.afterSave(func() {
			m.answer(o, &wire.JobReply{Dags: []*wire.DagInfo{d}, Message: "workflow " + d.Id + " runs again: what did not complete"})
		})
		m.flush(now)
	case wire.JobRequest_OP_LIST:
		f := jobs.Filter{Ended: req.Ended, User: req.ForUser}
		if !req.All && req.ForUser == "" && len(req.Ids) == 0 {
			f.Owner = o.client
		}
		var list []*wire.JobInfo
		if len(req.Ids) > 0 {
			ids, err := m.q.Resolve(req.Ids)
			if err != nil {
				e.replyErr(o, wire.ErrorReply_CODE_NOT_FOUND, name+": "+strings.TrimPrefix(err.Error(), "jobs: no such job: "))
				return
			}
			for _, id := range ids {
				in, _ := m.q.Info(id, false)
				list = append(list, in)
			}
		} else {
			list = m.q.List(f)
		}
		limit := int(req.Limit)
		if limit <= 0 || limit > maxJobList {
			limit = maxJobList
		}
		rep := &wire.JobReply{}
		if len(list) > limit {
			rep.More = uint32(len(list) - limit)
			list = list[:limit]
		}
		rep.Jobs = list
		m.answer(o, rep)
	case wire.JobRequest_OP_LOG:
		ids, err := m.q.Resolve(req.Ids)
		if err != nil || len(ids) == 0 {
			m.notFound(o, err)
			return
		}
		rep := &wire.JobReply{}
		if len(ids) > maxJobLogs {
			rep.More = uint32(len(ids) - maxJobLogs)
			ids = ids[:maxJobLogs]
		}
		for _, id := range ids {
			in, _ := m.q.Info(id, true)
			rep.Jobs = append(rep.Jobs, in)
		}
		m.answer(o, rep)
	case wire.JobRequest_OP_HOLD, wire.JobRequest_OP_UNHOLD, wire.JobRequest_OP_REMOVE:
		if len(req.Ids) == 0 {
			bad("name the jobs (CLUSTER or CLUSTER[INDEX])")
			return
		}
		if len(req.Reason) > 1024 {
			bad("reason is %d bytes; at most 1024", len(req.Reason))
			return
		}
		var err error
		switch req.Op {
		case wire.JobRequest_OP_HOLD:
			err = m.q.Hold(now, req.Ids, o.client, admin, req.Reason)
		case wire.JobRequest_OP_UNHOLD:
			err = m.q.Unhold(now, req.Ids, o.client, admin)
		default:
			err = m.q.Remove(now, req.Ids, o.client, admin)
		}
		if err != nil {
			m.queueErr(o, err)
			return
		}
		ids, _ := m.q.Resolve(req.Ids)
		m.afterSave(func() {
			rep := &wire.JobReply{}
			for _, id := range ids {
				if in, ok := m.q.Info(id, false); ok {
					rep.Jobs = append(rep.Jobs, in)
				}
			}
			m.answer(o, rep)
		})
		m.flush(now)
	case wire.JobRequest_OP_WHY:
		ids, err := m.q.Resolve(req.Ids)
		if err != nil || len(ids) == 0 {
			m.notFound(o, err)
			return
		}
		spec, _ := m.q.Spec(ids[0])
		in, _ := m.q.Info(ids[0], false)
		e.call(CallJob, m.newCall(jobCall{o: o, kind: "why", job: ids[0]}), JobWhy{Spec: spec, User: in.User})
	case wire.JobRequest_OP_GET:
		ids, err := m.q.Resolve(req.Ids)
		if err != nil || len(ids) != 1 {
			if err == nil {
				err = fmt.Errorf("name one job to read a result of")
			}
			m.notFound(o, err)
			return
		}
		in, _ := m.q.Info(ids[0], false)
		if in.OwnerPeer != o.client && !admin {
			e.replyErr(o, wire.ErrorReply_CODE_FORBIDDEN, fmt.Sprintf("%s: job %s was submitted by another client; only its submitter or an admin may read its results", name, ids[0]))
			return
		}
		if req.Path != "stdout" && req.Path != "stderr" {
			if err := jobs.CheckPath(req.Path); err != nil {
				bad("path: %v", err)
				return
			}
		}
		limit := int(req.Limit)
		if limit <= 0 || limit > maxJobPiece {
			limit = maxJobPiece
		}
		e.call(CallJob, m.newCall(jobCall{o: o, kind: "get"}), JobGet{Job: ids[0], Path: req.Path, Offset: req.Offset, Limit: limit})
	case wire.JobRequest_OP_UNSPECIFIED:
		bad("the job request names no operation")
	default:
		e.replyErr(o, wire.ErrorReply_CODE_UNSUPPORTED, fmt.Sprintf("%s (gridmgr %s) does not know job operation %d", name, e.conf().Version, req.Op))
	}
}

// maxJobPiece bounds a piece of a file sent or read in one message.
const maxJobPiece = 1 << 20

// maxJobLogs bounds the jobs whose logs one reply carries (the rest are
// counted in JobReply.more).
const maxJobLogs = 100

// maxJobList bounds the jobs listed in one reply.
const maxJobList = 5000

func (m *jobsMod) notFound(o origin, err error) {
	msg := "name a job (CLUSTER or CLUSTER[INDEX])"
	if err != nil {
		msg = strings.TrimPrefix(err.Error(), jobs.ErrNoJob.Error()+": ")
	}
	m.e.replyErr(o, wire.ErrorReply_CODE_NOT_FOUND, m.e.name()+": "+msg)
}

func (m *jobsMod) queueErr(o origin, err error) {
	code := wire.ErrorReply_CODE_BAD_REQUEST
	switch {
	case errors.Is(err, jobs.ErrNoJob):
		code = wire.ErrorReply_CODE_NOT_FOUND
	case errors.Is(err, jobs.ErrForbidden):
		code = wire.ErrorReply_CODE_FORBIDDEN
	case errors.Is(err, jobs.ErrLimit):
		code = wire.ErrorReply_CODE_REFUSED
	}
	msg := err.Error()
	for _, s := range []error{jobs.ErrNoJob, jobs.ErrForbidden, jobs.ErrLimit, jobs.ErrBadSpec, jobs.ErrState} {
		msg = strings.TrimPrefix(msg, s.Error()+": ")
	}
	m.e.replyErr(o, code, m.e.name()+": "+msg)
}

// maxDagList bounds the workflows listed in one reply.
const maxDagList = 500

// unheld are the files specs name that this manager has not confirmed
// holding lately (to ask the runtime about), or what is wrong with one.
func (m *jobsMod) unheld(now time.Time, specs []*wire.JobSpec) ([]string, error) {
	shas := map[string]bool{}
	for _, s := range specs {
		shas[s.BundleSha256] = true
		for _, f := range s.Inputs {
			shas[f.Sha256] = true
		}
	}
	list := make([]string, 0, len(shas))
	for s := range shas {
		if !validSHA256(s) {
			return nil, fmt.Errorf("%q is not a sha256 (64 hex digits)", s)
		}
		if at, ok := m.held[s]; !ok || now.Sub(at) > heldFor {
			list = append(list, s)
		}
	}
	if len(m.held) > 10000 {
		clear(m.held)
	}
	slices.Sort(list)
	return list, nil
}

func (m *jobsMod) submitDag(now time.Time, o origin, s jobs.DagSubmission) {
	id, dup, err := m.q.SubmitDag(now, s)
	if err != nil {
		m.queueErr(o, err)
		return
	}
	if dup {
		m.answerDag(o, id, true)
		return
	}
	m.afterSave(func() { m.answerDag(o, id, false) })
	if sid := m.flush(now); sid != 0 {
		m.clusterSave[id] = sid
	}
}

// answerDag answers a workflow submit, once it is written.
func (m *jobsMod) answerDag(o origin, id string, dup bool) {
	send := func() {
		rep := &wire.JobReply{Cluster: id, Duplicate: dup, Message: "submitted as workflow " + id}
		if ds, err := m.q.Dags([]string{id}, jobs.Filter{}); err == nil {
			rep.Dags = ds
		}
		if dup {
			rep.Message += " (a retry of a submit already taken: nothing new queued)"
		}
		m.answer(o, rep)
	}
	if sid, unsaved := m.clusterSave[id]; unsaved && dup {
		m.saving[sid] = append(m.saving[sid], send)
		return
	}
	send()
}

func (m *jobsMod) submit(now time.Time, o origin, s jobs.Submission) {
	cl, dup, err := m.q.Submit(now, s)
	if err != nil {
		m.queueErr(o, err)
		return
	}
	if dup {
		m.answerSubmit(o, cl, true)
		return
	}
	m.afterSave(func() { m.answerSubmit(o, cl, false) })
	if id := m.flush(now); id != 0 {
		m.clusterSave[cl] = id
	}
}

// answerSubmit answers a submit of cluster, once it is written.
func (m *jobsMod) answerSubmit(o origin, cluster string, dup bool) {
	send := func() {
		rep := &wire.JobReply{Cluster: cluster, Duplicate: dup}
		rep.Message = fmt.Sprintf("submitted as %s", cluster)
		if in, ok := m.q.Info(cluster, false); ok {
			rep.Jobs = []*wire.JobInfo{in}
		} else if ids, err := m.q.Resolve([]string{cluster}); err == nil && len(ids) > 0 {
			rep.Message = fmt.Sprintf("submitted as %s[0..%d]", cluster, len(ids)-1)
		}
		if dup {
			rep.Message += " (a retry of a submit already taken: nothing new queued)"
		}
		m.answer(o, rep)
	}
	if id, unsaved := m.clusterSave[cluster]; unsaved && dup {
		m.saving[id] = append(m.saving[id], send)
		return
	}
	send()
}
