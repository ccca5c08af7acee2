package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/wire"
)

// jobManager is a fake submit manager: it keeps blobs (whole or in
// part), answers a repeated request id as a duplicate, and serves
// results.
type jobManager struct {
	mu       sync.Mutex
	blobs    map[string][]byte
	sizes    map[string]int64
	byReq    map[string]string // request id → cluster
	submits  int               // submits taken (not duplicates)
	reqs     []*wire.JobRequest
	specs    []*wire.JobSpec
	results  map[string][]byte // path → bytes, for GET
	lists    [][]*wire.JobInfo // LIST answers, in turn (the last repeats)
	dieAfter func(*wire.JobRequest) bool
}

func newJobManager() *jobManager {
	return &jobManager{blobs: map[string][]byte{}, sizes: map[string]int64{}, byReq: map[string]string{}, results: map[string][]byte{}}
}

func errEnv(code wire.ErrorReply_Code, msg string) *wire.Envelope {
	return &wire.Envelope{Body: &wire.Envelope_Error{Error: &wire.ErrorReply{Code: code, Message: msg}}}
}

func (m *jobManager) serve(req *wire.JobRequest) *wire.Envelope {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reqs = append(m.reqs, req)
	rep := &wire.JobReply{}
	switch req.Op {
	case wire.JobRequest_OP_BLOB:
		have := m.blobs[req.Sha256]
		if req.Offset > int64(len(have)) || len(req.Data) > JobPiece {
			return errEnv(wire.ErrorReply_CODE_BAD_REQUEST, "gap or piece too big")
		}
		if req.Offset+int64(len(req.Data)) > int64(len(have)) {
			have = append(have[:req.Offset], req.Data...)
		}
		m.blobs[req.Sha256], m.sizes[req.Sha256] = have, req.Size
		rep.Offset = int64(len(have))
	case wire.JobRequest_OP_SUBMIT:
		if cl, ok := m.byReq[req.RequestId]; ok {
			rep.Cluster, rep.Duplicate = cl, true
			break
		}
		for _, s := range req.Jobs {
			for _, sha := range append([]string{s.BundleSha256}, shas(s.Inputs)...) {
				sum := sha256.Sum256(m.blobs[sha])
				if int64(len(m.blobs[sha])) != m.sizes[sha] || hex.EncodeToString(sum[:]) != sha {
					return errEnv(wire.ErrorReply_CODE_BAD_REQUEST, "file not sent "+sha)
				}
			}
		}
		m.submits++
		rep.Cluster = fmt.Sprintf("gm1.%d", m.submits)
		m.byReq[req.RequestId] = rep.Cluster
		m.specs = append(m.specs, req.Jobs...)
	case wire.JobRequest_OP_LIST:
		rep.Jobs = m.lists[0]
		if len(m.lists) > 1 {
			m.lists = m.lists[1:]
		}
	case wire.JobRequest_OP_GET:
		data, ok := m.results[req.Path]
		if !ok {
			return errEnv(wire.ErrorReply_CODE_NOT_FOUND, "no result")
		}
		end := min(int64(len(data)), req.Offset+int64(req.Limit))
		rep.Data, rep.Offset = data[req.Offset:end], int64(len(data))
	}
	return &wire.Envelope{Body: &wire.Envelope_JobReply{JobReply: rep}}
}

func shas(fs []*wire.JobFile) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Sha256)
	}
	return out
}

// jobConn is one session with a jobManager; it dies (the manager took
// the request, the answer is lost) when the manager's dieAfter says so.
type jobConn struct {
	m    *jobManager
	out  chan *wire.Envelope
	done chan struct{}
	once sync.Once
}

func (m *jobManager) dial() *jobConn {
	return &jobConn{m: m, out: make(chan *wire.Envelope, 4), done: make(chan struct{})}
}

func (c *jobConn) Peer() string { return "manager" }
func (c *jobConn) Self() string { return "client" }
func (c *jobConn) Send(env *wire.Envelope, _ time.Time) error {
	select {
	case <-c.done:
		return io.ErrClosedPipe
	default:
	}
	req := env.GetJobRequest()
	rep := c.m.serve(req)
	c.m.mu.Lock()
	die := c.m.dieAfter != nil && c.m.dieAfter(req)
	c.m.mu.Unlock()
	if die {
		c.Close()
		return nil
	}
	rep.ReplyTo = env.Id
	c.out <- rep
	return nil
}
func (c *jobConn) Recv() (*wire.Envelope, error) {
	select {
	case e := <-c.out:
		return e, nil
	case <-c.done:
		return nil, io.EOF
	}
}
func (c *jobConn) Close() error { c.once.Do(func() { close(c.done) }); return nil }

// jobDir writes a job directory: files by path (a path ending in * is
// made executable).
func jobDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, body := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, "*") {
			p, mode = strings.TrimSuffix(p, "*"), 0o755
		}
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const jobScript = "#!/bin/sh\necho $1 > out/result-$2.txt\n"

// A submit whose answer is lost (the session dies after the manager took
// it) is sent again on a new session with the same request id: one
// cluster, and the result says it was a duplicate.
func TestSubmitLostReplyRetriedOnce(t *testing.T) {
	dir := jobDir(t, map[string]string{
		"job.toml":      "name = \"sq\"\nprogram = \"bin/sq\"\ncount = 3\nargs = [\"${INDEX}\", \"${INDEX}\"]\ninputs = [\"data/in-${INDEX}.txt\", \"common.txt\"]\noutputs = [\"result-${INDEX}.txt\"]\nmax_retries = 2\non_failure = \"hold\"\ndeadline = \"+1h\"\n[env]\nIDX = \"${INDEX}\"\n",
		"bin/sq*":       jobScript,
		"data/in-0.txt": "zero", "data/in-1.txt": "one", "data/in-2.txt": "two", "common.txt": "common",
	})
	m := newJobManager()
	lost := false
	m.dieAfter = func(r *wire.JobRequest) bool {
		if r.Op == wire.JobRequest_OP_SUBMIT && !lost {
			lost = true
			return true
		}
		return false
	}
	c := New(m.dial(), nil)
	defer c.Close()
	redials := 0
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var said []string
	s, err := c.SubmitJobFile(context.Background(), filepath.Join(dir, "job.toml"), SubmitOptions{User: "alice", Now: now,
		Progress: func(s string) { said = append(said, s) },
		Redial: func(context.Context) (*Client, error) {
			redials++
			return New(m.dial(), nil), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if m.submits != 1 || redials != 1 || !s.Duplicate || s.Cluster != "gm1.1" || s.Count != 3 ||
		!slices.Equal(s.IDs, []string{"gm1.1[0]", "gm1.1[1]", "gm1.1[2]"}) {
		t.Fatalf("submits %d, redials %d, %+v", m.submits, redials, s)
	}
	var ids []string
	for _, r := range m.reqs {
		if r.Op == wire.JobRequest_OP_SUBMIT {
			ids = append(ids, r.RequestId)
			if r.User != "alice" || len(r.Jobs) != 3 {
				t.Fatalf("submit: user %q, %d jobs", r.User, len(r.Jobs))
			}
		}
	}
	if len(ids) != 2 || ids[0] != ids[1] || ids[0] == "" {
		t.Fatalf("request ids %v", ids)
	}
	sp := m.specs[2]
	if sp.Name != "sq" || sp.App != "sq" || sp.Index != 2 || sp.Count != 3 || !slices.Equal(sp.Args, []string{"2", "2"}) || sp.Env["IDX"] != "2" ||
		sp.InDir != "in" || sp.OutDir != "out" || sp.OutputDir != filepath.Join(dir, "results-sq", "2") || !slices.Equal(sp.Outputs, []string{"result-2.txt"}) ||
		sp.MaxRetries != 2 || !sp.HoldOnFailure || sp.DeadlineUnixMs != now.Add(time.Hour).UnixMilli() || sp.RuntimeMs != 3600_000 ||
		sp.Cpus != 1 || sp.Mem != 256<<20 || len(sp.Inputs) != 2 || sp.Inputs[0].Path != "data/in-2.txt" || sp.Inputs[0].Size != 3 ||
		sp.Inputs[1].Path != "common.txt" || sp.Inputs[0].Mode != 0o644 || !slices.Equal(sp.SuccessExitCodes, []int32{0}) {
		t.Fatalf("spec: %v", sp)
	}
	// The bundle, three inputs of their own and one shared: five blobs,
	// each asked once and sent once.
	blobs := 0
	for _, r := range m.reqs {
		if r.Op == wire.JobRequest_OP_BLOB && len(r.Data) > 0 {
			blobs++
		}
	}
	if blobs != 5 || len(m.blobs) != 5 {
		t.Fatalf("%d pieces sent, %d blobs", blobs, len(m.blobs))
	}
	if !strings.Contains(strings.Join(said, "\n"), "same request id") {
		t.Fatalf("progress: %q", said)
	}

	// Without Redial, a lost answer is an error naming the request id.
	lost = false
	_, err = New(m.dial(), nil).SubmitJobFile(context.Background(), filepath.Join(dir, "job.toml"), SubmitOptions{RequestID: "r-2"})
	if err == nil || !strings.Contains(err.Error(), "request id r-2") || m.submits != 2 {
		t.Fatalf("without Redial: %v (%d submits)", err, m.submits)
	}
	// ... and submitting again with it queues nothing more.
	s, err = New(m.dial(), nil).SubmitJobFile(context.Background(), filepath.Join(dir, "job.toml"), SubmitOptions{RequestID: "r-2"})
	if err != nil || !s.Duplicate || s.Cluster != "gm1.2" || m.submits != 2 {
		t.Fatalf("again: %+v %v", s, err)
	}
}

// An upload goes on from what the manager already holds; a file it holds
// whole is not sent again.
func TestSubmitUploadResumes(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), (JobPiece*5/2)/16) // 2.5 pieces
	dir := jobDir(t, map[string]string{"job.toml": "program = \"run\"\ninputs = [\"big.dat\"]\n", "run*": jobScript, "big.dat": string(big)})
	sum := sha256.Sum256(big)
	sha := hex.EncodeToString(sum[:])
	m := newJobManager()
	m.blobs[sha] = append([]byte(nil), big[:JobPiece+100]...) // an earlier upload stopped here
	c := New(m.dial(), nil)
	defer c.Close()
	if _, err := c.SubmitJobFile(context.Background(), filepath.Join(dir, "job.toml"), SubmitOptions{}); err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for _, r := range m.reqs {
		if r.Op == wire.JobRequest_OP_BLOB && r.Sha256 == sha {
			offs = append(offs, r.Offset)
			if len(r.Data) > JobPiece {
				t.Fatalf("a piece of %d bytes", len(r.Data))
			}
		}
	}
	if !slices.Equal(offs, []int64{0, JobPiece + 100, 2*JobPiece + 100}) || !bytes.Equal(m.blobs[sha], big) {
		t.Fatalf("offsets %v, %d bytes stored", offs, len(m.blobs[sha]))
	}
	// Again: everything is there; only the first question of each blob.
	m.reqs = nil
	if _, err := c.SubmitJobFile(context.Background(), filepath.Join(dir, "job.toml"), SubmitOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range m.reqs {
		if r.Op == wire.JobRequest_OP_BLOB && (r.Offset != 0 || len(r.Data) != 0) {
			t.Fatalf("sent again: %v", r)
		}
	}
}

// What is wrong with a job file, or with what it names, is said with the
// file's name (and line), and nothing is sent.
func TestSubmitBadJobFiles(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	// an application bundle whose manifest lets a start add nothing
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, deploy.ManifestName), []byte("name = \"fixed\"\nversion = \"1\"\n[run]\ncommand = [\"/bin/true\"]\n"), 0o644)
	var bun bytes.Buffer
	if _, err := deploy.Pack(src, &bun); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		files map[string]string
		link  [2]string // a symlink: name in the dir → target
		want  []string
	}{
		{"bundle takes no args", map[string]string{"job.toml": "program = \"fixed.gapp\"\nargs = [\"1\"]\n", "fixed.gapp": bun.String()}, [2]string{},
			[]string{"program fixed.gapp: the job has args", "[run] args = true"}},
		{"bundle has no out dir", map[string]string{"job.toml": "program = \"fixed.gapp\"\noutputs = [\"r\"]\n", "fixed.gapp": bun.String()}, [2]string{},
			[]string{"program fixed.gapp: the job's outputs come back from out/"}},
		{"unknown key", map[string]string{"job.toml": "program = \"run\"\nprogramme = \"x\"\n", "run*": jobScript}, [2]string{}, []string{"job.toml:2", "programme"}},
		{"bad expression", map[string]string{"job.toml": "program = \"run\"\nrequirement = 'cpus >>= 2'\n", "run*": jobScript}, [2]string{}, []string{"job.toml:2", "requirement"}},
		{"missing program", map[string]string{"job.toml": "program = \"bin/x\"\n"}, [2]string{}, []string{"job.toml: program bin/x: not found in the job dir"}},
		{"not executable", map[string]string{"job.toml": "program = \"run\"\n", "run": jobScript}, [2]string{}, []string{"program run: not executable"}},
		{"input missing", map[string]string{"job.toml": "program = \"run\"\ninputs = [\"in-${INDEX}\"]\ncount = 2\n", "run*": jobScript, "in-0": "x"}, [2]string{}, []string{"input in-1: not found in the job dir"}},
		{"input escaping", map[string]string{"job.toml": "program = \"run\"\ninputs = [\"../x\"]\n", "run*": jobScript}, [2]string{}, []string{"job.toml:2", "inputs"}},
		{"symlinked input escaping", map[string]string{"job.toml": "program = \"run\"\ninputs = [\"data\"]\n", "run*": jobScript},
			[2]string{"data", filepath.Join(outside, "secret")}, []string{"input data:", "outside the job dir"}},
		{"symlinked dir escaping", map[string]string{"job.toml": "program = \"run\"\ninputs = [\"d/secret\"]\n", "run*": jobScript},
			[2]string{"d", outside}, []string{"input d/secret:", "outside the job dir"}},
		{"symlinked program escaping", map[string]string{"job.toml": "program = \"bin/sh\"\n"},
			[2]string{"bin", "/bin"}, []string{"program bin/sh:", "outside the job dir"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := jobDir(t, tc.files)
			if tc.link[0] != "" {
				if err := os.Symlink(tc.link[1], filepath.Join(dir, tc.link[0])); err != nil {
					t.Fatal(err)
				}
			}
			m := newJobManager()
			c := New(m.dial(), nil)
			defer c.Close()
			_, err := c.SubmitJobFile(context.Background(), filepath.Join(dir, "job.toml"), SubmitOptions{})
			var fe *JobFileError
			if err == nil || !errors.As(err, &fe) {
				t.Fatalf("err %v", err)
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("%q does not say %q", err, w)
				}
			}
			if len(m.reqs) != 0 {
				t.Fatalf("%d requests sent", len(m.reqs))
			}
		})
	}
}

// FetchResults writes each result whole, outputs under out/, and the
// exit status; a result path leaving the directory is refused.
func TestFetchResults(t *testing.T) {
	m := newJobManager()
	big := bytes.Repeat([]byte("x"), JobPiece+5)
	m.results = map[string][]byte{"stdout": []byte("hello\n"), "stderr": nil, "sub/r.txt": big}
	file := func(p string, b []byte) *wire.JobFile {
		s := sha256.Sum256(b)
		return &wire.JobFile{Path: p, Size: int64(len(b)), Sha256: hex.EncodeToString(s[:])}
	}
	info := &wire.JobInfo{Id: "gm1.1[3]", Exit: "exit 0", Exited: true,
		Results: []*wire.JobFile{file("stdout", m.results["stdout"]), file("stderr", nil), file("sub/r.txt", big)}}
	c := New(m.dial(), nil)
	defer c.Close()
	dir := filepath.Join(t.TempDir(), "results", "3")
	got, err := c.FetchResults(context.Background(), info, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"stdout", "stderr", "out/sub/r.txt", "exit_status"}) {
		t.Fatalf("written %v", got)
	}
	for p, want := range map[string][]byte{"stdout": []byte("hello\n"), "stderr": {}, "out/sub/r.txt": big, "exit_status": []byte("exit 0\n")} {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil || !bytes.Equal(b, want) {
			t.Fatalf("%s: %d bytes, %v", p, len(b), err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 4 {
		t.Fatalf("%d entries (temporary files left?)", len(ents))
	}
	for _, p := range []string{"../evil", "/etc/passwd", "a/../../b"} {
		bad := &wire.JobInfo{Id: "x", Results: []*wire.JobFile{{Path: p}}}
		if _, err := c.FetchResults(context.Background(), bad, dir); err == nil {
			t.Fatalf("%s: taken", p)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "evil")); err == nil {
		t.Fatal("written outside")
	}
}

// WaitJobs polls until every job has ended (held counts), calling
// changed once per state change.
func TestWaitJobs(t *testing.T) {
	j := func(id string, s wire.JobState) *wire.JobInfo { return &wire.JobInfo{Id: id, State: s} }
	const (
		idle, running, done, held = wire.JobState_JOB_STATE_IDLE, wire.JobState_JOB_STATE_RUNNING, wire.JobState_JOB_STATE_COMPLETED, wire.JobState_JOB_STATE_HELD
	)
	m := newJobManager()
	m.lists = [][]*wire.JobInfo{
		{j("c[0]", idle), j("c[1]", idle)},
		{j("c[0]", running), j("c[1]", idle)},
		{j("c[0]", running), j("c[1]", held)},
		{j("c[0]", done), j("c[1]", held)},
	}
	c := New(m.dial(), nil)
	defer c.Close()
	var changes []string
	got, err := c.WaitJobs(context.Background(), []string{"c"}, time.Millisecond, func(in *wire.JobInfo) {
		changes = append(changes, in.Id+" "+in.State.String())
	})
	if err != nil || len(got) != 2 || got[0].State != done || got[1].State != held {
		t.Fatalf("%v %v", got, err)
	}
	if len(changes) != 5 {
		t.Fatalf("changes %v", changes)
	}
	// Until ctx ends: the jobs as last seen, and ctx's error.
	m.lists = [][]*wire.JobInfo{{j("c[0]", running)}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	got, err = c.WaitJobs(ctx, []string{"c"}, time.Millisecond, nil)
	if !errors.Is(err, context.DeadlineExceeded) || len(got) != 1 {
		t.Fatalf("%v %v", got, err)
	}
}
