package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/reservation"
)

// ErrConfig is wrapped by every error of Parse, Validate and Set.
var ErrConfig = errors.New("config: bad properties")

// Config is everything one manager needs to run: the properties file (see
// the table of keys, keys.go), plus what the runtime fills in. Default
// gives every default; Validate fills zero values with them and rejects
// impossible ones, naming the key.
type Config struct {
	File string // the properties file it was read from ("" if made in code)

	Name              string               // name
	DataDir           string               // data_dir: identity key, lock, addr file, stores
	Identity          string               // identity: the key file; "" = <DataDir>/identity.key
	Listen            []string             // listen: TCP multiaddrs without /p2p
	Superiors         []peeraddr.PeerAddrs // superiors, grouped by peer in file order
	FallbackSuperiors []peeraddr.PeerAddrs // fallback_superiors: tried when a superior fails
	// PreferConfiguredSuperior (prefer_configured_superior): move back to a
	// configured superior that returned, once it has been up for
	// FailoverSettle.
	PreferConfiguredSuperior bool
	FailoverSettle           time.Duration // failover.settle
	PluginsDir               string        // plugins_dir: admin command plugins; "" none
	Admins                   []string      // admins: peer ids that may change the manager
	PrivateNetworkKey        string        // private_network_key: libp2p PSK file; "" open grid
	LogLevel                 string        // log_level: debug, info, warn, error
	// MemoryTrim (memory_trim) is how often the manager drops the pages
	// of its executable it no longer uses (internal/memtrim); 0 never.
	MemoryTrim time.Duration

	HeartbeatInterval time.Duration // heartbeat.interval
	HeartbeatMisses   int           // heartbeat.misses
	RetryInitial      time.Duration // dial.retry_initial
	RetryMax          time.Duration // dial.retry_max

	// CPUs and Memory (bytes) override detection (resources.cpus,
	// resources.memory); 0 means detect.
	CPUs   int
	Memory uint64
	// MemoryFree, CPUUtil and NetMbps override the live values
	// (resources.memory_free, .cpu_util, .net_mbps); 0 (nil) means measure.
	MemoryFree uint64
	CPUUtil    *float64
	NetMbps    float64
	// Load1, Load5, Load15, UptimeS, DiskFree and IdleS override the live
	// values of those names (resources.load1, .load5, .load15, .uptime_s,
	// .disk_free, .idle_s), DisksFree the free bytes of disks.NAME
	// ([resources.disks]); nil (a name not in DisksFree) means measure.
	// Every live value a query reads has its key: LiveKeys lists them.
	Load1, Load5, Load15 *float64
	UptimeS              *int64
	DiskFree             *uint64
	IdleS                *float64
	DisksFree            map[string]uint64
	HostRefresh          time.Duration // resources.refresh: how often the host is sampled

	// Policy is the owner's policy (policy), a CEL expression over the
	// offer and the request; "" accepts everyone. Validate compiles it.
	Policy string
	policy *query.Program
	// Rank is the owner's rank (rank), a CEL number over this host's
	// values and the request: how much the owner wants a request (the
	// ClassAd paper's machine Rank); "" ranks none. Validate compiles it.
	Rank string
	// ClaimWindow: with a Rank, new reservation requests wait this long
	// and are then decided best ranked first (0: first come, first served).
	ClaimWindow time.Duration
	orank       *query.Program

	Reservations reservation.Limits // reservations.*
	Tokens       map[string]int64   // tokens: kind → capacity
	Disks        map[string]string  // disks: name → path whose filesystem's free space queries see (disks.NAME)
	Access       reservation.Access // access: kind → who may reserve it
	Attributes   map[string]any     // attributes: strings, int64, float64, bool, []any of those
	// Users (users): user name → the client peer ids that are that user.
	// A mapped peer's request.user is its name, whatever it states.
	Users map[string][]string
	// UsersDeclared (users.allow_declared): whether an unmapped peer's
	// stated user name is taken (nil: true, the default); if not, its
	// request.user is "peer:<id>".
	UsersDeclared *bool

	// AppsMaxBundle bounds an application bundle uploaded to this manager
	// (apps.max_bundle_size), bytes.
	AppsMaxBundle uint64
	// AppsUIDs (apps.uid_range) are the uids applications run as: one
	// per reservation, one per class's shared setup.
	AppsUIDs UIDRange
	// AppsMaxInstance (apps.max_instance_bytes) bounds what one instance
	// holds on disk, bytes.
	AppsMaxInstance uint64
	// AppsMaxPids (apps.max_pids) bounds the processes and threads of one
	// reservation's applications.
	AppsMaxPids int
	// AppsMaxStore (apps.max_store_bytes) bounds the bundle store, bytes.
	AppsMaxStore uint64

	// OS and Arch (os, arch) override what queries see as os and arch
	// ("" : Go's names, which go_os and go_arch always give).
	OS, Arch string

	// HTTPListen is the address (host:port) of the manager's web UI and
	// /metrics (http_listen); "" serves neither.
	HTTPListen string
	// HTTPHosts (http_hosts) are the other names and addresses, each
	// "host" or "host:port" in canonical form (lower case, IPv6 in
	// brackets when it has a port), that requests to HTTPListen may give
	// in their Host header; without a port, any port.
	HTTPHosts []string
	// MonitorInterval is how often the manager publishes a utilization
	// sample (monitor.interval).
	MonitorInterval time.Duration
	// Archive (archive.*): whether the manager stores the events it
	// receives, and for how long.
	ArchiveMaxAge    time.Duration
	ArchiveMaxEvents int
	ArchiveEnabled   bool

	// Jobs (jobs.*): the job queue of the manager clients submit to
	// (JobsEnabled beside ArchiveEnabled: one word for both).
	JobsEnabled           bool
	JobsMaxQueued         int
	JobsMaxQueuedPerUser  int
	JobsMaxRunning        int
	JobsMaxRunningPerUser int
	JobsLostAfter         time.Duration
	JobsKeepEnded         time.Duration

	// Glidein ([glidein]): set when this manager is a glide-in that
	// another manager launched as a job (docs/glidein.md); zero for an
	// ordinary manager.
	Glidein Glidein

	// Not in the file.

	// HandshakeTimeout bounds the wait for Hello/Welcome on a new channel.
	// Default: heartbeat.misses × heartbeat.interval, at least 2s.
	HandshakeTimeout time.Duration
	// TreeBudget and QueryBudget are how long a tree walk and a query take
	// when the client gives no budget. Default 5s.
	TreeBudget, QueryBudget time.Duration
	// Hostname describes the host (filled by the runtime).
	Hostname string
	// Version is the software version told to peers.
	Version string
}

// Version is the software version; release builds set it with
// -ldflags "-X github.com/gridmgr/gridmgr/config.Version=v1.2.3".
var Version = "0.1.0-dev"

// Default returns a Config with every default set, Name empty and
// Identity empty (Validate derives it from DataDir, which the caller may
// still change).
func Default() Config {
	c := Config{TreeBudget: 5 * time.Second, QueryBudget: 5 * time.Second, Version: Version}
	for i := range table {
		if table[i].path != "identity" {
			table[i].setDefault(&c)
		}
	}
	return c
}

// Validate fills zero values with defaults and rejects impossible values
// with an *Error naming the properties key (the bounds are the file's). It
// compiles the policy.
func (c *Config) Validate() error { return c.validate(nil) }

// validate is Validate, except that a key given (in the file Parse read)
// keeps its value even when it is the zero value: jobs.enabled = false is
// false, not the default true.
func (c *Config) validate(given func(path string) bool) error {
	if c.Name == "" {
		return &Error{Key: "name", Msg: "must be set"}
	}
	for i := range table {
		k := &table[i]
		if k.isZero(c) && (given == nil || !given(k.path)) {
			k.setDefault(c)
		}
		if msg := k.check(c); msg != "" {
			return &Error{Key: k.path, Msg: msg}
		}
	}
	if es := crossCheck(c); len(es) > 0 {
		return es[0]
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = handshakeFor(c)
	}
	if c.HandshakeTimeout < 0 {
		return &Error{Key: "handshake_timeout", Msg: fmt.Sprintf("%v is negative", c.HandshakeTimeout)}
	}
	if c.TreeBudget <= 0 {
		c.TreeBudget = 5 * time.Second
	}
	if c.QueryBudget <= 0 {
		c.QueryBudget = 5 * time.Second
	}
	if c.Version == "" {
		c.Version = Version
	}
	return c.compilePolicy()
}

func (c *Config) compilePolicy() error {
	c.policy, c.orank = nil, nil
	if c.Rank != "" {
		p, err := query.Compile(query.Rank, c.Rank)
		if err != nil {
			return &Error{Key: "rank", Msg: strings.TrimPrefix(err.Error(), "rank: ")}
		}
		if slices.Contains(p.Refs(), query.OwnerRankVar) {
			return &Error{Key: "rank", Msg: "the owner's rank cannot read " + query.OwnerRankVar + ": that is the rank it computes (policies may)"}
		}
		c.orank = p
	}
	if c.Policy == "" {
		return nil
	}
	p, err := query.Compile(query.Policy, c.Policy)
	if err != nil {
		return &Error{Key: "policy", Msg: strings.TrimPrefix(err.Error(), "policy: ")}
	}
	c.policy = p
	return nil
}

// handshakeFor is the handshake timeout that follows the heartbeat.
func handshakeFor(c *Config) time.Duration {
	return max(2*time.Second, time.Duration(c.HeartbeatMisses)*c.HeartbeatInterval)
}

// PolicyProgram is the compiled policy (nil: none); Validate compiles it.
func (c *Config) PolicyProgram() *query.Program { return c.policy }

// RankProgram is the compiled owner's rank (nil: none).
func (c *Config) RankProgram() *query.Program { return c.orank }

// Liveness is the failure-detector setting derived from the config.
func (c *Config) Liveness() relations.Liveness {
	return relations.Liveness{Interval: c.HeartbeatInterval, Misses: c.HeartbeatMisses}
}

// TickInterval is how often a runtime looks at its Core at least: a tenth
// of the heartbeat interval, between 5ms and 100ms.
func (c *Config) TickInterval() time.Duration {
	return min(max(c.HeartbeatInterval/10, 5*time.Millisecond), 100*time.Millisecond)
}

// Error is one problem with a properties file, a setting or a Config. Its
// Error method formats it as "FILE:LINE: KEY: MSG", for example
//
//	gm154.toml:7: heartbeat.interval: expected a duration string such as "1s", got integer 5
//
// leaving out "LINE:" when Line is 0 (not tied to a line), "KEY: " when
// Key is empty (the whole file) and "FILE:" when File is empty.
type Error struct {
	File string
	Line int
	Key  string // dotted key path such as "heartbeat.interval" or "superiors[1]"
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File + ":")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:", e.Line)
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrConfig.
func (e *Error) Unwrap() error { return ErrConfig }

// Errors is every problem Parse found in one file, sorted by line.
type Errors []*Error

// Error returns the errors' messages, one per line.
func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the elements, so errors.Is(err, ErrConfig) holds and
// errors.As(err, &e) finds the first *Error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// AllowDeclaredUsers reports users.allow_declared (default true).
func (c *Config) AllowDeclaredUsers() bool { return c.UsersDeclared == nil || *c.UsersDeclared }

// UserOf is the name a client peer is mapped to in [users], if any.
func (c *Config) UserOf(peer string) (string, bool) {
	for name, ids := range c.Users {
		if slices.Contains(ids, peer) {
			return name, true
		}
	}
	return "", false
}
