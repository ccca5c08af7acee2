package node

import (
	"errors"
	"fmt"
	"time"

	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/reservation"
)

// ErrConfig is wrapped by every error of Config.Validate.
var ErrConfig = errors.New("node: bad config")

// ConfigError is an error of Config.Validate: the properties key at fault
// and what is wrong with it.
type ConfigError struct {
	Key string
	Msg string
}

func (e *ConfigError) Error() string { return fmt.Sprintf("%v: %s: %s", ErrConfig, e.Key, e.Msg) }

// Unwrap returns ErrConfig.
func (e *ConfigError) Unwrap() error { return ErrConfig }

func bad(key, format string, args ...any) error {
	return &ConfigError{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// Config is everything one manager needs to run. DefaultConfig gives the
// defaults; Validate fills zero values with them and rejects impossible
// ones. Error messages name the properties-file key of the field.
type Config struct {
	// Name of the manager (properties key "name"). Required.
	Name string
	// DataDir holds the identity key, the addr file and later durable state
	// ("data_dir").
	DataDir string
	// Identity is the key file ("identity"); "" means <DataDir>/identity.key.
	Identity string
	// Listen are TCP multiaddrs to listen on ("listen").
	Listen []string
	// Superiors to dial at start ("superiors").
	Superiors []relations.PeerAddrs
	// FallbackSuperiors are tried, in order, when a superior fails and none
	// of its ancestors takes us ("fallback_superiors").
	FallbackSuperiors []relations.PeerAddrs
	// PreferConfiguredSuperior: when a failed superior returns, inferiors
	// that moved away go back to it once it has been up for FailoverSettle
	// ("prefer_configured_superior"). Default false: they stay.
	PreferConfiguredSuperior bool
	// FailoverSettle is how long a returning superior must stay up before
	// inferiors move back to it ("failover.settle"). Default 30s.
	FailoverSettle time.Duration
	// PluginsDir holds admin command plugins, executables named
	// gridmgr-cmd-NAME, looked up at call time ("plugins_dir"); "" means
	// no plugins.
	PluginsDir string
	// Admins are the peer ids allowed to change things ("admins").
	Admins []string
	// PrivateNetworkKey is a libp2p pre-shared key file ("private_network_key").
	PrivateNetworkKey string
	// LogLevel is debug, info, warn or error ("log_level").
	LogLevel string

	// HeartbeatInterval between heartbeats on every relation, both ways
	// ("heartbeat.interval"). Default 1s.
	HeartbeatInterval time.Duration
	// HeartbeatMisses is how many missed heartbeats make a relation Down
	// ("heartbeat.misses"). Default 3.
	HeartbeatMisses int
	// RetryInitial is the first delay before re-dialling a superior that is
	// not up ("dial.retry_initial"). Default 500ms.
	RetryInitial time.Duration
	// RetryMax caps that delay ("dial.retry_max"). Default 30s.
	RetryMax time.Duration
	// HandshakeTimeout bounds the wait for Hello/Welcome on a new channel.
	// Default: heartbeat.misses × heartbeat.interval, at least 2s.
	HandshakeTimeout time.Duration
	// TreeBudget is how long a tree request waits when the asker gives no
	// budget. Default 5s.
	TreeBudget time.Duration

	// CPUs and Memory (bytes) override detection ("resources.cpus",
	// "resources.memory"); zero means detect. The runtime fills them from
	// the host before the Core starts.
	CPUs   int
	Memory uint64
	// Hostname, OS and Arch describe the host (filled by the runtime).
	Hostname, OS, Arch string
	// MemoryFree, CPUUtil and NetMbps override the live values
	// ("resources.memory_free", "resources.cpu_util", "resources.net_mbps"):
	// for tests and for hosts whose measurements mislead. Zero (nil for
	// CPUUtil) means measure.
	MemoryFree uint64
	CPUUtil    *float64
	NetMbps    float64
	// HostRefresh is how often the runtime samples the host's live values
	// ("resources.refresh"). Default 5s.
	HostRefresh time.Duration
	// Attributes are the free-form properties ("attributes").
	Attributes map[string]any
	// Policy is the owner's policy, a CEL expression over the offer and the
	// request ("policy"); "" accepts everyone.
	Policy string
	policy *query.Program
	// QueryBudget is how long a query may take when the client gives no
	// budget. Default 5s.
	QueryBudget time.Duration

	// Reservations bounds the ledger ("reservations.*"); zero fields take
	// reservation.DefaultLimits.
	Reservations reservation.Limits
	// Tokens are counted tokens offered for reservation besides cpus and
	// mem ("tokens"): kind → capacity.
	Tokens map[string]int64
	// Access restricts who may reserve which kinds ("access").
	Access reservation.Access

	// Version is the software version told to peers.
	Version string
}

// DefaultConfig returns a Config with every default set and Name empty.
func DefaultConfig() Config {
	return Config{
		DataDir:           relations.DefaultDataDir,
		Listen:            []string{relations.DefaultListen},
		LogLevel:          relations.DefaultLogLevel,
		HeartbeatInterval: relations.DefaultHeartbeatInterval,
		HeartbeatMisses:   relations.DefaultHeartbeatMisses,
		RetryInitial:      relations.DefaultRetryInitial,
		RetryMax:          relations.DefaultRetryMax,
		TreeBudget:        5 * time.Second,
		QueryBudget:       5 * time.Second,
		HostRefresh:       5 * time.Second,
		Version:           Version,
	}
}

// ConfigFromProperties builds a Config from a parsed properties file.
func ConfigFromProperties(p *relations.Properties) Config {
	c := DefaultConfig()
	c.Name = p.Name
	c.DataDir = p.DataDir
	c.Identity = p.Identity
	c.Listen = p.Listen
	c.Superiors = p.Superiors
	c.FallbackSuperiors = p.FallbackSuperiors
	c.PreferConfiguredSuperior = p.PreferConfiguredSuperior
	c.FailoverSettle = p.Failover.Settle
	c.Admins = p.Admins
	c.PrivateNetworkKey = p.PrivateNetworkKey
	c.PluginsDir = p.PluginsDir
	c.LogLevel = p.LogLevel
	c.HeartbeatInterval = p.Heartbeat.Interval
	c.HeartbeatMisses = p.Heartbeat.Misses
	c.RetryInitial = p.Dial.RetryInitial
	c.RetryMax = p.Dial.RetryMax
	c.CPUs = p.Resources.CPUs
	c.Memory = p.Resources.Memory
	c.MemoryFree = p.Resources.MemoryFree
	c.CPUUtil = p.Resources.CPUUtil
	c.NetMbps = p.Resources.NetMbps
	c.HostRefresh = p.Resources.Refresh
	c.Attributes = p.Attributes
	c.Policy = p.Policy
	r := p.Reservations
	c.Reservations = reservation.Limits{HoldTimeout: r.HoldTimeout, DefaultLease: r.Lease, MinLease: r.MinLease,
		MaxLease: r.MaxLease, Retain: r.Retain, MaxLive: r.MaxLive}
	c.Tokens = p.Tokens
	c.Access = p.Access
	return c
}

// Validate fills zero values with defaults and rejects impossible values,
// naming the properties key.
func (c *Config) Validate() error {
	d := DefaultConfig()
	if c.Name == "" {
		return bad("name", "must be set")
	}
	if c.DataDir == "" {
		c.DataDir = d.DataDir
	}
	if len(c.Listen) == 0 {
		c.Listen = d.Listen
	}
	if c.LogLevel == "" {
		c.LogLevel = d.LogLevel
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return bad("log_level", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = d.HeartbeatInterval
	}
	if c.HeartbeatInterval < time.Millisecond {
		return bad("heartbeat.interval", "%v is below 1ms", c.HeartbeatInterval)
	}
	if c.HeartbeatMisses == 0 {
		c.HeartbeatMisses = d.HeartbeatMisses
	}
	if c.HeartbeatMisses < 1 {
		return bad("heartbeat.misses", "%d is below 1", c.HeartbeatMisses)
	}
	if c.RetryInitial == 0 {
		c.RetryInitial = d.RetryInitial
	}
	if c.RetryMax == 0 {
		c.RetryMax = max(d.RetryMax, c.RetryInitial)
	}
	if c.RetryInitial < time.Millisecond {
		return bad("dial.retry_initial", "%v is below 1ms", c.RetryInitial)
	}
	if c.RetryMax < c.RetryInitial {
		return bad("dial.retry_max", "%v is below dial.retry_initial %v", c.RetryMax, c.RetryInitial)
	}
	if c.FailoverSettle == 0 {
		c.FailoverSettle = defaultFailoverSettle
	}
	if c.FailoverSettle < 0 {
		return bad("failover.settle", "%v is negative", c.FailoverSettle)
	}
	for _, f := range c.FallbackSuperiors {
		for _, s := range c.Superiors {
			if f.Peer == s.Peer {
				return bad("fallback_superiors", "%s is also a superior; a fallback is only tried when a superior fails", relations.ShortPeer(f.Peer))
			}
		}
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = max(2*time.Second, time.Duration(c.HeartbeatMisses)*c.HeartbeatInterval)
	}
	if c.HandshakeTimeout < 0 {
		return bad("handshake_timeout", "%v is negative", c.HandshakeTimeout)
	}
	if c.TreeBudget <= 0 {
		c.TreeBudget = d.TreeBudget
	}
	if c.CPUs < 0 {
		return bad("resources.cpus", "%d is negative", c.CPUs)
	}
	if c.CPUUtil != nil && (*c.CPUUtil < 0 || *c.CPUUtil > 1) {
		return bad("resources.cpu_util", "%v is outside 0..1", *c.CPUUtil)
	}
	if c.NetMbps < 0 {
		return bad("resources.net_mbps", "%v is negative", c.NetMbps)
	}
	if c.QueryBudget <= 0 {
		c.QueryBudget = d.QueryBudget
	}
	if c.HostRefresh <= 0 {
		c.HostRefresh = d.HostRefresh
	}
	if err := c.validateReservations(); err != nil {
		return err
	}
	c.policy = nil
	if c.Policy != "" {
		p, err := query.Compile(query.Policy, c.Policy)
		if err != nil {
			return bad("policy", "%v", err)
		}
		c.policy = p
	}
	if c.Version == "" {
		c.Version = d.Version
	}
	return nil
}

// defaultFailoverSettle is failover.settle's default.
const defaultFailoverSettle = 30 * time.Second

// Liveness is the failure-detector setting derived from the config.
func (c *Config) Liveness() relations.Liveness {
	return relations.Liveness{Interval: c.HeartbeatInterval, Misses: c.HeartbeatMisses}
}

// TickInterval is how often the runtime should call Core.Tick: a tenth of
// the heartbeat interval, between 5ms and 100ms.
func (c *Config) TickInterval() time.Duration {
	return min(max(c.HeartbeatInterval/10, 5*time.Millisecond), 100*time.Millisecond)
}

func (c *Config) validateReservations() error {
	r := &c.Reservations
	for _, f := range []struct {
		key string
		v   time.Duration
	}{
		{"reservations.hold_timeout", r.HoldTimeout}, {"reservations.lease", r.DefaultLease},
		{"reservations.min_lease", r.MinLease}, {"reservations.max_lease", r.MaxLease},
		{"reservations.retain", r.Retain},
	} {
		if f.v < 0 {
			return bad(f.key, "%v is negative", f.v)
		}
	}
	if r.MaxLive < 0 {
		return bad("reservations.max_live", "%d is negative", r.MaxLive)
	}
	full := r.WithDefaults()
	if full.MinLease > full.MaxLease {
		return bad("reservations.min_lease", "%v is above reservations.max_lease %v", full.MinLease, full.MaxLease)
	}
	if full.DefaultLease < full.MinLease || full.DefaultLease > full.MaxLease {
		return bad("reservations.lease", "%v is outside [%v, %v]", full.DefaultLease, full.MinLease, full.MaxLease)
	}
	if len(c.Tokens) > reservation.MaxKinds-2 {
		return bad("tokens", "%d kinds, limit %d", len(c.Tokens), reservation.MaxKinds-2)
	}
	for k, n := range c.Tokens {
		if k == "" || len(k) > reservation.MaxKindLen || k == reservation.CPUs || k == reservation.Mem {
			return bad("tokens", "%q is not a valid token name", k)
		}
		if n < 0 {
			return bad("tokens."+k, "%d is negative", n)
		}
	}
	for k, list := range c.Access {
		if _, ok := c.Tokens[k]; !ok && k != reservation.CPUs && k != reservation.Mem {
			return bad("access."+k, "%q is not a reservable kind (cpus, mem or a token)", k)
		}
		for i, e := range list {
			if _, err := reservation.ParseAccessEntry(e); err != nil {
				return bad(fmt.Sprintf("access.%s[%d]", k, i), "%v", err)
			}
		}
	}
	return nil
}
