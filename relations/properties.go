package relations

import (
	"errors"
	"time"
)

// ErrProperties is wrapped by every error ParseProperties returns.
var ErrProperties = errors.New("relations: bad properties file")

// Defaults of the properties file. Units are in the names.
const (
	DefaultDataDir           = "/var/lib/gridmgr"
	DefaultListen            = "/ip4/0.0.0.0/tcp/4001"
	DefaultHeartbeatInterval = time.Second
	DefaultHeartbeatMisses   = 3
	DefaultRetryInitial      = 500 * time.Millisecond
	DefaultRetryMax          = 30 * time.Second
	DefaultLogLevel          = "info"
	DefaultIdentityFile      = "identity.key" // inside data_dir
)

// Properties is one manager's properties file, parsed, checked and with
// defaults filled in. Relative paths have been resolved against the
// directory of the file.
type Properties struct {
	File string // path it was read from, as given to ParseProperties

	Name              string      // name; default: the host name given to ParseProperties
	DataDir           string      // data_dir
	Identity          string      // identity: key file; default <data_dir>/identity.key
	Listen            []string    // listen: TCP multiaddrs without /p2p
	Superiors         []PeerAddrs // superiors, grouped by peer id in file order
	Admins            []string    // admins: peer ids
	PrivateNetworkKey string      // private_network_key: path, "" = open grid
	LogLevel          string      // log_level: debug | info | warn | error

	Heartbeat HeartbeatProps
	Dial      DialProps
	Resources ResourceProps

	// Attributes are the free-form [attributes]: string, int64, float64,
	// bool, or []any of those.
	Attributes map[string]any
}

// HeartbeatProps is the [heartbeat] table.
type HeartbeatProps struct {
	Interval time.Duration // interval, default 1s
	Misses   int           // misses, default 3
}

// DialProps is the [dial] table: backoff for superiors that are not up.
type DialProps struct {
	RetryInitial time.Duration // retry_initial, default 500ms
	RetryMax     time.Duration // retry_max, default 30s
}

// ResourceProps is the [resources] table. Zero means "detect from the host".
type ResourceProps struct {
	CPUs   int    // cpus
	Memory uint64 // memory, bytes
}

// PeerAddrs names one peer and the addresses (without /p2p) it is reached at.
type PeerAddrs struct {
	Peer  string   // peer id, base58 text form
	Addrs []string // transport multiaddrs without the /p2p part
}
