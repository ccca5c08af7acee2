package jobs

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/wire"
)

// A workflow (DAG) is held by the queue as the jobs of its nodes: each
// node is a cluster of jobs, with at most one pre and one post job (each
// a cluster of its own) run at the submit manager. Every job record
// carries its workflow's id, its node's name, the nodes it comes after
// and its role, so the workflow is rebuilt from the records at Load and
// needs no record of its own. A node's jobs wait (JOB_STATE_WAITING) until
// every node they come after has completed; its pre job runs first, its
// post job last, whatever the node's jobs did, and decides the node.

// Roles of a node's jobs (JobInfo.role).
const (
	RolePre  = "pre"
	RolePost = "post"
)

// EnvNodeResult is set in a post job's environment: "completed" when
// every job of its node completed, else "failed".
const EnvNodeResult = "DAG_NODE_RESULT"

// States of a workflow (DagInfo.state) and of its nodes (DagNodeInfo).
const (
	DagRunning   = "running"
	DagHeld      = "held"
	DagCompleted = "completed"
	DagFailed    = "failed"
	DagRemoved   = "removed"
	NodeWaiting  = "waiting"
	NodePre      = "pre"
	NodePost     = "post"
)

type dag struct {
	id, name    string
	user, owner string
	reqID       string
	submitted   int64
	nodes       []*dnode // parents before children
	byName      map[string]*dnode
	state       string // as the last evaluation found it
	loaded      bool   // rebuilt at Load: its first evaluation is not news
	// keepUntil: ended, it may be forgotten from then (KeepEnded after
	// its last job ended), as its last evaluation found; zero while it
	// runs. Tick looks at its jobs only once that is past.
	keepUntil time.Time
}

type dnode struct {
	name      string
	after     []string
	parents   []*dnode
	pre, post *job
	jobs      []*job
	// as the last evaluation found it
	state   string
	ok, bad bool // completed; failed or removed (ended, not completed)
	blocked bool // a node it comes after (or its pre) failed: it cannot run
	why     string
}

// all is every job of n: pre, jobs, post.
func (n *dnode) all() []*job {
	out := make([]*job, 0, len(n.jobs)+2)
	if n.pre != nil {
		out = append(out, n.pre)
	}
	out = append(out, n.jobs...)
	if n.post != nil {
		out = append(out, n.post)
	}
	return out
}

// DagSubmission is a workflow submit request as the queue sees it.
type DagSubmission struct {
	RequestID string
	User      string
	Owner     string
	Dag       *wire.DagSpec
}

// CheckDag checks a workflow as a manager receives it: node names, the
// nodes each comes after (known, no cycle), each job (CheckSpec) and
// the index and count of each node's jobs.
func CheckDag(d *wire.DagSpec) ([]*wire.DagNode, error) {
	if d == nil || len(d.Nodes) == 0 {
		return nil, fmt.Errorf("a workflow names no node")
	}
	if !nameRE.MatchString(d.Name) {
		return nil, fmt.Errorf("workflow name %q: lower-case letters, digits and '-', starting with a letter, at most 63", d.Name)
	}
	if len(d.Nodes) > MaxFlowNodes {
		return nil, fmt.Errorf("%d nodes; the limit is %d", len(d.Nodes), MaxFlowNodes)
	}
	fn := map[string]*FlowNode{}
	spec := map[string]*wire.DagNode{}
	for i, n := range d.Nodes {
		if !nameRE.MatchString(n.Name) {
			return nil, fmt.Errorf("node %d: name %q: lower-case letters, digits and '-', starting with a letter, at most 63", i, n.Name)
		}
		if spec[n.Name] != nil {
			return nil, fmt.Errorf("node %q is named twice", n.Name)
		}
		if len(n.After) > MaxAfter {
			return nil, fmt.Errorf("node %q comes after %d nodes; the limit is %d", n.Name, len(n.After), MaxAfter)
		}
		spec[n.Name] = n
		fn[n.Name] = &FlowNode{Name: n.Name, After: slices.Compact(slices.Sorted(slices.Values(n.After)))}
		if len(fn[n.Name].After) != len(n.After) {
			return nil, fmt.Errorf("node %q names a node in after twice", n.Name)
		}
		if len(n.Jobs) == 0 {
			return nil, fmt.Errorf("node %q has no job", n.Name)
		}
		for k, sp := range n.Jobs {
			if err := CheckSpec(sp); err != nil {
				return nil, fmt.Errorf("node %q, job %d: %v", n.Name, k, err)
			}
			if sp.Index != uint32(k) || sp.Count != uint32(len(n.Jobs)) {
				return nil, fmt.Errorf("node %q: job %d of %d says it is index %d of %d", n.Name, k, len(n.Jobs), sp.Index, sp.Count)
			}
		}
		for role, sp := range map[string]*wire.JobSpec{RolePre: n.Pre, RolePost: n.Post} {
			if sp == nil {
				continue
			}
			if err := CheckSpec(sp); err != nil {
				return nil, fmt.Errorf("node %q, %s: %v", n.Name, role, err)
			}
			if sp.Count != 1 {
				return nil, fmt.Errorf("node %q: its %s is one job, not an array of %d", n.Name, role, sp.Count)
			}
		}
	}
	for _, n := range d.Nodes {
		for _, a := range n.After {
			if a == n.Name {
				return nil, fmt.Errorf("node %q comes after itself", n.Name)
			}
			if spec[a] == nil {
				return nil, fmt.Errorf("node %q comes after %q, which is not a node of the workflow", n.Name, a)
			}
		}
	}
	order, cycle := topo(fn)
	if cycle != nil {
		return nil, fmt.Errorf("a cycle: %s", strings.Join(append(cycle, cycle[0]), " → "))
	}
	out := make([]*wire.DagNode, len(order))
	for i, n := range order {
		out[i] = spec[n.Name]
	}
	return out, nil
}

// SubmitDag queues a workflow: its id, and a cluster for each node's jobs
// (and its pre and post), or, for a request id seen before, answers the
// same workflow again (dup). As Submit, the jobs are in Ready.Saves.
func (q *Queue) SubmitDag(now time.Time, s DagSubmission) (id string, dup bool, err error) {
	if s.RequestID != "" {
		if c, ok := q.byReq[s.RequestID]; ok {
			if d := q.dags[c]; d == nil || d.user != s.User || d.owner != s.Owner {
				return "", false, fmt.Errorf("%w: request id %q was used by another submitter or for a job", ErrBadSpec, s.RequestID)
			}
			return c, true, nil
		}
	}
	order, err := CheckDag(s.Dag)
	if err != nil {
		return "", false, fmt.Errorf("%w: %v", ErrBadSpec, err)
	}
	n := 0
	for _, dn := range order {
		n += len(dn.Jobs)
		if dn.Pre != nil {
			n++
		}
		if dn.Post != nil {
			n++
		}
	}
	if err := q.roomFor(s.User, n); err != nil {
		return "", false, err
	}
	q.next++
	d := &dag{id: q.cfg.Self + "." + strconv.FormatUint(q.next, 10), name: s.Dag.Name, user: s.User, owner: s.Owner,
		reqID: s.RequestID, submitted: now.UnixMilli(), byName: map[string]*dnode{}}
	for _, sn := range order {
		nd := &dnode{name: sn.Name, after: slices.Sorted(slices.Values(sn.After))}
		for _, a := range nd.after {
			nd.parents = append(nd.parents, d.byName[a])
		}
		d.nodes = append(d.nodes, nd)
		d.byName[nd.name] = nd
		add := func(specs []*wire.JobSpec, role string) []*job {
			q.next++
			cluster := q.cfg.Self + "." + strconv.FormatUint(q.next, 10)
			js := make([]*job, 0, len(specs))
			for _, sp := range specs {
				r := &wire.JobRecord{
					Spec:      proto.Clone(sp).(*wire.JobSpec),
					RequestId: s.RequestID,
					Info: &wire.JobInfo{
						Id: JobID(cluster, sp.Index, sp.Count), Cluster: cluster, Index: sp.Index, Name: sp.Name, User: s.User, OwnerPeer: s.Owner,
						State: wire.JobState_JOB_STATE_WAITING, SinceUnixMs: now.UnixMilli(), SubmittedUnixMs: now.UnixMilli(),
						Priority: sp.Priority, OutputDir: sp.OutputDir,
						Dag: d.id, Node: nd.name, After: nd.after, DagName: d.name, Role: role,
					},
				}
				j := &job{r: r, d: d, n: nd}
				q.jobs[r.Info.Id] = j
				q.count(s.User, r.Info.State, 1)
				js = append(js, j)
				detail := fmt.Sprintf("by %s, node %s of workflow %s (%s)", s.User, nd.name, d.name, d.id)
				if role != "" {
					detail = fmt.Sprintf("by %s, the %s command of node %s of workflow %s (%s)", s.User, role, nd.name, d.name, d.id)
				}
				q.log(now, j, "submitted", detail)
			}
			q.clusters[cluster] = js
			q.order = append(q.order, cluster)
			return js
		}
		if sn.Pre != nil {
			nd.pre = add([]*wire.JobSpec{sn.Pre}, RolePre)[0]
		}
		nd.jobs = add(sn.Jobs, "")
		if sn.Post != nil {
			nd.post = add([]*wire.JobSpec{sn.Post}, RolePost)[0]
		}
	}
	q.rd.Next = q.next
	q.dags[d.id] = d
	if s.RequestID != "" {
		q.byReq[s.RequestID] = d.id
	}
	q.changed = true
	q.evaluate(now, d)
	return d.id, false, nil
}

// roomFor says whether user may queue n more jobs here.
func (q *Queue) roomFor(user string, n int) error {
	mine, total := q.liveBy[user], 0
	for st, k := range q.counts {
		if !ended(wire.JobState(st)) {
			total += k
		}
	}
	if mine+n > q.cfg.MaxQueuedPerUser {
		return fmt.Errorf("%w: user %s has %d jobs queued here; %d more would pass the limit of %d per user (jobs.max_queued_per_user): wait for some to end or remove some", ErrLimit, user, mine, n, q.cfg.MaxQueuedPerUser)
	} else if total+n > q.cfg.MaxQueued {
		return fmt.Errorf("%w: this manager has %d jobs queued; %d more would pass its limit of %d (jobs.max_queued): try later", ErrLimit, total, n, q.cfg.MaxQueued)
	}
	return nil
}

// loadDags rebuilds the workflows from the jobs Load restored, and works
// out where each stands.
func (q *Queue) loadDags(now time.Time) {
	byDag := map[string][]*job{}
	for _, j := range q.jobs {
		if j.r.Info.Dag != "" {
			byDag[j.r.Info.Dag] = append(byDag[j.r.Info.Dag], j)
		}
	}
	for id, js := range byDag {
		slices.SortFunc(js, func(a, b *job) int {
			return cmp.Or(cmp.Compare(clusterNumber(a.r.Info.Cluster), clusterNumber(b.r.Info.Cluster)), cmp.Compare(a.r.Info.Index, b.r.Info.Index))
		})
		in := js[0].r.Info
		d := &dag{id: id, name: in.DagName, user: in.User, owner: in.OwnerPeer, reqID: js[0].r.RequestId, submitted: in.SubmittedUnixMs,
			byName: map[string]*dnode{}, loaded: true}
		for _, j := range js {
			nd := d.byName[j.r.Info.Node]
			if nd == nil {
				nd = &dnode{name: j.r.Info.Node, after: j.r.Info.After}
				d.byName[nd.name] = nd
				d.nodes = append(d.nodes, nd)
			}
			j.d, j.n = d, nd
			switch j.r.Info.Role {
			case RolePre:
				nd.pre = j
			case RolePost:
				nd.post = j
			default:
				nd.jobs = append(nd.jobs, j)
			}
		}
		for _, nd := range d.nodes {
			for _, a := range nd.after {
				if p := d.byName[a]; p != nil {
					nd.parents = append(nd.parents, p)
				}
			}
		}
		q.dags[id] = d
		if d.reqID != "" {
			q.byReq[d.reqID] = id
		}
		if n := clusterNumber(id); n > q.next {
			q.next = n
		}
		q.evaluate(now, d)
	}
}

// release lets a waiting job of a workflow be matched.
func (q *Queue) release(now time.Time, j *job, detail string) {
	if j.r.Info.State != wire.JobState_JOB_STATE_WAITING {
		return
	}
	q.setState(now, j, wire.JobState_JOB_STATE_IDLE)
	j.r.Info.Reason, j.r.Info.Blocked = "", false
	j.wait, j.notBefore = 0, time.Time{}
	q.log(now, j, "released", detail)
	q.changed = true
}

// stuck says why the waiting jobs of js wait, and whether they will run
// at all (blocked: not until a rerun).
func (q *Queue) stuck(js []*job, why string, blocked bool) {
	for _, j := range js {
		if in := j.r.Info; in.State == wire.JobState_JOB_STATE_WAITING && (in.Reason != why || in.Blocked != blocked) {
			in.Reason, in.Blocked = why, blocked
			q.save(j)
		}
	}
}

// groupOf sums up jobs: all completed; none left to end (every one
// completed, failed or removed); any removed.
func groupOf(js []*job) (allOK, done, removed bool) {
	allOK, done = true, true
	for _, j := range js {
		s := j.r.Info.State
		if s != wire.JobState_JOB_STATE_COMPLETED {
			allOK = false
		}
		if !ended(s) {
			done = false
		}
		if s == wire.JobState_JOB_STATE_REMOVED {
			removed = true
		}
	}
	return allOK, done, removed
}

// evaluate moves workflow d on: releases the jobs whose nodes may run now,
// marks those that never will, and works out each node's state and the
// workflow's.
func (q *Queue) evaluate(now time.Time, d *dag) {
	delete(q.dagDirty, d)
	for _, n := range d.nodes {
		n.ok, n.bad, n.blocked, n.why = false, false, false, ""
		var waitFor []string
		for _, p := range n.parents {
			switch {
			case p.bad || p.blocked:
				n.blocked = true
				if n.why == "" {
					n.why = "will not run: node " + p.name + " " + p.state
					if p.blocked {
						n.why = "will not run: " + strings.TrimPrefix(p.why, "will not run: ")
					}
				}
			case !p.ok:
				waitFor = append(waitFor, p.name)
			}
		}
		if n.blocked {
			n.why += " (gridmgr dag rerun runs it once that is fixed)"
			n.state = NodeWaiting
			if _, done, removed := groupOf(n.all()); done && removed {
				n.state = DagRemoved // removed while it waited
			}
			q.stuck(n.all(), n.why, true)
			continue
		}
		if len(waitFor) > 0 {
			n.state = NodeWaiting
			n.why = "waiting for " + strings.Join(waitFor, ", ")
			q.stuck(n.all(), n.why, false)
			continue
		}
		after := "its nodes before it completed"
		if len(n.after) == 0 {
			after = "submitted"
		} else if len(n.after) <= 3 {
			after = "after " + strings.Join(n.after, ", ") + " completed"
		}
		if n.pre != nil {
			q.release(now, n.pre, after)
			switch s := n.pre.r.Info.State; {
			case s == wire.JobState_JOB_STATE_COMPLETED:
				after = "its pre command completed"
			case ended(s):
				n.bad, n.state = true, DagFailed
				if s == wire.JobState_JOB_STATE_REMOVED {
					n.state = DagRemoved
				}
				n.why = "its pre command " + StateName(s) + ": " + n.pre.r.Info.Reason
				q.stuck(n.all(), "will not run: "+n.why, true)
				continue
			default:
				n.state = NodePre
				if s == wire.JobState_JOB_STATE_HELD {
					n.state = DagHeld
				}
				continue
			}
		}
		for _, j := range n.jobs {
			q.release(now, j, after)
		}
		allOK, done, removed := groupOf(n.jobs)
		if !done {
			n.state = DagRunning
			held := true
			for _, j := range n.jobs {
				if !ended(j.r.Info.State) && j.r.Info.State != wire.JobState_JOB_STATE_HELD {
					held = false
				}
			}
			if held {
				n.state = DagHeld
			}
			continue
		}
		if n.post != nil {
			if n.post.r.Info.State == wire.JobState_JOB_STATE_WAITING {
				result := DagCompleted
				if !allOK {
					result = DagFailed
				}
				if n.post.r.Spec.Env == nil {
					n.post.r.Spec.Env = map[string]string{}
				}
				n.post.r.Spec.Env[EnvNodeResult] = result
				q.release(now, n.post, "the node's jobs ended ("+result+"); its post command decides the node")
			}
			s := n.post.r.Info.State
			switch {
			case s == wire.JobState_JOB_STATE_COMPLETED:
				n.ok, n.state = true, DagCompleted
			case ended(s):
				n.bad, n.state = true, DagFailed
				if s == wire.JobState_JOB_STATE_REMOVED {
					n.state = DagRemoved
				}
				n.why = "its post command " + StateName(s) + ": " + n.post.r.Info.Reason
				if f := firstFailed(n.jobs); f != nil {
					n.why = fmt.Sprintf("its job %s failed (%s) and its post command %s (%s)", f.r.Info.Id, f.r.Info.Reason, StateName(s), n.post.r.Info.Reason)
				}
			case s == wire.JobState_JOB_STATE_HELD:
				n.state = DagHeld
			default:
				n.state = NodePost
			}
			continue
		}
		switch {
		case allOK:
			n.ok, n.state = true, DagCompleted
		case removed:
			n.bad, n.state, n.why = true, DagRemoved, "a job of it was removed"
		default:
			n.bad, n.state = true, DagFailed
			if f := firstFailed(n.jobs); f != nil {
				n.why = f.r.Info.Id + ": " + f.r.Info.Reason
			}
		}
	}
	was := d.state
	d.state = dagState(d)
	d.keepUntil = time.Time{}
	if dagEnded(d.state) {
		var last int64
		for _, n := range d.nodes {
			for _, j := range n.all() {
				last = max(last, j.r.Info.EndedUnixMs, j.r.Info.SinceUnixMs)
			}
		}
		d.keepUntil = time.UnixMilli(last).Add(q.cfg.KeepEnded)
	}
	if d.loaded {
		d.loaded = false // what it was before the restart, not a change
		return
	}
	if d.state != was {
		detail := fmt.Sprintf("workflow %s: %s", d.name, d.state)
		switch d.state {
		case DagFailed:
			for _, n := range d.nodes {
				if n.bad {
					detail += "; node " + n.name + " " + n.state + " (" + n.why + ")"
					break
				}
			}
			detail += "; what could run has run (gridmgr dag rerun " + d.id + " runs the rest)"
		case DagRunning:
			if was == "" {
				detail = fmt.Sprintf("workflow %s submitted: %d nodes", d.name, len(d.nodes))
			}
		}
		typ := "dag-" + d.state
		if was == "" {
			typ = "dag-submitted"
		}
		q.rd.Changes = append(q.rd.Changes, Change{Job: d.id, User: d.user, Dag: d.id,
			Entry: &wire.JobLogEntry{TimeUnixMs: now.UnixMilli(), Type: typ, Detail: detail}})
	}
}

// firstFailed is the first of js that failed, or nil.
func firstFailed(js []*job) *job {
	for _, j := range js {
		if j.r.Info.State == wire.JobState_JOB_STATE_FAILED {
			return j
		}
	}
	return nil
}

// dagState is a workflow's state from its nodes': completed when every
// node is; running (or held) while a job of it may still run; else
// failed, or removed if a node was.
func dagState(d *dag) string {
	all, removed, live, held := true, false, false, false
	for _, n := range d.nodes {
		if !n.ok {
			all = false
		}
		if n.state == DagRemoved {
			removed = true
		}
		if n.blocked || n.bad {
			continue
		}
		for _, j := range n.all() {
			s := j.r.Info.State
			if ended(s) {
				continue
			}
			if s == wire.JobState_JOB_STATE_HELD {
				held = true
			} else {
				live = true
			}
		}
	}
	switch {
	case all:
		return DagCompleted
	case live:
		return DagRunning
	case held:
		return DagHeld
	case removed:
		return DagRemoved
	}
	return DagFailed
}

// dagEnded says whether workflow state s is final (until a rerun).
func dagEnded(s string) bool { return s == DagCompleted || s == DagFailed || s == DagRemoved }

// Rerun runs again what did not complete of workflow id: the failed and
// removed jobs of every node that did not complete go back to waiting
// (with their tries counted anew), and run as their nodes' turns come;
// completed jobs are kept. A workflow still running is refused.
func (q *Queue) Rerun(now time.Time, id, who string, admin bool) (*wire.DagInfo, error) {
	d := q.dags[id]
	if d == nil {
		return nil, fmt.Errorf("%w: %s is not a workflow of this manager (gridmgr dag status lists them)", ErrNoJob, id)
	}
	if !admin && d.owner != who {
		return nil, fmt.Errorf("%w: workflow %s was submitted by another client; only its submitter or an admin may rerun it", ErrForbidden, id)
	}
	if q.dagDirty[d] {
		// A job of it changed since the last tick (a `dag rm` just
		// before): judge the workflow as it is now.
		q.evaluate(now, d)
	}
	if d.state == DagRunning || d.state == DagHeld {
		return nil, fmt.Errorf("%w: workflow %s is %s: a rerun is for a workflow that failed or was removed (gridmgr dag status %s)", ErrState, id, d.state, id)
	}
	if d.state == DagCompleted {
		return nil, fmt.Errorf("%w: workflow %s completed: nothing to run again", ErrState, id)
	}
	var again []*job
	for _, n := range d.nodes {
		if n.ok {
			continue
		}
		for _, j := range n.all() {
			s := j.r.Info.State
			if s == wire.JobState_JOB_STATE_FAILED || s == wire.JobState_JOB_STATE_REMOVED ||
				(j == n.post && s == wire.JobState_JOB_STATE_COMPLETED) {
				again = append(again, j)
			}
		}
	}
	if err := q.roomFor(d.user, len(again)); err != nil {
		return nil, err
	}
	for _, j := range again {
		if j.busy != 0 {
			q.dropAct(j.busy)
			j.busy = 0
		}
		j.epoch++
		info := j.r.Info
		q.setState(now, j, wire.JobState_JOB_STATE_WAITING)
		info.Tries, info.Moves, info.Reason, info.EndedUnixMs = 0, 0, "", 0
		info.Exited, info.ExitCode, info.Exit = false, 0, ""
		info.Results, j.r.Accepted = nil, false
		j.avoid, j.wait, j.notBefore = nil, 0, time.Time{}
		q.log(now, j, "rerun", "workflow "+d.name+" run again by "+shortPeer(who)+": this job did not complete")
	}
	q.changed = true
	d.state = DagRunning // its rerun is its own event
	q.rd.Changes = append(q.rd.Changes, Change{Job: d.id, User: d.user, Dag: d.id,
		Entry: &wire.JobLogEntry{TimeUnixMs: now.UnixMilli(), Type: "dag-rerun", Detail: fmt.Sprintf("workflow %s: %d jobs run again", d.name, len(again))}})
	q.evaluate(now, d)
	return q.dagInfo(d), nil
}

// Dags are the workflows ids name (none: every one f selects).
func (q *Queue) Dags(ids []string, f Filter) ([]*wire.DagInfo, error) {
	var ds []*dag
	if len(ids) > 0 {
		for _, id := range ids {
			d := q.dags[id]
			if d == nil {
				return nil, fmt.Errorf("%w: %s is not a workflow of this manager", ErrNoJob, id)
			}
			ds = append(ds, d)
		}
	} else {
		for _, d := range q.dags {
			if (f.User != "" && d.user != f.User) || (f.Owner != "" && d.owner != f.Owner) || (!f.Ended && dagEnded(d.state)) {
				continue
			}
			ds = append(ds, d)
		}
		slices.SortFunc(ds, func(a, b *dag) int { return cmp.Compare(clusterNumber(a.id), clusterNumber(b.id)) })
	}
	out := make([]*wire.DagInfo, 0, len(ds))
	for _, d := range ds {
		out = append(out, q.dagInfo(d))
	}
	return out, nil
}

func (q *Queue) dagInfo(d *dag) *wire.DagInfo {
	in := &wire.DagInfo{Id: d.id, Name: d.name, User: d.user, OwnerPeer: d.owner, State: d.state, SubmittedUnixMs: d.submitted}
	for _, n := range d.nodes {
		ni := &wire.DagNodeInfo{Name: n.name, After: n.after, State: n.state, Reason: n.why, Jobs: map[string]uint32{}}
		if len(n.jobs) > 0 {
			ni.Cluster = n.jobs[0].r.Info.Cluster
		}
		for _, j := range n.all() {
			ni.Jobs[StateName(j.r.Info.State)]++
			if e := j.r.Info.EndedUnixMs; dagEnded(d.state) && e > in.EndedUnixMs {
				in.EndedUnixMs = e
			}
		}
		in.Nodes = append(in.Nodes, ni)
	}
	return in
}

// dagForgettable says whether workflow d, past its keepUntil, may be
// forgotten: nothing of it in flight, every completed job's results kept.
func (q *Queue) dagForgettable(d *dag) bool {
	for _, n := range d.nodes {
		for _, j := range n.all() {
			if j.busy != 0 || len(j.r.Orphans) > 0 || (j.r.Info.State == wire.JobState_JOB_STATE_COMPLETED && !j.r.Accepted) {
				return false
			}
		}
	}
	return true
}

// forgetDag forgets every job of d, and d.
func (q *Queue) forgetDag(d *dag) {
	for _, n := range d.nodes {
		for _, j := range n.all() {
			q.forget(j)
		}
	}
	delete(q.dags, d.id)
	if d.reqID != "" {
		delete(q.byReq, d.reqID)
	}
	delete(q.dagDirty, d)
}

// dagIDs are the ids of the jobs of workflow d, node by node.
func (d *dag) jobIDs() []string {
	var out []string
	for _, n := range d.nodes {
		for _, j := range n.all() {
			out = append(out, j.r.Info.Id)
		}
	}
	return out
}

// DagCounts are the workflows by state, every state named.
func (q *Queue) DagCounts() map[string]int {
	c := map[string]int{DagRunning: 0, DagHeld: 0, DagCompleted: 0, DagFailed: 0, DagRemoved: 0}
	for _, d := range q.dags {
		c[d.state]++
	}
	return c
}

// DagOf is the workflow job id belongs to ("" none).
func (q *Queue) DagOf(id string) string {
	if j := q.jobs[id]; j != nil && j.d != nil {
		return j.d.id
	}
	return ""
}
