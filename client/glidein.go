package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

// A glide-in launch (docs/glidein.md) is a job cluster in the launching
// manager's queue: one job per glide-in, spread one per manager, whose
// program is the gridmgr executable and whose args run a manager from a
// properties file made here for its index. The queue's matching,
// reservation, staging, polling, loss and removal apply unchanged;
// removing the cluster removes the glide-ins.

// GlideinJobPrefix starts the job name of a glide-in cluster:
// "glidein-NAME".
const GlideinJobPrefix = "glidein-"

// GlideinAttr and GlideinOwnerAttr are the attributes a glide-in
// manager carries (and its launch jobs' request.attrs): jobs name the
// glide-ins with requirement = 'attrs.glidein == "NAME"'.
const (
	GlideinAttr      = "glidein"
	GlideinOwnerAttr = "glidein_owner"
)

// GlideinSpec says what LaunchGlideins launches.
type GlideinSpec struct {
	Name  string // the group's name: its managers are NAME-0 … NAME-(Count-1)
	Count int
	CPUs  int64 // each reserves and offers
	Mem   int64 // bytes, each reserves and offers
	// Duration is each glide-in's lease (the job's runtime): it is gone
	// by then.
	Duration time.Duration
	Begin    time.Time // not before (zero: now)
	// Requirement is what a host must offer besides the amounts (CEL).
	// A manager that is itself a glide-in never qualifies.
	Requirement string
	// Idle: a glide-in with nothing to do this long leaves (0: 20m).
	Idle time.Duration
	// RetireAt: from then a glide-in takes no new reservation (zero: the
	// lease's end less max(5m, a tenth of Duration), at most half of it).
	RetireAt time.Time
	// Listen is each glide-in's listen multiaddr ("": /ip4/0.0.0.0/tcp/0,
	// or /ip4/127.0.0.1/tcp/0 when the launcher listens on loopback only).
	Listen string
	// Heartbeat and Misses are the glide-ins' heartbeat settings (0: 1s
	// and 3, the defaults; use the launcher's).
	Heartbeat time.Duration
	Misses    int
	// Private gives the glide-ins and the launcher a fresh pre-shared
	// key (a private network opened on the launcher): no one else's
	// traffic reaches them.
	Private bool
	User    string // the user to launch as ("": peer:<this client's peer id>)
	// Redial, if set, reaches the launcher again after the connection
	// was lost: the launch is sent again with the same request id, and
	// taken once (as SubmitOptions.Redial).
	Redial func(ctx context.Context) (*Client, error)
	// Program is the gridmgr executable to send ("": this one).
	Program   string
	RequestID string
	Now       time.Time
	Progress  func(string)
}

// GlideinRetireAt is the default retire time of a glide-in whose lease
// starts at start and lasts d: max(5 min, d/10) before its end, but not
// before half of it.
func GlideinRetireAt(start time.Time, d time.Duration) time.Time {
	margin := min(max(5*time.Minute, d/10), d/2)
	return start.Add(d - margin)
}

// GlideinNetwork is the name of the private network of glide-ins NAME
// at their launcher.
func GlideinNetwork(name string) string { return GlideinJobPrefix + name }

// LaunchGlideins submits a glide-in cluster to the manager c is connected
// to, the launcher: it checks s, writes each glide-in's properties file
// (checked by config.Parse as the glide-in will read it), packs the
// gridmgr executable as the job's program and submits the cluster, taken
// once under s.RequestID.
func (c *Client) LaunchGlideins(ctx context.Context, s GlideinSpec) (*Submitted, error) {
	now := s.Now
	if now.IsZero() {
		now = time.Now()
	}
	if msg := config.CheckGlideinName(s.Name); msg != "" {
		return nil, &JobFileError{Err: errors.New(msg)}
	}
	switch {
	case s.Count < 1 || s.Count > 1000:
		return nil, &JobFileError{Err: fmt.Errorf("count %d: launch 1 to 1000 glide-ins", s.Count)}
	case s.CPUs < 1:
		return nil, &JobFileError{Err: fmt.Errorf("cpus %d: at least 1", s.CPUs)}
	case s.Mem < 64<<20:
		return nil, &JobFileError{Err: fmt.Errorf("memory %d bytes: at least 64MiB (a glide-in is a manager)", s.Mem)}
	case s.Duration < time.Minute || s.Duration > 7*24*time.Hour:
		return nil, &JobFileError{Err: fmt.Errorf("duration %s: 1m to 7d", text.FormatDuration(s.Duration))}
	}
	st, err := c.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("asking the launcher who it is: %w", err)
	}
	owner := s.User
	if owner == "" {
		owner = "peer:" + c.Self()
	}
	start := now
	if s.Begin.After(now) {
		start = s.Begin
	}
	retire := s.RetireAt
	if retire.IsZero() {
		retire = GlideinRetireAt(start, s.Duration)
	}
	superiors, listen := launcherAddrs(st.Addrs, st.Peer)
	if s.Listen != "" {
		listen = s.Listen
	}
	var psk []byte
	if s.Private {
		pn, err := c.OpenPrivateNetwork(ctx, GlideinNetwork(s.Name))
		if err != nil {
			return nil, fmt.Errorf("opening a private network for the glide-ins: %w", err)
		}
		psk = pn.Psk
		superiors, _ = launcherAddrs(pn.Addrs, st.Peer)
	}
	if len(superiors) == 0 {
		return nil, fmt.Errorf("the launcher %s lists no address the glide-ins could reach", st.Name)
	}

	dir, err := os.MkdirTemp("", "gridmgr-glidein-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	prog := s.Program
	if prog == "" {
		if prog, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding the gridmgr executable to send: %w", err)
		}
	}
	if err := linkOrCopy(prog, filepath.Join(dir, "gridmgr")); err != nil {
		return nil, fmt.Errorf("the gridmgr executable to send: %w", err)
	}
	for i := 0; i < s.Count; i++ {
		sub := filepath.Join(dir, "glidein-"+strconv.Itoa(i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			return nil, err
		}
		props := GlideinProperties(GlideinProps{Name: s.Name, Index: i, Launcher: st.Peer, Owner: owner, Client: c.Self(),
			Superiors: superiors, Listen: listen, CPUs: s.CPUs, Mem: s.Mem, Idle: s.Idle, RetireAt: retire,
			Heartbeat: s.Heartbeat, Misses: s.Misses, Private: psk != nil})
		if _, err := config.Parse(filepath.Join(sub, "glidein.toml"), []byte(props), "glidein"); err != nil {
			return nil, fmt.Errorf("the glide-in's properties file does not parse (a bug): %w\n%s", err, props)
		}
		if err := os.WriteFile(filepath.Join(sub, "glidein.toml"), []byte(props), 0o644); err != nil {
			return nil, err
		}
		if psk != nil {
			if err := os.WriteFile(filepath.Join(sub, GlideinKeyFile), psk, 0o600); err != nil {
				return nil, err
			}
		}
	}
	req := "!has(attrs." + GlideinAttr + ")"
	if s.Requirement != "" {
		req += " && (" + s.Requirement + ")"
	}
	var job strings.Builder
	fmt.Fprintf(&job, "name = %s\nprogram = \"gridmgr\"\n", strconv.Quote(GlideinJobPrefix+s.Name))
	fmt.Fprintf(&job, "args = [\"run\", \"-c\", \"%s/glidein-${INDEX}/glidein.toml\"]\n", JobInDir)
	fmt.Fprintf(&job, "inputs = [\"glidein-${INDEX}\"]\ncount = %d\ncpus = %d\nmemory = \"%dB\"\nruntime = %q\n", s.Count, s.CPUs, s.Mem, durationTOML(s.Duration))
	fmt.Fprintf(&job, "requirement = %s\n", tomlLiteral(req))
	fmt.Fprintf(&job, "output_dir = %q\n", "results")
	if s.Begin.After(now) {
		fmt.Fprintf(&job, "begin = %s\n", s.Begin.UTC().Format(time.RFC3339))
	}
	jobFile := filepath.Join(dir, "glidein.toml")
	if err := os.WriteFile(jobFile, []byte(job.String()), 0o644); err != nil {
		return nil, err
	}
	specs, blobs, cleanup, err := prepareJobFile(jobFile, now, c.readsZstd())
	defer cleanup()
	if err != nil {
		return nil, err
	}
	for _, sp := range specs {
		sp.Spread = true
		sp.Attrs = map[string]string{GlideinAttr: s.Name, GlideinOwnerAttr: owner}
	}
	progress := func(format string, a ...any) {
		if s.Progress != nil {
			s.Progress(fmt.Sprintf(format, a...))
		}
	}
	for _, b := range blobs {
		if err := c.uploadBlob(ctx, b, progress); err != nil {
			return nil, err
		}
	}
	r := &wire.JobRequest{Op: wire.JobRequest_OP_SUBMIT, RequestId: s.RequestID, User: s.User, Jobs: specs}
	if r.RequestId == "" {
		r.RequestId = NewRequestID()
	}
	progress("submitting %d glide-in(s) %s (request %s)", len(specs), s.Name, r.RequestId)
	rep, err := c.submitRetrying(ctx, r, "the glide-ins "+s.Name, SubmitOptions{Progress: s.Progress, Redial: s.Redial})
	if err != nil {
		return nil, err
	}
	// The glide-ins serve owner: if the launcher knows this client by
	// another name (its [users]), no job of it would match them.
	if got, err := c.Jobs(ctx, JobFilter{IDs: []string{rep.Cluster}}); err == nil && len(got.Jobs) > 0 && got.Jobs[0].User != owner {
		_, _ = c.RemoveJobs(ctx, []string{rep.Cluster})
		return nil, &JobFileError{Err: fmt.Errorf("the launcher knows you as user %q, not %q: launch again with --user %s (the glide-ins of %s were removed)", got.Jobs[0].User, owner, got.Jobs[0].User, rep.Cluster)}
	}
	out := &Submitted{Cluster: rep.Cluster, Duplicate: rep.Duplicate, Count: len(specs), RequestID: r.RequestId, Message: rep.Message}
	for i := range specs {
		out.IDs = append(out.IDs, JobID(rep.Cluster, i, len(specs)))
	}
	return out, nil
}

// GlideinKeyFile is the private network's key beside a glide-in's
// properties file.
const GlideinKeyFile = "swarm.key"

// GlideinProps is what a glide-in's properties file says.
type GlideinProps struct {
	Name      string
	Index     int
	Launcher  string   // peer id
	Owner     string   // the user it serves
	Client    string   // the launching client's peer id: an admin of it
	Superiors []string // the launcher's full multiaddrs
	Listen    string
	CPUs, Mem int64
	Idle      time.Duration
	RetireAt  time.Time
	Heartbeat time.Duration
	Misses    int
	Private   bool // private_network_key = GlideinKeyFile
}

// GlideinProperties is the properties file of glide-in p.Index: a manager
// named NAME-INDEX under the launcher, in its instance's directory (its
// data dir is INSTANCE/state; the file is read from INSTANCE/in/…/),
// offering exactly what it reserved to the owner's jobs placed by the
// launcher only, with jobs, the web UI and /metrics off.
func GlideinProperties(p GlideinProps) string {
	q := strconv.Quote
	var b strings.Builder
	fmt.Fprintf(&b, "# A glide-in, written by gridmgr glidein (docs/glidein.md).\n")
	fmt.Fprintf(&b, "name = %s\ndata_dir = \"../../state\"\n", q(fmt.Sprintf("%s-%d", p.Name, p.Index)))
	fmt.Fprintf(&b, "listen = [%s]\n", q(p.Listen))
	sups := make([]string, len(p.Superiors))
	for i, s := range p.Superiors {
		sups[i] = q(s)
	}
	fmt.Fprintf(&b, "superiors = [%s]\n", strings.Join(sups, ", "))
	admins := []string{q(p.Launcher)}
	if p.Client != "" && p.Client != p.Launcher {
		admins = append(admins, q(p.Client))
	}
	fmt.Fprintf(&b, "admins = [%s]\n", strings.Join(admins, ", "))
	if p.Private {
		fmt.Fprintf(&b, "private_network_key = %q\n", GlideinKeyFile)
	}
	// Only the owner's requests are offered anything; only the launcher
	// (which reserves for the owner's jobs) may reserve.
	fmt.Fprintf(&b, "policy = %s\n", tomlLiteral("request.user == "+q(p.Owner)))
	if p.Heartbeat > 0 || p.Misses > 0 {
		b.WriteString("[heartbeat]\n")
		if p.Heartbeat > 0 {
			fmt.Fprintf(&b, "interval = %q\n", p.Heartbeat.String())
		}
		if p.Misses > 0 {
			fmt.Fprintf(&b, "misses = %d\n", p.Misses)
		}
	}
	fmt.Fprintf(&b, "[resources]\ncpus = %d\nmemory = %d\n", p.CPUs, p.Mem)
	fmt.Fprintf(&b, "[access]\ncpus = [%s]\nmem = [%s]\n", q("peer:"+p.Launcher), q("peer:"+p.Launcher))
	fmt.Fprintf(&b, "[jobs]\nenabled = false\n")
	fmt.Fprintf(&b, "[attributes]\n%s = %s\n%s = %s\n", GlideinAttr, q(p.Name), GlideinOwnerAttr, q(p.Owner))
	fmt.Fprintf(&b, "[glidein]\nname = %s\nlauncher = %s\nowner = %s\n", q(p.Name), q(p.Launcher), q(p.Owner))
	if p.Idle > 0 {
		fmt.Fprintf(&b, "idle = %q\n", p.Idle.String())
	}
	if !p.RetireAt.IsZero() {
		fmt.Fprintf(&b, "retire_at = %s\n", p.RetireAt.UTC().Format(time.RFC3339))
	}
	return b.String()
}

// launcherAddrs picks the launcher's addresses a glide-in dials (its
// routable ones; loopback ones only when it has no other) and the
// glide-ins' default listen address: loopback too when the launcher has
// nothing else (a grid on one host), else every interface.
func launcherAddrs(addrs []string, peer string) (sups []string, listen string) {
	var loop, other []string
	for _, a := range addrs {
		m, err := ma.NewMultiaddr(a)
		if err != nil {
			continue
		}
		full := a
		if _, err := m.ValueForProtocol(ma.P_P2P); err != nil && peer != "" {
			full = a + "/p2p/" + peer
		}
		ip := ""
		for _, p := range []int{ma.P_IP4, ma.P_IP6} {
			if v, err := m.ValueForProtocol(p); err == nil {
				ip = v
			}
		}
		if x := net.ParseIP(ip); x != nil && x.IsLoopback() {
			loop = append(loop, full)
		} else {
			other = append(other, full)
		}
	}
	if len(other) > 0 {
		return slices.Compact(other), "/ip4/0.0.0.0/tcp/0"
	}
	return slices.Compact(loop), "/ip4/127.0.0.1/tcp/0"
}

// linkOrCopy makes dst the file src: a hard link, else a copy.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// durationTOML is d as a job file's duration: whole seconds.
func durationTOML(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10) + "s"
}

// tomlLiteral is s as a TOML string: a literal one ('…') when it can be,
// else a basic one.
func tomlLiteral(s string) string {
	if !strings.ContainsAny(s, "'\n\r") {
		return "'" + s + "'"
	}
	return strconv.Quote(s)
}

// GlideinInfo is one glide-in of a launch, as GlideinList sees it.
type GlideinInfo struct {
	Group   string `json:"group"`  // NAME
	Name    string `json:"name"`   // NAME-INDEX: its manager's name
	Job     string `json:"job"`    // CLUSTER[INDEX] at the launcher
	State   string `json:"state"`  // its job's state: idle, reserved, running, completed …
	Host    string `json:"host"`   // the manager it runs on
	Joined  bool   `json:"joined"` // its manager is up under the launcher
	Peer    string `json:"peer"`   // its manager's peer id, once joined
	Since   int64  `json:"since_unix_ms"`
	Reason  string `json:"reason,omitempty"`
	Cluster string `json:"cluster"`
}

// GlideinList lists the glide-ins launched at the manager c is connected
// to (name: only that group's), each with its job and whether its manager
// has joined the launcher (is an inferior up, in its tree). Ended ones
// are listed with ended.
func (c *Client) GlideinList(ctx context.Context, name string, all, ended bool) ([]GlideinInfo, error) {
	rep, err := c.Jobs(ctx, JobFilter{All: all, Ended: ended})
	if err != nil {
		return nil, err
	}
	tree, err := c.Tree(ctx, 1)
	if err != nil {
		return nil, err
	}
	up := map[string]string{} // name → peer
	if tree != nil {
		for _, ch := range tree.Children {
			if ch.State == wire.RelationState_RELATION_STATE_UP {
				up[ch.Name] = ch.Peer
			}
		}
	}
	var out []GlideinInfo
	for _, j := range rep.Jobs {
		group, ok := strings.CutPrefix(j.Name, GlideinJobPrefix)
		if !ok || (name != "" && group != name) {
			continue
		}
		g := GlideinInfo{Group: group, Name: fmt.Sprintf("%s-%d", group, j.Index), Job: j.Id, Cluster: j.Cluster,
			State: strings.ToLower(strings.TrimPrefix(j.State.String(), "JOB_STATE_")), Host: j.Manager, Since: j.SinceUnixMs}
		if p, ok := up[g.Name]; ok && j.State == wire.JobState_JOB_STATE_RUNNING {
			g.Joined, g.Peer = true, p
		}
		if j.State != wire.JobState_JOB_STATE_RUNNING && j.Reason != "" {
			g.Reason = j.Reason
		}
		out = append(out, g)
	}
	return out, nil
}

// GlideinClusters are the clusters of group name's glide-ins at the
// launcher (not ended ones), for removal.
func (c *Client) GlideinClusters(ctx context.Context, name string) ([]string, error) {
	list, err := c.GlideinList(ctx, name, false, false)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, g := range list {
		if !slices.Contains(out, g.Cluster) {
			out = append(out, g.Cluster)
		}
	}
	return out, nil
}
