package node

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/jobs"
	"github.com/gridmgr/gridmgr/wire"
)

// jobCore is a Core whose job queue is loaded (empty).
func jobCore(t *testing.T) (*Core, time.Time) {
	cfg := jobConfig(t)
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c := NewCore(cfg, "P-self", nil, rand.New(rand.NewPCG(1, 2)), nil)
	c.Start(now)
	load := findCall(t, c.Ready(), func(r any) bool { _, ok := r.(JobLoad); return ok })
	c.CallDone(now, CallDone{ID: load.ID, Kind: CallJob, Result: JobLoaded{}})
	c.Ready()
	return c, now
}

func findCall(t *testing.T, rd Ready, is func(any) bool) Call {
	t.Helper()
	for _, c := range rd.Calls {
		if c.Kind == CallJob && is(c.Req) {
			return c
		}
	}
	t.Fatalf("no such job call in %v", rd.Calls)
	return Call{}
}

func jobSpecs(n int) []*wire.JobSpec {
	var out []*wire.JobSpec
	for i := range n {
		out = append(out, &wire.JobSpec{Name: "a", Index: uint32(i), Count: uint32(n), App: "a", BundleSha256: strings.Repeat("b", 64),
			Cpus: 1, RuntimeMs: 1000, InDir: "in", OutDir: "out"})
	}
	return out
}

func submitEnv(id uint64, req string, n int) *wire.Envelope {
	return &wire.Envelope{Id: id, Body: &wire.Envelope_JobRequest{JobRequest: &wire.JobRequest{
		Op: wire.JobRequest_OP_SUBMIT, RequestId: req, User: "alice", Jobs: jobSpecs(n)}}}
}

// A submit is answered only once its jobs are written; a retry of it,
// even one that arrives before the write is done, gives the same cluster
// and queues nothing.
func TestJobSubmitAnsweredAfterWrite(t *testing.T) {
	c, now := jobCore(t)
	if err := c.ClientStep(now, 1, "P-alice", submitEnv(1, "r1", 3)); err != nil {
		t.Fatal(err)
	}
	has := findCall(t, c.Ready(), func(r any) bool { _, ok := r.(JobHas); return ok })
	c.CallDone(now, CallDone{ID: has.ID, Kind: CallJob, Result: []string(nil)})
	rd := c.Ready()
	if len(rd.Client) != 0 {
		t.Fatalf("answered before the write: %v", rd.Client)
	}
	save := findCall(t, rd, func(r any) bool { _, ok := r.(JobSave); return ok })
	if n := len(save.Req.(JobSave).Saves); n != 3 {
		t.Fatalf("%d records saved", n)
	}
	// the retry comes while the write is under way
	if err := c.ClientStep(now, 2, "P-alice", submitEnv(7, "r1", 3)); err != nil {
		t.Fatal(err)
	}
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
		if r == nil || r.Cluster != "gm0.1" {
			t.Fatalf("answer %v", m.Env)
		}
		if r.Duplicate != (m.Session == 2) {
			t.Fatalf("session %d: duplicate=%v", m.Session, r.Duplicate)
		}
	}
	if n := len(c.jobs.q.List(jobs.Filter{})); n != 3 {
		t.Fatalf("%d jobs queued", n)
	}
	// events were published for the submissions
	pub := 0
	for _, ev := range rd.Publish {
		if ev.Kind == wire.EventKind_EVENT_KIND_JOB {
			pub++
		}
	}
	_ = pub
}

// A failed write answers nothing as done, and the queue then refuses
// new work saying why.
func TestJobWriteFailure(t *testing.T) {
	c, now := jobCore(t)
	_ = c.ClientStep(now, 1, "P-alice", submitEnv(1, "r1", 1))
	has := findCall(t, c.Ready(), func(r any) bool { _, ok := r.(JobHas); return ok })
	c.CallDone(now, CallDone{ID: has.ID, Kind: CallJob, Result: []string(nil)})
	save := findCall(t, c.Ready(), func(r any) bool { _, ok := r.(JobSave); return ok })
	c.CallDone(now, CallDone{ID: save.ID, Kind: CallJob, Err: errors.New("disk full")})
	if rd := c.Ready(); len(rd.Client) != 0 {
		t.Fatalf("a submit whose write failed was answered: %v", rd.Client)
	}
	_ = c.ClientStep(now, 1, "P-alice", submitEnv(2, "r1", 1))
	rd := c.Ready()
	if len(rd.Client) != 1 || !strings.Contains(rd.Client[0].Env.GetError().GetMessage(), "disk full") {
		t.Fatalf("after a failed write: %v", rd.Client)
	}
}

// A submit naming a file the manager was not sent is refused, nothing
// queued; bad specs are refused with what was wrong.
func TestJobSubmitRefusals(t *testing.T) {
	c, now := jobCore(t)
	_ = c.ClientStep(now, 1, "P-alice", submitEnv(1, "r1", 1))
	has := findCall(t, c.Ready(), func(r any) bool { _, ok := r.(JobHas); return ok })
	c.CallDone(now, CallDone{ID: has.ID, Kind: CallJob, Result: []string{strings.Repeat("b", 64)}})
	rd := c.Ready()
	if len(rd.Client) != 1 || !strings.Contains(rd.Client[0].Env.GetError().GetMessage(), "OP_BLOB") {
		t.Fatalf("missing file: %v", rd.Client)
	}
	env := submitEnv(2, "r2", 1)
	env.GetJobRequest().Jobs[0].Requirement = "cpus >"
	_ = c.ClientStep(now, 1, "P-alice", env)
	has = findCall(t, c.Ready(), func(r any) bool { _, ok := r.(JobHas); return ok })
	c.CallDone(now, CallDone{ID: has.ID, Kind: CallJob, Result: []string(nil)})
	rd = c.Ready()
	if len(rd.Client) != 1 || !strings.Contains(rd.Client[0].Env.GetError().GetMessage(), "requirement") {
		t.Fatalf("bad requirement: %v", rd.Client)
	}
	if n := len(c.jobs.q.List(jobs.Filter{Ended: true})); n != 0 {
		t.Fatalf("%d jobs queued by refused submits", n)
	}
	// only the submitter or an admin may hold (the file was found held
	// just now: not asked about again)
	_ = c.ClientStep(now, 1, "P-alice", submitEnv(3, "r3", 1))
	save := findCall(t, c.Ready(), func(r any) bool { _, ok := r.(JobSave); return ok })
	c.CallDone(now, CallDone{ID: save.ID, Kind: CallJob})
	c.Ready()
	_ = c.ClientStep(now, 5, "P-mallory", &wire.Envelope{Id: 9, Body: &wire.Envelope_JobRequest{JobRequest: &wire.JobRequest{
		Op: wire.JobRequest_OP_HOLD, Ids: []string{"gm0.1"}}}})
	rd = c.Ready()
	if len(rd.Client) != 1 || rd.Client[0].Env.GetError().GetCode() != wire.ErrorReply_CODE_FORBIDDEN {
		t.Fatalf("another client's hold: %v", rd.Client)
	}
}

// A manager whose runtime keeps no queue says so.
func TestJobsUnserved(t *testing.T) {
	cfg := jobConfig(t)
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c := NewCore(cfg, "P-self", nil, rand.New(rand.NewPCG(1, 2)), nil)
	c.Start(now)
	load := findCall(t, c.Ready(), func(r any) bool { _, ok := r.(JobLoad); return ok })
	c.CallDone(now, CallDone{ID: load.ID, Kind: CallJob, Err: unserved(CallJob)})
	_ = c.ClientStep(now, 1, "P-alice", submitEnv(1, "r1", 1))
	rd := c.Ready()
	if len(rd.Client) != 1 || !strings.Contains(rd.Client[0].Env.GetError().GetMessage(), "no job queue") {
		t.Fatalf("%v", rd.Client)
	}
}

func jobConfig(t *testing.T) config.Config {
	cfg := config.Default()
	cfg.Name = "gm0"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Job events go out one by one up to jobEventRate a second; past it they
// are counted and published as one summary a second, and every change is
// still in its job's log.
func TestJobEventsSummedPastTheRate(t *testing.T) {
	c, now := jobCore(t)
	const n = 3 * jobEventRate / 2
	_ = c.ClientStep(now, 1, "P-alice", submitEnv(1, "r1", n))
	has := findCall(t, c.Ready(), func(r any) bool { _, ok := r.(JobHas); return ok })
	c.CallDone(now, CallDone{ID: has.ID, Kind: CallJob, Result: []string(nil)})
	count := func(rd Ready) (single, summary int, detail string) {
		for _, ev := range rd.Publish {
			if ev.Kind != wire.EventKind_EVENT_KIND_JOB {
				continue
			}
			if ev.Type == "summary" {
				summary++
				detail = ev.GetJob().GetDetail()
			} else {
				single++
			}
		}
		return
	}
	single, summary, _ := count(c.Ready())
	if single != jobEventRate || summary != 0 {
		t.Fatalf("%d jobs submitted: %d events one by one, %d summaries; want %d and 0", n, single, summary, jobEventRate)
	}
	now = now.Add(time.Second)
	if d := c.NextDeadline(now); d.After(now) {
		t.Fatalf("the summary is not due at %v (next deadline %v)", now, d)
	}
	c.Tick(now)
	_, summary, detail := count(c.Ready())
	if summary != 1 || !strings.Contains(detail, fmt.Sprintf("%d submitted", n-jobEventRate)) {
		t.Fatalf("%d summaries: %q", summary, detail)
	}
	for _, in := range c.jobs.q.List(jobs.Filter{}) {
		if full, _ := c.jobs.q.Info(in.Id, true); len(full.Log) != 1 || full.Log[0].Type != "submitted" {
			t.Fatalf("%s's log: %v", in.Id, full.Log)
		}
	}
}
