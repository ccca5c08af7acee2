package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/jobs"
	"github.com/gridmgr/gridmgr/wire"
)

// JobPiece is the most bytes of a file sent or read in one job request
// (OP_BLOB, OP_GET): the manager's limit.
const JobPiece = 1 << 20

// The directories of a job's program in its instance: inputs are put
// under JobInDir, outputs read from under JobOutDir.
const (
	JobInDir  = "in"
	JobOutDir = "out"
)

// SubmitOptions say how SubmitJobFile submits.
type SubmitOptions struct {
	// User is the stated user ("": the manager's account of the client).
	User string
	// RequestID names the submit ("": NewRequestID()); the same for every
	// retry, so that a retried submit is taken once.
	RequestID string
	// Now is the submission time relative begin and deadline count from
	// (zero: time.Now()).
	Now time.Time
	// Progress, if set, sees what is being done, in words.
	Progress func(string)
	// Redial, if set, reaches the manager again after the connection was
	// lost (a Client is one session): the submit is then sent again on the
	// new session with the same request id. Without it a lost connection
	// ends SubmitJobFile with an error naming the request id.
	Redial func(ctx context.Context) (*Client, error)
}

// Submitted is what a submit queued.
type Submitted struct {
	Cluster   string
	IDs       []string // CLUSTER[INDEX], one per index
	Duplicate bool     // a retry of a submit already taken: nothing new queued
	Count     int
	RequestID string
	Message   string // the manager's, in words
}

// JobFileError is what is wrong with a job file or what it names, found
// before anything was sent.
type JobFileError struct {
	File string
	Err  error
}

func (e *JobFileError) Error() string { return e.Err.Error() }
func (e *JobFileError) Unwrap() error { return e.Err }

// blob is a file to upload: the program's bundle or an input.
type blob struct {
	sha  string
	size int64
	open func() (io.ReadSeekCloser, error)
	what string
}

// SubmitJobFile reads the job file file (docs/jobs.md), packs its program,
// uploads the bundle and the inputs the manager does not hold whole and
// submits one job per index. Nothing outside the job file's directory is
// read: the program and the inputs are read through an os.Root of it. An
// error of the file or of what it names is a *JobFileError, found before
// anything is sent.
func (c *Client) SubmitJobFile(ctx context.Context, file string, o SubmitOptions) (*Submitted, error) {
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	progress := func(format string, a ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(format, a...))
		}
	}
	specs, blobs, cleanup, err := prepareJobFile(file, now, c.readsZstd())
	if err != nil {
		return nil, err
	}
	defer cleanup()
	for _, b := range blobs {
		if err := c.uploadBlob(ctx, b, progress); err != nil {
			return nil, err
		}
	}
	req := &wire.JobRequest{Op: wire.JobRequest_OP_SUBMIT, RequestId: o.RequestID, User: o.User, Jobs: specs}
	if req.RequestId == "" {
		req.RequestId = NewRequestID()
	}
	progress("submitting %d job(s) of %s (request %s)", len(specs), file, req.RequestId)
	rep, err := c.submitRetrying(ctx, req, file, o)
	if err != nil {
		return nil, err
	}
	sub := &Submitted{Cluster: rep.Cluster, Duplicate: rep.Duplicate, Count: len(specs), RequestID: req.RequestId, Message: rep.Message}
	for i := range specs {
		sub.IDs = append(sub.IDs, JobID(rep.Cluster, i, len(specs)))
	}
	return sub, nil
}

// submitRetrying sends a submit (of file) and, when the connection is
// lost before its answer, sends it again with the same request id on a
// new session (o.Redial): the manager takes it once.
func (c *Client) submitRetrying(ctx context.Context, req *wire.JobRequest, file string, o SubmitOptions) (*wire.JobReply, error) {
	progress := func(format string, a ...any) {
		if o.Progress != nil {
			o.Progress(fmt.Sprintf(format, a...))
		}
	}
	cl := c
	for {
		rep, err := cl.jobRequest(ctx, req)
		if err == nil {
			if cl != c {
				_ = cl.Close()
			}
			return rep, nil
		}
		if !retryable(err) || ctx.Err() != nil {
			if cl != c {
				_ = cl.Close()
			}
			if retryable(err) || errors.Is(err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("submitting %s: %w (it may have been taken: submit again with request id %s, which is taken once)", file, err, req.RequestId)
			}
			return nil, fmt.Errorf("submitting %s: %w", file, err)
		}
		// The request or its answer was lost: send it again, with the
		// same request id, on a new session.
		if o.Redial == nil {
			return nil, fmt.Errorf("submitting %s: %w (it may have been taken: submit again with request id %s, which is taken once)", file, err, req.RequestId)
		}
		progress("the connection was lost (%v); submitting again with the same request id", err)
		if cl != c {
			_ = cl.Close()
		}
		for {
			cl, err = o.Redial(ctx)
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("submitting %s: the connection was lost and the manager could not be reached again: %w (submit again with request id %s, which is taken once)", file, err, req.RequestId)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// JobID is the id of index i of cluster with count jobs: CLUSTER for a
// single job, CLUSTER[i] for an array.
func JobID(cluster string, i, count int) string {
	if count <= 1 {
		return cluster
	}
	return cluster + "[" + strconv.Itoa(i) + "]"
}

// prepareJobFile reads and checks the job file, packs its program and
// lists the inputs: the specs to submit and the files to upload first.
func prepareJobFile(file string, now time.Time, zstd bool) (specs []*wire.JobSpec, blobs []*blob, cleanup func(), err error) {
	cleanup = func() {}
	bad := func(format string, a ...any) ([]*wire.JobSpec, []*blob, func(), error) {
		return nil, nil, cleanup, &JobFileError{File: file, Err: fmt.Errorf("%s: "+format, append([]any{file}, a...)...)}
	}
	f, err := os.Open(file)
	if err != nil {
		return bad("%v", plainFileErr(err))
	}
	data, err := io.ReadAll(io.LimitReader(f, jobs.MaxFileSize+1))
	f.Close()
	if err != nil {
		return bad("%v", plainFileErr(err))
	}
	if len(data) > jobs.MaxFileSize {
		return bad("more than %d bytes: a job file is at most %d KiB", jobs.MaxFileSize, jobs.MaxFileSize>>10)
	}
	d, err := jobs.ParseAt(file, data, now)
	if err != nil {
		return nil, nil, cleanup, &JobFileError{File: file, Err: err}
	}
	d.Resolve(now)
	dir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return bad("%v", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return bad("the job dir: %v", plainFileErr(err))
	}
	defer root.Close()
	p := newPacker()
	p.zstd = zstd
	specs, err = p.specs(root, dir, d)
	if err != nil {
		p.cleanup()
		return bad("%v", err)
	}
	return specs, p.blobs, p.cleanup, nil
}

// packer turns descriptions into specs and the files to upload, each
// program packed and each file listed once.
type packer struct {
	blobs    []*blob
	seen     map[string]bool // sha256 of the blobs listed
	programs map[string]packed
	cleanups []func()
	zstd     bool // pack programs with Zstandard (the manager reads it)
}

type packed struct {
	app    string
	bundle *blob
}

func newPacker() *packer { return &packer{seen: map[string]bool{}, programs: map[string]packed{}} }

func (p *packer) cleanup() {
	for _, f := range p.cleanups {
		f()
	}
	p.cleanups = nil
}

func (p *packer) add(b *blob) {
	if !p.seen[b.sha] {
		p.seen[b.sha] = true
		p.blobs = append(p.blobs, b)
	}
}

// specs are the specs of d, one per index; dir is d's directory (root
// opens it); its program is packed once for all the descriptions p
// sees that name the same program the same way.
func (p *packer) specs(root *os.Root, dir string, d *jobs.Description) ([]*wire.JobSpec, error) {
	key := strings.Join([]string{dir, d.Program, d.Executable, d.Network}, "\x00")
	prog, ok := p.programs[key]
	if !ok {
		app, bundle, cleanup, err := jobProgram(root, dir, d, p.zstd)
		if err != nil {
			return nil, err
		}
		p.cleanups = append(p.cleanups, cleanup)
		prog = packed{app: app, bundle: bundle}
		p.programs[key] = prog
	}
	p.add(prog.bundle)
	app, bundle := prog.app, prog.bundle
	var specs []*wire.JobSpec
	hashes := map[string]*wire.JobFile{} // input path → its file, once
	for i := 0; i < d.Count; i++ {
		x := d.Expand(i)
		spec := &wire.JobSpec{
			Name: d.Name, Index: uint32(i), Count: uint32(d.Count), BundleSha256: bundle.sha, App: app,
			Args: x.Args, Env: x.Env, Cpus: d.CPUs, Mem: d.Memory, Disk: d.Disk,
			RuntimeMs: uint64(d.Runtime / time.Millisecond), Requirement: d.Requirement, Rank: d.Rank,
			Outputs: x.Outputs, MaxRetries: uint32(d.MaxRetries), HoldOnFailure: d.OnFailure == jobs.OnFailureHold,
			Priority: int32(d.Priority), LostAfterMs: uint64(d.LostAfter / time.Millisecond),
			OutputDir: filepath.Join(dir, filepath.FromSlash(x.ResultDir)), InDir: JobInDir, OutDir: JobOutDir,
		}
		for _, k := range slices.Sorted(maps.Keys(d.Tokens)) {
			spec.Tokens = append(spec.Tokens, &wire.Amount{Kind: k, N: d.Tokens[k]})
		}
		for _, code := range d.SuccessExitCodes {
			spec.SuccessExitCodes = append(spec.SuccessExitCodes, int32(code))
		}
		if !d.Begin.IsZero() {
			spec.BeginUnixMs = d.Begin.UnixMilli()
		}
		if !d.Deadline.IsZero() {
			spec.DeadlineUnixMs = d.Deadline.UnixMilli()
		}
		for _, in := range x.Inputs {
			files, err := inputFiles(root, in, hashes)
			if err != nil {
				return nil, fmt.Errorf("input %s: %v", in, err)
			}
			for _, jf := range files {
				spec.Inputs = append(spec.Inputs, jf)
				name := jf.Path
				p.add(&blob{sha: jf.Sha256, size: jf.Size, what: "input " + name,
					open: func() (io.ReadSeekCloser, error) { return root2Open(dir, name) }})
			}
		}
		if err := jobs.CheckSpec(spec); err != nil {
			return nil, fmt.Errorf("index %d: %v", i, err)
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// root2Open opens name under dir through an os.Root of its own (an
// upload happens after the job dir's Root is closed).
func root2Open(dir, name string) (io.ReadSeekCloser, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Open(name)
}

// plainFileErr drops the Go operation from a file error: "open x: no
// such file" is "x: no such file or directory".
func plainFileErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %v", pe.Path, pe.Err)
	}
	return err
}

// jobProgram is the job's program as a bundle: its application name and
// the blob to upload. A plain program is packed into a temporary file,
// which cleanup removes.
func jobProgram(root *os.Root, dir string, d *jobs.Description, zstd bool) (app string, b *blob, cleanup func(), err error) {
	cleanup = func() {}
	fi, err := root.Lstat(d.Program)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil, cleanup, fmt.Errorf("program %s: not found in the job dir %s", d.Program, dir)
		}
		return "", nil, cleanup, fmt.Errorf("program %s: %v (it must be in the job dir %s)", d.Program, errText(err), dir)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return "", nil, cleanup, fmt.Errorf("program %s: a symbolic link: name the file or directory itself", d.Program)
	}
	if strings.HasSuffix(d.Program, ".gapp") {
		if !fi.Mode().IsRegular() {
			return "", nil, cleanup, fmt.Errorf("program %s: not a regular file (a .gapp is an application bundle)", d.Program)
		}
		f, err := root.Open(d.Program)
		if err != nil {
			return "", nil, cleanup, fmt.Errorf("program %s: %v", d.Program, errText(err))
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return "", nil, cleanup, err
		}
		bun, err := deploy.Open(f, st.Size(), deploy.Limits{})
		if err != nil {
			return "", nil, cleanup, fmt.Errorf("program %s: not a usable bundle: %v", d.Program, err)
		}
		// what the job asks of the bundle, said now rather than at its
		// first start on some host
		m := bun.Manifest
		switch {
		case len(d.Args) > 0 && !m.Run.Args:
			return "", nil, cleanup, fmt.Errorf("program %s: the job has args, but the bundle's app.toml does not let a start add them ([run] args = true)", d.Program)
		case len(d.Env) > 0 && !m.Run.Env:
			return "", nil, cleanup, fmt.Errorf("program %s: the job has env, but the bundle's app.toml does not let a start add it ([run] env = true)", d.Program)
		case len(d.Inputs) > 0 && !slices.Contains(m.Data.In, JobInDir):
			return "", nil, cleanup, fmt.Errorf("program %s: the job has inputs, which go into %s/, but the bundle's app.toml does not name it in [data] in", d.Program, JobInDir)
		case len(d.Outputs) > 0 && !slices.Contains(m.Data.Out, JobOutDir):
			return "", nil, cleanup, fmt.Errorf("program %s: the job's outputs come back from %s/, which the bundle's app.toml does not name in [data] out", d.Program, JobOutDir)
		}
		if !zstd && bun.Zstd() {
			// The manager reads no Zstandard (an older version): it gets
			// the bundle deflated, as a client of its version packs it.
			var buf bytes.Buffer
			if err := bun.WriteDeflated(&buf); err != nil {
				return "", nil, cleanup, fmt.Errorf("program %s: the manager reads no Zstandard, and deflating the bundle failed: %v", d.Program, err)
			}
			b, cleanup, err := tempBlob(buf.Bytes(), "program "+d.Program+" (deflated)")
			return bun.Manifest.Name, b, cleanup, err
		}
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, st.Size())); err != nil {
			return "", nil, cleanup, fmt.Errorf("program %s: %v", d.Program, errText(err))
		}
		prog := d.Program
		return bun.Manifest.Name, &blob{sha: hex.EncodeToString(h.Sum(nil)), size: st.Size(), what: "program " + prog,
			open: func() (io.ReadSeekCloser, error) { return root2Open(dir, prog) }}, cleanup, nil
	}
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		return "", nil, cleanup, fmt.Errorf("program %s: not a file or a directory", d.Program)
	}
	if fi.IsDir() && d.Executable == "" {
		return "", nil, cleanup, fmt.Errorf("program %s is a directory: name the file in it to run with executable", d.Program)
	}
	if fi.Mode().IsRegular() && d.Executable != "" {
		return "", nil, cleanup, fmt.Errorf("executable %s: only with a directory program (%s is a file)", d.Executable, d.Program)
	}
	if fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 == 0 {
		return "", nil, cleanup, fmt.Errorf("program %s: not executable (chmod +x it)", d.Program)
	}
	data, err := deploy.PackProgram(deploy.ProgramBundle{Name: d.Name, Source: filepath.Join(dir, filepath.FromSlash(d.Program)),
		Executable: d.Executable, Network: d.Network, InDir: JobInDir, OutDir: JobOutDir, Zstd: zstd})
	if err != nil {
		return "", nil, cleanup, err
	}
	b, cleanup, err = tempBlob(data, "program "+d.Program)
	return d.Name, b, cleanup, err
}

// tempBlob writes a bundle made for a job into a temporary file, which
// cleanup removes, and returns it as the blob to upload.
func tempBlob(data []byte, what string) (*blob, func(), error) {
	tmp, err := os.CreateTemp("", "gridmgr-job-*.gapp")
	if err != nil {
		return nil, func() {}, err
	}
	cleanup := func() { _ = os.Remove(tmp.Name()) }
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		cleanup()
		return nil, func() {}, err
	}
	if err := tmp.Close(); err != nil {
		cleanup()
		return nil, func() {}, err
	}
	sum := sha256.Sum256(data)
	name := tmp.Name()
	return &blob{sha: hex.EncodeToString(sum[:]), size: int64(len(data)), what: what,
		open: func() (io.ReadSeekCloser, error) { return os.Open(name) }}, cleanup, nil
}

// errText is err's text without the operation and the path, which the
// caller names.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		if strings.Contains(pe.Err.Error(), "escapes") {
			return "it leads outside the job dir (a symbolic link?)"
		}
		return pe.Err.Error()
	}
	return err.Error()
}

// inputFiles lists the input in (a file, or a directory's files) through
// root, each with its sha256, size and mode; hashes keeps what was read.
func inputFiles(root *os.Root, in string, hashes map[string]*wire.JobFile) ([]*wire.JobFile, error) {
	fi, err := root.Stat(in)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errors.New("not found in the job dir")
		}
		return nil, errors.New(errText(err))
	}
	var names []string
	switch {
	case fi.Mode().IsRegular():
		names = []string{in}
	case fi.IsDir():
		sub, err := root.OpenRoot(in)
		if err != nil {
			return nil, errors.New(errText(err))
		}
		defer sub.Close()
		err = fs.WalkDir(sub.FS(), ".", func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch t := e.Type(); {
			case t.IsDir():
			case t.IsRegular():
				names = append(names, path.Join(in, p))
			case t&fs.ModeSymlink != 0:
				return fmt.Errorf("%s is a symbolic link: an input holds files and directories only", path.Join(in, p))
			default:
				return fmt.Errorf("%s is not a regular file", path.Join(in, p))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("not a regular file or a directory")
	}
	var out []*wire.JobFile
	for _, n := range names {
		if jf := hashes[n]; jf != nil {
			out = append(out, jf)
			continue
		}
		f, err := root.Open(n)
		if err != nil {
			return nil, fmt.Errorf("%s: %s", n, errText(err))
		}
		st, err := f.Stat()
		if err == nil && !st.Mode().IsRegular() {
			err = errors.New("not a regular file")
		}
		h := sha256.New()
		var size int64
		if err == nil {
			size, err = io.Copy(h, f)
		}
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %s", n, errText(err))
		}
		jf := &wire.JobFile{Path: n, Sha256: hex.EncodeToString(h.Sum(nil)), Size: size, Mode: uint32(st.Mode().Perm())}
		if err := jobs.CheckPath(n); err != nil {
			return nil, err
		}
		hashes[n] = jf
		out = append(out, jf)
	}
	return out, nil
}

// uploadBlob sends b to the manager in pieces of at most JobPiece bytes,
// from what it holds of it already.
func (c *Client) uploadBlob(ctx context.Context, b *blob, progress func(string, ...any)) error {
	ask := func(off int64, data []byte) (int64, error) {
		rep, err := c.jobRequest(ctx, &wire.JobRequest{Op: wire.JobRequest_OP_BLOB, Sha256: b.sha, Size: b.size, Offset: off, Data: data})
		if err != nil {
			return 0, fmt.Errorf("sending %s: %w", b.what, err)
		}
		return rep.Offset, nil
	}
	have, err := ask(0, nil)
	if err != nil {
		return err
	}
	if have >= b.size {
		return nil
	}
	if have > 0 {
		progress("%s: the manager has %d of %d bytes; sending the rest", b.what, have, b.size)
	} else {
		progress("sending %s (%d bytes)", b.what, b.size)
	}
	f, err := b.open()
	if err != nil {
		return fmt.Errorf("%s: %s", b.what, errText(err))
	}
	defer f.Close()
	buf := make([]byte, JobPiece)
	for have < b.size {
		if have < 0 {
			return fmt.Errorf("sending %s: the manager says it holds %d bytes", b.what, have)
		}
		if _, err := f.Seek(have, io.SeekStart); err != nil {
			return fmt.Errorf("%s: %v", b.what, err)
		}
		n, err := io.ReadFull(f, buf[:min(int64(JobPiece), b.size-have)])
		if err != nil {
			return fmt.Errorf("%s: %v (did it change since it was read?)", b.what, err)
		}
		next, err := ask(have, buf[:n])
		if err != nil {
			return err
		}
		if next <= have {
			return fmt.Errorf("sending %s: the manager took nothing of the piece at offset %d", b.what, have)
		}
		have = next
	}
	return nil
}

// jobRequest sends a job request and returns its reply.
func (c *Client) jobRequest(ctx context.Context, req *wire.JobRequest) (*wire.JobReply, error) {
	return ask(ctx, c, "job", &wire.Envelope{Body: &wire.Envelope_JobRequest{JobRequest: req}}, (*wire.Envelope).GetJobReply)
}

// JobFilter says which jobs Jobs lists.
type JobFilter struct {
	IDs   []string // CLUSTER or CLUSTER[INDEX]; none: by the flags below
	All   bool     // every user's jobs
	User  string   // this user's jobs
	Ended bool     // also completed, failed and removed ones
	Limit int      // most jobs (0: the manager's limit)
}

// Jobs lists jobs of the manager's queue: f.IDs, or without them the
// client's own (All: everyone's; User: one user's).
func (c *Client) Jobs(ctx context.Context, f JobFilter) (*wire.JobReply, error) {
	return c.jobRequest(ctx, &wire.JobRequest{Op: wire.JobRequest_OP_LIST, Ids: f.IDs, All: f.All, ForUser: f.User,
		Ended: f.Ended, Limit: uint32(max(f.Limit, 0))})
}

// JobLog is each job's history (JobInfo.log).
func (c *Client) JobLog(ctx context.Context, ids []string) (*wire.JobReply, error) {
	return c.jobRequest(ctx, &wire.JobRequest{Op: wire.JobRequest_OP_LOG, Ids: ids})
}

// HoldJobs holds jobs: they wait for UnholdJobs (one running is stopped).
func (c *Client) HoldJobs(ctx context.Context, ids []string, reason string) (*wire.JobReply, error) {
	return c.jobRequest(ctx, &wire.JobRequest{Op: wire.JobRequest_OP_HOLD, Ids: ids, Reason: reason})
}

// UnholdJobs lets held jobs run again.
func (c *Client) UnholdJobs(ctx context.Context, ids []string) (*wire.JobReply, error) {
	return c.jobRequest(ctx, &wire.JobRequest{Op: wire.JobRequest_OP_UNHOLD, Ids: ids})
}

// RemoveJobs removes jobs from the queue.
func (c *Client) RemoveJobs(ctx context.Context, ids []string) (*wire.JobReply, error) {
	return c.jobRequest(ctx, &wire.JobRequest{Op: wire.JobRequest_OP_REMOVE, Ids: ids})
}

// WhyJob asks the grid now, with explain, what job id asks: the reply's
// why is the grid's answer and jobs the job.
func (c *Client) WhyJob(ctx context.Context, id string) (*wire.JobReply, error) {
	return c.jobRequest(ctx, &wire.JobRequest{Op: wire.JobRequest_OP_WHY, Ids: []string{id}})
}

// ExitStatusFile is the file FetchResults writes the job's exit status
// to, beside its stdout and stderr.
const ExitStatusFile = "exit_status"

// FetchResults copies the results of the job info (info.Results: stdout
// and stderr into dir, its outputs under dir/out/) from the manager, and
// writes dir/exit_status. dir is made (0755) if missing; each file is
// written under a temporary name then renamed, so a reader never sees
// half of one. A result path that is absolute or leaves its directory is
// refused. It returns the paths written, relative to dir.
func (c *Client) FetchResults(ctx context.Context, info *wire.JobInfo, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var written []string
	for _, r := range info.Results {
		if err := jobs.CheckPath(r.Path); err != nil {
			return written, fmt.Errorf("job %s: result %s: %v", info.Id, r.Path, err)
		}
		local := r.Path
		if r.Path != "stdout" && r.Path != "stderr" {
			local = path.Join(JobOutDir, r.Path)
		}
		if err := c.fetchResult(ctx, root, info.Id, r, local); err != nil {
			return written, fmt.Errorf("job %s: result %s: %w", info.Id, r.Path, err)
		}
		written = append(written, local)
	}
	status := info.Exit
	if status == "" && info.Exited {
		status = fmt.Sprintf("exit %d", info.ExitCode)
	}
	if err := writeRooted(root, ExitStatusFile, func(w io.Writer) error {
		_, err := fmt.Fprintln(w, status)
		return err
	}); err != nil {
		return written, fmt.Errorf("job %s: %s: %w", info.Id, ExitStatusFile, err)
	}
	return append(written, ExitStatusFile), nil
}

func (c *Client) fetchResult(ctx context.Context, root *os.Root, id string, r *wire.JobFile, local string) error {
	if d := path.Dir(local); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return writeRooted(root, local, func(w io.Writer) error {
		h := sha256.New()
		var off int64
		for {
			rep, err := c.jobRequest(ctx, &wire.JobRequest{Op: wire.JobRequest_OP_GET, Ids: []string{id}, Path: r.Path, Offset: off, Limit: JobPiece})
			if err != nil {
				return err
			}
			if _, err := w.Write(rep.Data); err != nil {
				return err
			}
			h.Write(rep.Data)
			off += int64(len(rep.Data))
			if len(rep.Data) == 0 || off >= rep.Offset {
				break
			}
		}
		if r.Sha256 != "" && r.Size == off && hex.EncodeToString(h.Sum(nil)) != r.Sha256 {
			return fmt.Errorf("its bytes are not those the manager listed (sha256 differs)")
		}
		if off != r.Size {
			return fmt.Errorf("read %d bytes; the manager listed %d", off, r.Size)
		}
		return nil
	})
}

// writeRooted writes name under root: to a temporary name beside it,
// then renamed over it.
func writeRooted(root *os.Root, name string, write func(io.Writer) error) error {
	tmp := path.Join(path.Dir(name), "."+path.Base(name)+".part-"+NewRequestID()[:8])
	f, err := root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}

// JobEnded says whether a job is in a state it leaves only by a user's
// act: completed, failed, removed or held.
func JobEnded(s wire.JobState) bool {
	switch s {
	case wire.JobState_JOB_STATE_COMPLETED, wire.JobState_JOB_STATE_FAILED, wire.JobState_JOB_STATE_REMOVED, wire.JobState_JOB_STATE_HELD:
		return true
	}
	return false
}

// WaitJobs polls the jobs ids (CLUSTER names each job of a cluster) every
// every (0: a second) until each is completed, failed, removed or held,
// calling changed (if set) with each job whose state changed, the first
// time too. It returns the jobs as last seen, also with an error (ctx's
// end, say).
func (c *Client) WaitJobs(ctx context.Context, ids []string, every time.Duration, changed func(*wire.JobInfo)) ([]*wire.JobInfo, error) {
	if every <= 0 {
		every = time.Second
	}
	last := map[string]wire.JobState{}
	var seen []*wire.JobInfo
	for {
		rep, err := c.Jobs(ctx, JobFilter{IDs: ids, Ended: true})
		if err != nil {
			if ctx.Err() != nil { // the wait ran out, not the session
				return seen, ctx.Err()
			}
			return seen, err
		}
		seen = rep.Jobs
		done := true
		for _, in := range rep.Jobs {
			if s, ok := last[in.Id]; !ok || s != in.State {
				last[in.Id] = in.State
				if changed != nil {
					changed(in)
				}
			}
			// a workflow's job that will not run (a node before it
			// failed) waits for nothing but a rerun
			done = done && (JobEnded(in.State) || in.Blocked)
		}
		if done && rep.More == 0 {
			return rep.Jobs, nil
		}
		select {
		case <-ctx.Done():
			return rep.Jobs, ctx.Err()
		case <-time.After(every):
		}
	}
}
