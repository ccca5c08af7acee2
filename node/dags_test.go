package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/jobs"
	"github.com/gridmgr/gridmgr/relations"

	"github.com/gridmgr/gridmgr/wire"
)

func dagEnv(id uint64, req string, nodes ...*wire.DagNode) *wire.Envelope {
	return &wire.Envelope{Id: id, Body: &wire.Envelope_JobRequest{JobRequest: &wire.JobRequest{
		Op: wire.JobRequest_OP_SUBMIT_DAG, RequestId: req, User: "alice", Dag: &wire.DagSpec{Name: "flow", Nodes: nodes}}}}
}

func dagNode(name string, n int, after ...string) *wire.DagNode {
	js := jobSpecs(n)
	for _, j := range js {
		j.Name = name
	}
	return &wire.DagNode{Name: name, After: after, Jobs: js}
}

// A workflow submit is answered once written; a retry of it that arrives
// during the write gets the same workflow; only the first node's jobs may
// be matched; a bad workflow is refused saying what is wrong, queuing
// nothing; another client may neither rerun nor remove it.
func TestDagSubmitAnsweredAfterWrite(t *testing.T) {
	c, now := jobCore(t)
	env := func(id uint64) *wire.Envelope {
		return dagEnv(id, "d1", dagNode("b", 2, "a"), dagNode("a", 1))
	}
	if err := c.ClientStep(now, 1, "P-alice", env(1)); err != nil {
		t.Fatal(err)
	}
	has := findCall(t, c.Ready(), func(r any) bool { _, ok := r.(JobHas); return ok })
	c.CallDone(now, CallDone{ID: has.ID, Kind: CallJob, Result: []string(nil)})
	rd := c.Ready()
	if len(rd.Client) != 0 {
		t.Fatalf("answered before the write: %v", rd.Client)
	}
	published := false
	for _, ev := range rd.Publish {
		published = published || ev.Type == "dag-submitted"
	}
	save := findCall(t, rd, func(r any) bool { _, ok := r.(JobSave); return ok })
	states := map[string]wire.JobState{}
	for _, r := range save.Req.(JobSave).Saves {
		states[r.Info.Node] = r.Info.State
	}
	if states["a"] != wire.JobState_JOB_STATE_IDLE || states["b"] != wire.JobState_JOB_STATE_WAITING {
		t.Fatalf("saved states %v", states)
	}
	_ = c.ClientStep(now, 2, "P-alice", env(7))
	if rd := c.Ready(); len(rd.Client) != 0 {
		t.Fatalf("the retry was answered before the write: %v", rd.Client)
	}
	c.CallDone(now, CallDone{ID: save.ID, Kind: CallJob})
	rd = c.Ready()
	if len(rd.Client) != 2 {
		t.Fatalf("%d answers after the write", len(rd.Client))
	}
	for _, m := range rd.Client {
		r := m.Env.GetJobReply()
		if r == nil || r.Cluster != "gm0.1" || len(r.Dags) != 1 || r.Dags[0].State != "running" || r.Duplicate != (m.Session == 2) {
			t.Fatalf("answer %v", m.Env)
		}
	}
	for _, ev := range rd.Publish {
		published = published || ev.Type == "dag-submitted"
	}
	if !published {
		t.Error("no dag-submitted event")
	}

	for name, bad := range map[string]*wire.Envelope{
		"cycle":   dagEnv(3, "d2", dagNode("a", 1, "b"), dagNode("b", 1, "a")),
		"unknown": dagEnv(3, "d3", dagNode("a", 1, "zz")),
		"empty":   dagEnv(3, "d4"),
	} {
		_ = c.ClientStep(now, 1, "P-alice", bad)
		rd := c.Ready()
		if len(rd.Client) != 1 || rd.Client[0].Env.GetError().GetCode() != wire.ErrorReply_CODE_BAD_REQUEST {
			t.Fatalf("%s: %v", name, rd.Client)
		}
		t.Logf("%s: %s", name, rd.Client[0].Env.GetError().GetMessage())
	}
	if strings.Contains(c.jobs.q.DagOf("gm0.4"), "gm0") {
		t.Fatal("a refused workflow was queued")
	}
	for _, op := range []wire.JobRequest_Op{wire.JobRequest_OP_DAG_RERUN, wire.JobRequest_OP_REMOVE} {
		_ = c.ClientStep(now, 5, "P-mallory", &wire.Envelope{Id: 9, Body: &wire.Envelope_JobRequest{JobRequest: &wire.JobRequest{Op: op, Ids: []string{"gm0.1"}}}})
		rd := c.Ready()
		if len(rd.Client) != 1 {
			t.Fatalf("%s by another client: %v", op, rd.Client)
		}
		if code := rd.Client[0].Env.GetError().GetCode(); code != wire.ErrorReply_CODE_FORBIDDEN && !(op == wire.JobRequest_OP_DAG_RERUN && code == wire.ErrorReply_CODE_BAD_REQUEST) {
			t.Fatalf("%s by another client: %v", op, rd.Client[0].Env)
		}
	}
	// status: the asker's own by default
	_ = c.ClientStep(now, 5, "P-mallory", &wire.Envelope{Id: 10, Body: &wire.Envelope_JobRequest{JobRequest: &wire.JobRequest{Op: wire.JobRequest_OP_DAG_STATUS}}})
	if rd := c.Ready(); len(rd.Client) != 1 || len(rd.Client[0].Env.GetJobReply().GetDags()) != 0 {
		t.Fatalf("another client's status: %v", rd.Client)
	}
	_ = c.ClientStep(now, 1, "P-alice", &wire.Envelope{Id: 11, Body: &wire.Envelope_JobRequest{JobRequest: &wire.JobRequest{Op: wire.JobRequest_OP_DAG_STATUS}}})
	if rd := c.Ready(); len(rd.Client) != 1 || len(rd.Client[0].Env.GetJobReply().GetDags()) != 1 {
		t.Fatalf("the submitter's status: %v", rd.Client)
	}
}

// A change to the queue asks the runtime for a Tick 20 ms on (WakeAt),
// sooner than a driver that re-arms its timer only within a tick interval
// after an input would look: a workflow's next node is released then, not
// up to a tick interval later.
func TestJobsWakeTheDriver(t *testing.T) {
	c, now := jobCore(t)
	c.Tick(now)
	if w := c.WakeAt(); !w.IsZero() {
		t.Fatalf("WakeAt %v after a tick with nothing to do", w)
	}
	_ = c.ClientStep(now, 1, "P-alice", dagEnv(1, "w", dagNode("a", 1)))
	has := findCall(t, c.Ready(), func(r any) bool { _, ok := r.(JobHas); return ok })
	c.CallDone(now, CallDone{ID: has.ID, Kind: CallJob, Result: []string(nil)})
	c.Ready()
	w := c.WakeAt()
	if w.IsZero() || w.After(now.Add(20*time.Millisecond)) {
		t.Fatalf("WakeAt %v after a submit at %v", w, now)
	}
	c.Tick(w)
	if got := c.WakeAt(); !got.IsZero() && !got.After(w) {
		t.Fatalf("WakeAt %v not cleared by the tick at %v", got, w)
	}
}

// A glide-in (an inferior named NAME-INDEX whose launch job, attrs
// glidein = NAME, this queue has placed) joining and leaving are job
// events at the launcher; an inferior that is not one of its glide-ins is
// not.
func TestGlideinJoinedAndLeftEvents(t *testing.T) {
	c, now := jobCore(t)
	env := submitEnv(1, "g", 2)
	for _, s := range env.GetJobRequest().Jobs {
		s.Name, s.Spread, s.Attrs = "glidein-g", true, map[string]string{GlideinAttr: "g"}
	}
	_ = c.ClientStep(now, 1, "P-alice", env)
	has := findCall(t, c.Ready(), func(r any) bool { _, ok := r.(JobHas); return ok })
	c.CallDone(now, CallDone{ID: has.ID, Kind: CallJob, Result: []string(nil)})
	save := findCall(t, c.Ready(), func(r any) bool { _, ok := r.(JobSave); return ok })
	c.CallDone(now, CallDone{ID: save.ID, Kind: CallJob})
	c.Ready()
	// drive index 1 to reserved at host gm9: match, reserve
	for step := 0; step < 20; step++ {
		now = now.Add(50 * time.Millisecond)
		c.Tick(now)
		rd := c.Ready()
		for _, call := range rd.Calls {
			a, ok := call.Req.(jobs.Act)
			if !ok {
				if _, ok := call.Req.(JobSave); ok {
					c.CallDone(now, CallDone{ID: call.ID, Kind: CallJob})
				}
				continue
			}
			res := jobs.Result{}
			switch a.Kind {
			case jobs.ActMatch:
				res.Offers = []*wire.Offer{{Peer: "P-gm9", Name: "gm9"}}
			case jobs.ActReserve:
				res.Attempt = &wire.JobAttempt{Peer: "P-gm9", Name: "gm9", Reservation: "gm9-1", LeaseEndUnixMs: now.Add(time.Hour).UnixMilli()}
			default:
				continue // staging is left in flight: the job stays placed
			}
			c.CallDone(now, CallDone{ID: call.ID, Kind: CallJob, Result: res})
		}
	}
	published := func() []string {
		var out []string
		for _, ev := range c.Ready().Publish {
			if strings.HasPrefix(ev.Type, "glidein-") {
				out = append(out, ev.Type+" "+ev.GetJob().GetId()+" "+ev.GetJob().GetDetail())
			}
		}
		return out
	}
	c.onChange(now, relations.Change{Peer: "P-x", Name: "other-0", Role: relations.Inferior, From: relations.Connecting, To: relations.Up})
	if got := published(); len(got) != 0 {
		t.Fatalf("a manager that is no glide-in: %v", got)
	}
	placedIdx := -1
	for i := range 2 {
		if in, ok := c.jobs.q.Placed(GlideinAttr, "g", uint32(i)); ok && in.Manager == "gm9" {
			placedIdx = i
		}
	}
	if placedIdx < 0 {
		t.Fatalf("no glide-in job placed: %v", c.jobs.q.List(jobs.Filter{}))
	}
	name := fmt.Sprintf("g-%d", placedIdx)
	c.onChange(now, relations.Change{Peer: "P-g", Name: name, Role: relations.Inferior, From: relations.Connecting, To: relations.Up})
	if got := published(); len(got) != 1 || !strings.HasPrefix(got[0], "glidein-joined gm0.1") || !strings.Contains(got[0], "on gm9") {
		t.Fatalf("joined: %v", got)
	}
	c.jobs.relationEnded(now, &relations.Relation{Peer: "P-g", Name: name, Role: relations.Inferior}, "removed")
	if got := published(); len(got) != 1 || !strings.HasPrefix(got[0], "glidein-left gm0.1") {
		t.Fatalf("left: %v", got)
	}
}
