package client

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/jobs"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/wire"
)

// SubmittedDag is what a workflow submit queued.
type SubmittedDag struct {
	ID        string
	Duplicate bool
	RequestID string
	Message   string
	Info      *wire.DagInfo
}

// Pre and post commands run at the submit manager with these amounts.
const (
	CommandMemory  = 64 << 20
	CommandRuntime = 30 * time.Minute
)

// SubmitFlowFile reads the workflow file file (docs/jobs.md,
// "Workflows"), the job file of each node that names one, packs every
// program once, uploads what the manager does not hold and submits the
// workflow. Nothing outside the workflow file's directory is read. self
// is the name of the manager c talks to: pre and post commands are pinned
// to it (requirement name == self). An error of a file, or of what it
// names, is a *JobFileError found before anything is sent.
func (c *Client) SubmitFlowFile(ctx context.Context, file, self string, o SubmitOptions) (*SubmittedDag, error) {
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	progress := func(format string, a ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(format, a...))
		}
	}
	spec, blobs, cleanup, err := prepareFlowFile(file, self, now)
	defer cleanup()
	if err != nil {
		return nil, err
	}
	req := &wire.JobRequest{Op: wire.JobRequest_OP_SUBMIT_DAG, RequestId: o.RequestID, User: o.User, Dag: spec}
	if req.RequestId == "" {
		req.RequestId = NewRequestID()
	}
	if n := proto.Size(&wire.Envelope{Body: &wire.Envelope_JobRequest{JobRequest: req}}); n > p2p.DefaultMaxFrame-4096 {
		return nil, &JobFileError{File: file, Err: fmt.Errorf("%s: the workflow is %d bytes as sent, more than a manager takes in one message (%d): split it into workflows of fewer nodes",
			file, n, p2p.DefaultMaxFrame-4096)}
	}
	for _, b := range blobs {
		if err := c.uploadBlob(ctx, b, progress); err != nil {
			return nil, err
		}
	}
	progress("submitting workflow %s of %s: %d nodes (request %s)", spec.Name, file, len(spec.Nodes), req.RequestId)
	rep, err := c.submitRetrying(ctx, req, file, o)
	if err != nil {
		return nil, err
	}
	s := &SubmittedDag{ID: rep.Cluster, Duplicate: rep.Duplicate, RequestID: req.RequestId, Message: rep.Message}
	if len(rep.Dags) > 0 {
		s.Info = rep.Dags[0]
	}
	return s, nil
}

func prepareFlowFile(file, self string, now time.Time) (*wire.DagSpec, []*blob, func(), error) {
	p := newPacker()
	bad := func(err error) (*wire.DagSpec, []*blob, func(), error) {
		return nil, nil, p.cleanup, &JobFileError{File: file, Err: err}
	}
	data, err := readLimited(file, jobs.MaxFlowSize)
	if err != nil {
		return bad(fmt.Errorf("%s: %v", file, err))
	}
	f, err := jobs.ParseFlow(file, data, now)
	if err != nil {
		return bad(err)
	}
	dir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return bad(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return bad(fmt.Errorf("%s: the workflow's dir: %v", file, plainFileErr(err)))
	}
	defer root.Close()
	spec := &wire.DagSpec{Name: f.Name}
	for _, n := range f.Nodes {
		dn := &wire.DagNode{Name: n.Name, After: n.After}
		d, jroot, jdir := n.Job, root, dir
		if n.JobFile != "" {
			jf, err := root.Open(filepath.FromSlash(n.JobFile))
			if err != nil {
				return bad(f.Err(n, fmt.Sprintf("%s: %v (a job file in the workflow's dir)", n.JobFile, errText(err))))
			}
			data, err := io.ReadAll(io.LimitReader(jf, jobs.MaxFileSize+1))
			jf.Close()
			if err != nil {
				return bad(f.Err(n, fmt.Sprintf("%s: %v", n.JobFile, errText(err))))
			}
			if len(data) > jobs.MaxFileSize {
				return bad(f.Err(n, fmt.Sprintf("%s: more than %d bytes: a job file is at most %d KiB", n.JobFile, jobs.MaxFileSize, jobs.MaxFileSize>>10)))
			}
			shown := filepath.Join(filepath.Dir(file), filepath.FromSlash(n.JobFile))
			if d, err = jobs.ParseAt(shown, data, now); err != nil {
				return bad(err)
			}
			sub := path.Dir(n.JobFile)
			if sub != "." {
				if jroot, err = root.OpenRoot(filepath.FromSlash(sub)); err != nil {
					return bad(f.Err(n, fmt.Sprintf("%s: %v", sub, errText(err))))
				}
				defer jroot.Close()
				jdir = filepath.Join(dir, filepath.FromSlash(sub))
			}
		}
		if n.Retries >= 0 {
			d.MaxRetries = n.Retries
		}
		where := fmt.Sprintf("%s: node %s: ", file, n.Name)
		if dn.Jobs, err = p.specs(jroot, jdir, d); err != nil {
			return bad(fmt.Errorf("%s%v", where, err))
		}
		for _, cmd := range []struct {
			role  string
			words []string
			to    **wire.JobSpec
		}{{jobs.RolePre, n.Pre, &dn.Pre}, {jobs.RolePost, n.Post, &dn.Post}} {
			if cmd.words == nil {
				continue
			}
			cd := commandJob(f.Name, n.Name, cmd.role, cmd.words, self)
			specs, err := p.specs(root, dir, cd)
			if err != nil {
				return bad(fmt.Errorf("%s%s: %v", where, cmd.role, err))
			}
			*cmd.to = specs[0]
		}
		spec.Nodes = append(spec.Nodes, dn)
	}
	if _, err := jobs.CheckDag(spec); err != nil {
		return bad(fmt.Errorf("%s: %v", file, err))
	}
	return spec, p.blobs, p.cleanup, nil
}

// commandJob is the job that runs a node's pre or post command at the
// submit manager self.
func commandJob(flow, node, role string, words []string, self string) *jobs.Description {
	name := node
	if len(name) > 58 {
		name = name[:58]
	}
	name += "-" + role
	return &jobs.Description{Name: name, Program: words[0], Args: words[1:], Count: 1, CPUs: 1, Memory: CommandMemory,
		Runtime: CommandRuntime, Requirement: fmt.Sprintf("name == %q", self), OutputDir: "results-" + flow + "/" + name,
		SuccessExitCodes: []int{0}, OnFailure: jobs.OnFailureFail, Network: "host", LostAfter: jobs.DefaultLostAfter}
}

// readLimited reads a file of at most limit bytes.
func readLimited(file string, limit int) ([]byte, error) {
	fh, err := os.Open(file)
	if err != nil {
		return nil, plainFileErr(err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, int64(limit)+1))
	if err != nil {
		return nil, plainFileErr(err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("more than %d bytes: the limit is %d KiB", limit, limit>>10)
	}
	return data, nil
}

// Dags is the workflows ids name (none: the client's own; f as for Jobs).
func (c *Client) Dags(ctx context.Context, ids []string, f JobFilter) (*wire.JobReply, error) {
	return c.jobRequest(ctx, &wire.JobRequest{Op: wire.JobRequest_OP_DAG_STATUS, Ids: ids, All: f.All, ForUser: f.User, Ended: f.Ended || len(ids) > 0})
}

// RerunDag runs again what did not complete of workflow id.
func (c *Client) RerunDag(ctx context.Context, id string) (*wire.JobReply, error) {
	return c.jobRequest(ctx, &wire.JobRequest{Op: wire.JobRequest_OP_DAG_RERUN, Ids: []string{id}})
}

// DagEnded says whether a workflow in state s has ended (completed,
// failed: nothing more can run, removed).
func DagEnded(s string) bool {
	return s == jobs.DagCompleted || s == jobs.DagFailed || s == jobs.DagRemoved
}

// WaitDags polls the workflows ids every interval until each has ended,
// calling changed when one's state or node counts change.
func (c *Client) WaitDags(ctx context.Context, ids []string, every time.Duration, changed func(*wire.DagInfo)) ([]*wire.DagInfo, error) {
	last := map[string]string{}
	for {
		rep, err := c.Dags(ctx, ids, JobFilter{})
		if err != nil {
			return nil, err
		}
		done := true
		for _, d := range rep.Dags {
			key := d.State + summary(d)
			if changed != nil && last[d.Id] != key {
				changed(d)
			}
			last[d.Id] = key
			if !DagEnded(d.State) {
				done = false
			}
		}
		if done {
			return rep.Dags, nil
		}
		select {
		case <-ctx.Done():
			return rep.Dags, ctx.Err()
		case <-time.After(every):
		}
	}
}

// summary is a workflow's node states in a line: "3 completed, 1 running".
func summary(d *wire.DagInfo) string {
	n := map[string]int{}
	var order []string
	for _, x := range d.Nodes {
		if n[x.State] == 0 {
			order = append(order, x.State)
		}
		n[x.State]++
	}
	parts := make([]string, 0, len(order))
	for _, s := range order {
		parts = append(parts, fmt.Sprintf("%d %s", n[s], s))
	}
	return strings.Join(parts, ", ")
}

// DagSummary is d's nodes by state in words.
func DagSummary(d *wire.DagInfo) string { return summary(d) }
