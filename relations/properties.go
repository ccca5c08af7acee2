package relations

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/reservation"
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
	DefaultRefresh           = 5 * time.Second
	DefaultFailoverSettle    = 30 * time.Second
)

// Properties is one manager's properties file, parsed, checked and with
// defaults filled in. Relative paths have been resolved against the
// directory of the file.
//
// Properties returned by ParseProperties are normalised: Listen, Superiors,
// FallbackSuperiors, Admins, every PeerAddrs.Addrs and Attributes are never
// nil (empty when the file has none), multiaddrs and peer ids are in their
// canonical text form, and attribute arrays are []any. Render writes such a value back so that
// parsing the output gives a reflect.DeepEqual value.
type Properties struct {
	File string // path it was read from, as given to ParseProperties

	Name              string      // name; default: the host name given to ParseProperties
	DataDir           string      // data_dir
	Identity          string      // identity: key file; default <data_dir>/identity.key
	Listen            []string    // listen: TCP multiaddrs without /p2p
	Superiors         []PeerAddrs // superiors, grouped by peer id in file order
	Admins            []string    // admins: peer ids
	PrivateNetworkKey string      // private_network_key: path, "" = open grid
	PluginsDir        string      // plugins_dir: admin command plugins (gridmgr-cmd-NAME), "" = none
	LogLevel          string      // log_level: debug | info | warn | error
	// FallbackSuperiors (fallback_superiors) are the managers tried, in
	// order, when a superior fails and none of its ancestors takes us.
	// Written and grouped by peer id like Superiors; no peer is in both.
	FallbackSuperiors []PeerAddrs
	// PreferConfiguredSuperior (prefer_configured_superior, default false):
	// when false, a manager that moved to another superior after a failure
	// stays there when the failed superior returns; when true it moves back
	// once that superior has been up for Failover.Settle.
	PreferConfiguredSuperior bool
	// Policy is the owner's policy (policy): a CEL expression over the
	// offer and request.* that a requester must satisfy; "" accepts all.
	// Its syntax is checked by the node (see KeyLine to place its errors).
	Policy string

	Heartbeat    HeartbeatProps
	Dial         DialProps
	Failover     FailoverProps
	Resources    ResourceProps
	Reservations ReservationProps

	// Tokens are the counted tokens this manager offers for reservation
	// ([tokens]): kind → capacity. Nested tables flatten with dots:
	// [tokens.licenses] matlab = 5 declares "licenses.matlab".
	Tokens map[string]int64
	// Access restricts who may reserve which kind ([access]): kind → list
	// of "*", "user:NAME" or "peer:ID" (a bare peer id is stored as
	// "peer:ID"). Kinds without a list are open to every requester.
	Access map[string][]string

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

// FailoverProps is the [failover] table.
type FailoverProps struct {
	// Settle (settle, default 30s, 1s to 1h) is how long a failed superior
	// must be up again before inferiors that prefer it
	// (prefer_configured_superior) move back to it.
	Settle time.Duration
}

// ResourceProps is the [resources] table. Zero (nil for CPUUtil) means
// "measure on the host".
type ResourceProps struct {
	CPUs       int           // cpus
	Memory     uint64        // memory, bytes
	MemoryFree uint64        // memory_free, bytes
	CPUUtil    *float64      // cpu_util, 0..1
	NetMbps    float64       // net_mbps, Mbit/s
	Refresh    time.Duration // refresh: how often live values are sampled, default 5s
}

// ReservationProps is the [reservations] table. Zero means the default of
// the reservation ledger.
type ReservationProps struct {
	HoldTimeout time.Duration // hold_timeout: a held reservation lapses after it, default 30s
	Lease       time.Duration // lease: default lease of a commit, default 5m
	MinLease    time.Duration // min_lease, default 1s
	MaxLease    time.Duration // max_lease, default 24h
	Retain      time.Duration // retain: how long ended reservations are remembered, default 1h
	MaxLive     int           // max_live: most held + committed at once, default 100000
}

// Limits of ParseProperties. A valid properties file never comes near them;
// they keep hostile or corrupt input from costing much time or memory.
const (
	maxPropertiesSize = 1 << 20 // bytes of one file
	maxNesting        = 8       // depth of [ and { in a value
	maxKeyParts       = 8       // dots in one dotted key or table header
	maxErrors         = 100     // problems reported before giving up
)

// Ranges of the checked values.
const (
	minInterval     = 10 * time.Millisecond
	maxInterval     = time.Hour
	minMisses       = 1
	maxMisses       = 100
	minRetryInitial = 10 * time.Millisecond
	maxRetryInitial = time.Hour
	maxRetryMax     = 24 * time.Hour
	maxCPUs         = 65536
	maxNetMbps      = 1e7 // 10 Tbit/s
	minRefresh      = 100 * time.Millisecond
	maxRefresh      = time.Hour
	minSettle       = time.Second
	maxSettle       = time.Hour
	maxPolicyLen    = 4096
	minMemory       = 1 << 20
	maxNameLen      = 64
)

// PropertiesError is one problem found in a properties file.
//
// Its Error method formats it as "FILE:LINE: KEY: MSG", for example
//
//	gm154.toml:7: heartbeat.interval: expected a duration string such as "1s", got integer 5
//
// "LINE:" is left out when Line is 0 (the problem is not tied to a line, such
// as an unusable host name), "KEY: " when Key is empty (such as a file that
// is not UTF-8), and "FILE:" when File is empty.
type PropertiesError struct {
	File string // the file argument of ParseProperties
	Line int    // 1-based line of the key (or array element); 0 if none
	Key  string // dotted key path such as "heartbeat.interval" or "superiors[1]"; "" if none
	Msg  string // what is wrong, for an operator
}

// Error formats e as "FILE:LINE: KEY: MSG".
func (e *PropertiesError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteByte(':')
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns ErrProperties, so errors.Is(err, ErrProperties) holds.
func (e *PropertiesError) Unwrap() error { return ErrProperties }

// PropertiesErrors is every problem ParseProperties found in one file,
// sorted by line (problems without a line come first).
type PropertiesErrors []*PropertiesError

// Error returns the errors' messages, one per line.
func (es PropertiesErrors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the elements, so errors.Is(err, ErrProperties) holds and
// errors.As(err, &pe) finds the first *PropertiesError.
func (es PropertiesErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// ParseProperties parses and checks one manager's properties file (TOML).
// file is the path the data was read from: it is used in error messages,
// stored in Properties.File, and relative paths in the file (data_dir,
// identity, private_network_key) are resolved against filepath.Dir(file)
// unless file is "" (absolute paths and, with file "", all paths are only
// cleaned). hostname is the default for name.
//
// The check is strict: unknown keys, wrong TOML types and out-of-range
// values are errors. On success it returns a normalised *Properties (see
// Properties) and a nil error. Otherwise it returns nil and a non-empty
// PropertiesErrors with every problem found (at most 100, the last one then
// saying how many more there were), sorted by line; each element is a
// *PropertiesError naming file, line and key and wrapping ErrProperties. A
// TOML syntax error stops the parse, so it is reported alone. Files larger
// than 1 MiB, not UTF-8, or nested deeper than 8 levels are refused whole.
//
// ParseProperties does no I/O.
func ParseProperties(file string, data []byte, hostname string) (*Properties, error) {
	p := &propParser{file: file}
	props := p.parse(data, hostname)
	if len(p.errs) > 0 {
		return nil, p.finish()
	}
	return props, nil
}

// KeyLine returns the 1-based line where a dotted key ("policy",
// "resources.cpu_util") is set in a properties file, or 0 when it is not
// set or the file does not parse. Layers above this package use it to place
// errors in values the parser cannot judge, such as a policy expression.
func KeyLine(data []byte, key string) (line int) {
	defer func() {
		if recover() != nil {
			line = 0
		}
	}()
	src := strings.TrimPrefix(string(data), "\ufeff")
	if len(src) > maxPropertiesSize || !utf8.ValidString(src) {
		return 0
	}
	if _, msg := checkNesting(src); msg != "" {
		return 0
	}
	p := &propParser{src: src, tables: make(map[string]map[string]toml.Primitive)}
	md, err := toml.Decode(src, &p.root)
	if err != nil {
		return 0
	}
	p.md = md
	path := strings.Split(key, ".")
	if !md.IsDefined(path...) {
		return 0
	}
	return p.lineOf(path)
}

// propParser holds the state of one ParseProperties call.
type propParser struct {
	file string
	src  string // the file, without a UTF-8 byte order mark

	// For line lookups: the document as a Primitive, its metadata, and
	// the tables decoded so far into Primitives, by toml.Key.String().
	md     toml.MetaData
	root   toml.Primitive
	tables map[string]map[string]toml.Primitive

	errs    PropertiesErrors
	dropped int // errors not kept because of maxErrors
}

// finish sorts the collected errors and returns them.
func (p *propParser) finish() PropertiesErrors {
	sort.SliceStable(p.errs, func(i, j int) bool { return p.errs[i].Line < p.errs[j].Line })
	if p.dropped > 0 {
		p.errs = append(p.errs, &PropertiesError{
			File: p.file,
			Msg:  fmt.Sprintf("too many errors; %d more not shown", p.dropped),
		})
	}
	return p.errs
}

// add records an error at line with key path (already formatted).
func (p *propParser) add(line int, key, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		p.dropped++
		return
	}
	p.errs = append(p.errs, &PropertiesError{File: p.file, Line: line, Key: oneLine(key), Msg: oneLine(fmt.Sprintf(format, args...))})
}

// oneLine escapes control characters in a message (parts of it, such as
// go-multiaddr's errors, may quote the input) and shortens it if long.
func oneLine(s string) string {
	const max = 400
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// errAt records an error about the key at path, or about its element idx
// if idx >= 0 (the key's value is then an array of n elements).
func (p *propParser) errAt(path []string, idx, n int, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		p.dropped++
		return
	}
	line := 0
	if idx >= 0 {
		line = p.elemLine(path, idx, n)
	} else {
		line = p.lineOf(path)
	}
	p.add(line, keyString(path, idx), format, args...)
}

// keyString formats a key path as in TOML ("a.b", quoted parts where
// needed), with "[idx]" appended when idx >= 0.
func keyString(path []string, idx int) string {
	s := toml.Key(path).String()
	if idx >= 0 {
		s += "[" + strconv.Itoa(idx) + "]"
	}
	return s
}

func (p *propParser) parse(data []byte, hostname string) (props *Properties) {
	defer func() {
		// Nothing below should panic; if a dependency does, report it
		// instead of taking the caller down.
		if r := recover(); r != nil {
			props = nil
			p.add(0, "", "internal error while parsing: %v", r)
		}
	}()

	src := strings.TrimPrefix(string(data), "\ufeff")
	p.src = src
	if len(src) > maxPropertiesSize {
		p.add(0, "", "file is too large (%d bytes); the limit is %d bytes", len(src), maxPropertiesSize)
		return nil
	}
	if i := text.FirstInvalidUTF8(src); i >= 0 {
		p.add(lineAt(src, i), "", "file is not valid UTF-8")
		return nil
	}
	if off, msg := checkNesting(src); msg != "" {
		p.add(lineAt(src, off), "", "%s", msg)
		return nil
	}

	md, err := toml.Decode(src, &p.root)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			p.add(pe.Position.Line, pe.LastKey, "invalid TOML: %s", pe.Message)
		} else {
			p.add(0, "", "invalid TOML: %v", err)
		}
		return nil
	}
	p.md = md
	p.tables = make(map[string]map[string]toml.Primitive)
	var doc map[string]any
	if err := p.md.PrimitiveDecode(p.root, &doc); err != nil {
		p.add(0, "", "invalid TOML: %v", err)
		return nil
	}
	return p.check(doc, hostname)
}

// Known keys, for the unknown-key check and its suggestions.
var (
	topKeys = []string{
		"name", "data_dir", "identity", "listen", "superiors", "fallback_superiors",
		"prefer_configured_superior", "admins", "private_network_key", "plugins_dir", "log_level", "policy",
		"heartbeat", "dial", "failover", "resources", "reservations", "tokens", "access", "attributes",
	}
	tableKeys = map[string][]string{
		"heartbeat":    {"interval", "misses"},
		"dial":         {"retry_initial", "retry_max"},
		"failover":     {"settle"},
		"resources":    {"cpus", "memory", "memory_free", "cpu_util", "net_mbps", "refresh"},
		"reservations": {"hold_timeout", "lease", "min_lease", "max_lease", "retain", "max_live"},
	}
	allKeys = func() []string {
		var all []string
		for _, k := range topKeys {
			all = append(all, k)
			for _, sub := range tableKeys[k] {
				all = append(all, k+"."+sub)
			}
		}
		return all
	}()
	logLevels = []string{"debug", "info", "warn", "error"}
)

// check walks the schema over the decoded document.
func (p *propParser) check(doc map[string]any, hostname string) *Properties {
	props := &Properties{
		File:              p.file,
		Listen:            []string{},
		Superiors:         []PeerAddrs{},
		FallbackSuperiors: []PeerAddrs{},
		Admins:            []string{},
		LogLevel:          DefaultLogLevel,
		Heartbeat:         HeartbeatProps{Interval: DefaultHeartbeatInterval, Misses: DefaultHeartbeatMisses},
		Dial:              DialProps{RetryInitial: DefaultRetryInitial, RetryMax: DefaultRetryMax},
		Failover:          FailoverProps{Settle: DefaultFailoverSettle},
		Resources:         ResourceProps{Refresh: DefaultRefresh},
		Tokens:            map[string]int64{},
		Access:            map[string][]string{},
		Attributes:        map[string]any{},
	}
	p.unknownKeys(nil, doc, topKeys)

	// name
	if v, ok := doc["name"]; ok {
		path := []string{"name"}
		if s, ok := p.str(path, v); ok {
			if validName(s) {
				props.Name = s
			} else {
				p.errAt(path, -1, 0, "%s is not a valid name: use 1 to %d of the characters A-Z a-z 0-9 . _ -", text.QuoteShort(s), maxNameLen)
			}
		}
	} else if validName(hostname) {
		props.Name = hostname
	} else {
		p.add(0, "name", "no name is set and the host name %s is not a valid name (1 to %d of A-Z a-z 0-9 . _ -); set name in the file", text.QuoteShort(hostname), maxNameLen)
	}

	// data_dir, identity, private_network_key
	dataDirOK := true
	props.DataDir = p.resolve(DefaultDataDir)
	if v, ok := doc["data_dir"]; ok {
		props.DataDir, dataDirOK = p.path([]string{"data_dir"}, v, false)
	}
	if v, ok := doc["identity"]; ok {
		props.Identity, _ = p.path([]string{"identity"}, v, false)
	} else if dataDirOK {
		props.Identity = filepath.Join(props.DataDir, DefaultIdentityFile)
	}
	if v, ok := doc["plugins_dir"]; ok {
		props.PluginsDir, _ = p.path([]string{"plugins_dir"}, v, true)
	}
	if v, ok := doc["private_network_key"]; ok {
		props.PrivateNetworkKey, _ = p.path([]string{"private_network_key"}, v, true)
	}

	// listen
	if v, ok := doc["listen"]; ok {
		path := []string{"listen"}
		if arr, ok := p.array(path, v); ok {
			if len(arr) == 0 {
				p.errAt(path, -1, 0, "at least one listen address is needed; remove the key to listen on %s", DefaultListen)
			}
			for i, e := range arr {
				if a, ok := p.listenAddr(path, i, len(arr), e); ok {
					if j := slices.Index(props.Listen, a); j >= 0 {
						p.errAt(path, i, len(arr), "duplicate listen address %s (same as listen[%d])", a, j)
						continue
					}
					props.Listen = append(props.Listen, a)
				}
			}
		}
	} else {
		props.Listen = append(props.Listen, DefaultListen)
	}

	// superiors, fallback_superiors, prefer_configured_superior
	superiorAt := map[string]int{} // peer id → index of its first superiors element
	if v, ok := doc["superiors"]; ok {
		props.Superiors = p.peerAddrList([]string{"superiors"}, v, func(i, _ int, peer string) bool {
			if _, ok := superiorAt[peer]; !ok {
				superiorAt[peer] = i
			}
			return true
		})
	}
	if v, ok := doc["fallback_superiors"]; ok {
		path := []string{"fallback_superiors"}
		props.FallbackSuperiors = p.peerAddrList(path, v, func(i, n int, peer string) bool {
			j, dup := superiorAt[peer]
			if dup {
				p.errAt(path, i, n, "peer %s is already in superiors[%d]; a fallback is only tried when a superior fails", peer, j)
			}
			return !dup
		})
	}
	if v, ok := doc["prefer_configured_superior"]; ok {
		props.PreferConfiguredSuperior, _ = p.boolean([]string{"prefer_configured_superior"}, v)
	}

	// admins
	if v, ok := doc["admins"]; ok {
		path := []string{"admins"}
		if arr, ok := p.array(path, v); ok {
			for i, e := range arr {
				s, ok := e.(string)
				if !ok {
					p.errAt(path, i, len(arr), "expected a peer id string, got %s", describe(e))
					continue
				}
				id, err := ParsePeerID(s)
				if err != nil {
					p.errAt(path, i, len(arr), "invalid peer id %s: %v", text.QuoteShort(s), err)
					continue
				}
				if j := slices.Index(props.Admins, id); j >= 0 {
					p.errAt(path, i, len(arr), "duplicate admin %s (same as admins[%d])", id, j)
					continue
				}
				props.Admins = append(props.Admins, id)
			}
		}
	}

	// log_level
	if v, ok := doc["log_level"]; ok {
		path := []string{"log_level"}
		if s, ok := p.str(path, v); ok {
			if slices.Contains(logLevels, s) {
				props.LogLevel = s
			} else {
				p.errAt(path, -1, 0, "unknown log level %s; use one of %s", text.QuoteShort(s), strings.Join(logLevels, ", "))
			}
		}
	}

	// policy
	if v, ok := doc["policy"]; ok {
		path := []string{"policy"}
		if s, ok := p.str(path, v); ok {
			if len(s) > maxPolicyLen {
				p.errAt(path, -1, 0, "policy is %d bytes; the limit is %d", len(s), maxPolicyLen)
			} else {
				props.Policy = s
			}
		}
	}

	// [heartbeat]
	if t, ok := p.subTable(doc, "heartbeat"); ok {
		if v, ok := t["interval"]; ok {
			if d, ok := p.duration([]string{"heartbeat", "interval"}, v, minInterval, maxInterval); ok {
				props.Heartbeat.Interval = d
			}
		}
		if v, ok := t["misses"]; ok {
			if n, ok := p.integer([]string{"heartbeat", "misses"}, v, minMisses, maxMisses, ""); ok {
				props.Heartbeat.Misses = int(n)
			}
		}
	}

	// [dial]
	if t, ok := p.subTable(doc, "dial"); ok {
		initialOK, maxOK := true, true
		vi, hasInitial := t["retry_initial"]
		if hasInitial {
			props.Dial.RetryInitial, initialOK = p.duration([]string{"dial", "retry_initial"}, vi, minRetryInitial, maxRetryInitial)
		}
		vm, hasMax := t["retry_max"]
		if hasMax {
			props.Dial.RetryMax, maxOK = p.duration([]string{"dial", "retry_max"}, vm, minRetryInitial, maxRetryMax)
		}
		if initialOK && maxOK && props.Dial.RetryMax < props.Dial.RetryInitial {
			if hasMax {
				p.errAt([]string{"dial", "retry_max"}, -1, 0, "%s is shorter than dial.retry_initial (%s)", props.Dial.RetryMax, props.Dial.RetryInitial)
			} else {
				p.errAt([]string{"dial", "retry_initial"}, -1, 0, "%s is longer than dial.retry_max (default %s)", props.Dial.RetryInitial, props.Dial.RetryMax)
			}
		}
	}

	// [failover]
	if t, ok := p.subTable(doc, "failover"); ok {
		if v, ok := t["settle"]; ok {
			if d, ok := p.duration([]string{"failover", "settle"}, v, minSettle, maxSettle); ok {
				props.Failover.Settle = d
			}
		}
	}

	// [resources]
	if t, ok := p.subTable(doc, "resources"); ok {
		if v, ok := t["cpus"]; ok {
			if n, ok := p.integer([]string{"resources", "cpus"}, v, 1, maxCPUs, " (or 0 to detect)"); ok {
				props.Resources.CPUs = int(n)
			}
		}
		if v, ok := t["memory"]; ok {
			props.Resources.Memory = p.memory([]string{"resources", "memory"}, v)
		}
		if v, ok := t["memory_free"]; ok {
			props.Resources.MemoryFree = p.memory([]string{"resources", "memory_free"}, v)
		}
		if v, ok := t["cpu_util"]; ok {
			if f, ok := p.number([]string{"resources", "cpu_util"}, v, 0, 1); ok {
				props.Resources.CPUUtil = &f
			}
		}
		if v, ok := t["net_mbps"]; ok {
			if f, ok := p.number([]string{"resources", "net_mbps"}, v, 0, maxNetMbps); ok {
				props.Resources.NetMbps = f
			}
		}
		if v, ok := t["refresh"]; ok {
			if d, ok := p.duration([]string{"resources", "refresh"}, v, minRefresh, maxRefresh); ok {
				props.Resources.Refresh = d
			}
		}
	}

	p.reservations(doc, props)

	// [attributes]
	if v, ok := doc["attributes"]; ok {
		path := []string{"attributes"}
		if t, ok := p.table(path, v); ok {
			for _, k := range sortedKeys(t) {
				if a, ok := p.attribute(append(path[:1:1], k), t[k]); ok {
					props.Attributes[k] = a
				}
			}
		}
	}
	return props
}

// unknownKeys reports the keys of t (at path) that are not in known.
func (p *propParser) unknownKeys(path []string, t map[string]any, known []string) {
	for _, k := range sortedKeys(t) {
		if slices.Contains(known, k) {
			continue
		}
		kp := append(slices.Clip(path), k)
		msg := "unknown key"
		if s := suggest(kp); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		p.errAt(kp, -1, 0, "%s", msg)
	}
}

// subTable returns doc[name] as a table, having reported its unknown keys;
// ok is false if the table is absent or not a table.
func (p *propParser) subTable(doc map[string]any, name string) (map[string]any, bool) {
	v, ok := doc[name]
	if !ok {
		return nil, false
	}
	path := []string{name}
	t, ok := p.table(path, v)
	if !ok {
		return nil, false
	}
	p.unknownKeys(path, t, tableKeys[name])
	return t, true
}

func (p *propParser) table(path []string, v any) (map[string]any, bool) {
	t, ok := v.(map[string]any)
	if !ok {
		p.errAt(path, -1, 0, "expected a table, got %s", describe(v))
	}
	return t, ok
}

func (p *propParser) array(path []string, v any) ([]any, bool) {
	a, ok := v.([]any)
	if !ok {
		p.errAt(path, -1, 0, "expected an array of strings, got %s", describe(v))
	}
	return a, ok
}

func (p *propParser) boolean(path []string, v any) (bool, bool) {
	b, ok := v.(bool)
	if !ok {
		p.errAt(path, -1, 0, "expected a boolean (true or false), got %s", describe(v))
	}
	return b, ok
}

func (p *propParser) str(path []string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		p.errAt(path, -1, 0, "expected a string, got %s", describe(v))
	}
	return s, ok
}

// path checks a path value and resolves it against the file's directory.
func (p *propParser) path(path []string, v any, emptyOK bool) (string, bool) {
	s, ok := p.str(path, v)
	if !ok {
		return "", false
	}
	if s == "" {
		if emptyOK {
			return "", true
		}
		p.errAt(path, -1, 0, "must not be empty")
		return "", false
	}
	if strings.ContainsRune(s, 0) {
		p.errAt(path, -1, 0, "must not contain NUL characters")
		return "", false
	}
	return p.resolve(s), true
}

// resolve makes a relative path relative to the directory of the file.
func (p *propParser) resolve(s string) string {
	if p.file == "" || filepath.IsAbs(s) {
		return filepath.Clean(s)
	}
	return filepath.Join(filepath.Dir(p.file), s)
}

func (p *propParser) duration(path []string, v any, lo, hi time.Duration) (time.Duration, bool) {
	s, ok := v.(string)
	if !ok {
		p.errAt(path, -1, 0, "expected a duration string such as \"1s\", got %s", describe(v))
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.errAt(path, -1, 0, "%s is not a duration; write one such as \"500ms\", \"1s\" or \"2m30s\"", text.QuoteShort(s))
		return 0, false
	}
	if d < lo {
		p.errAt(path, -1, 0, "%s is too short; the minimum is %s", d, lo)
		return 0, false
	}
	if d > hi {
		p.errAt(path, -1, 0, "%s is too long; the maximum is %s", d, hi)
		return 0, false
	}
	return d, true
}

// integer checks an integer in lo..hi; 0 is accepted too if zeroNote is
// not "" (it then says what 0 means).
func (p *propParser) integer(path []string, v any, lo, hi int64, zeroNote string) (int64, bool) {
	n, ok := v.(int64)
	if !ok {
		p.errAt(path, -1, 0, "expected an integer, got %s", describe(v))
		return 0, false
	}
	if n == 0 && zeroNote != "" {
		return 0, true
	}
	if n < lo || n > hi {
		p.errAt(path, -1, 0, "must be between %d and %d%s, got %d", lo, hi, zeroNote, n)
		return 0, false
	}
	return n, true
}

// number checks a TOML integer or float in lo..hi.
func (p *propParser) number(path []string, v any, lo, hi float64) (float64, bool) {
	var f float64
	switch n := v.(type) {
	case int64:
		f = float64(n)
	case float64:
		f = n
	default:
		p.errAt(path, -1, 0, "expected a number, got %s", describe(v))
		return 0, false
	}
	if math.IsNaN(f) || f < lo || f > hi {
		p.errAt(path, -1, 0, "%v is out of range %v to %v", f, lo, hi)
		return 0, false
	}
	return f, true
}

func (p *propParser) memory(path []string, v any) uint64 {
	var n uint64
	switch x := v.(type) {
	case int64:
		if x < 0 {
			p.errAt(path, -1, 0, "must not be negative, got %d", x)
			return 0
		}
		n = uint64(x)
	case string:
		var err error
		if n, err = text.ParseSize(x); err != nil {
			p.errAt(path, -1, 0, "invalid size %s: %v", text.QuoteShort(x), err)
			return 0
		}
	default:
		p.errAt(path, -1, 0, "expected a size such as \"16GiB\" or an integer number of bytes, got %s", describe(v))
		return 0
	}
	if n != 0 && n < minMemory {
		p.errAt(path, -1, 0, "must be at least 1 MiB (%d bytes) or 0 to detect, got %d bytes", minMemory, n)
		return 0
	}
	return n
}

// listenAddr checks one listen address and returns its canonical form.
func (p *propParser) listenAddr(path []string, i, n int, e any) (string, bool) {
	s, ok := e.(string)
	if !ok {
		p.errAt(path, i, n, "expected a multiaddr string, got %s", describe(e))
		return "", false
	}
	m, err := ma.NewMultiaddr(s)
	if err != nil {
		p.errAt(path, i, n, "invalid multiaddr: %v", err)
		return "", false
	}
	if slices.ContainsFunc(m, func(c ma.Component) bool { return c.Code() == ma.P_P2P }) {
		p.errAt(path, i, n, "listen address %s must not have a /p2p part", m)
		return "", false
	}
	if len(m) != 2 || (m[0].Code() != ma.P_IP4 && m[0].Code() != ma.P_IP6) || m[1].Code() != ma.P_TCP {
		p.errAt(path, i, n, "listen address %s is not /ip4/<address>/tcp/<port> or /ip6/<address>/tcp/<port>", m)
		return "", false
	}
	return m.String(), true
}

// peerAddrList checks an array of superior addresses (superiors,
// fallback_superiors: full multiaddrs ending in /p2p/<peer id>) and groups
// them by peer id in file order, dropping repeated addresses. accept, if
// not nil, is called with each valid element's index, the array length and
// its peer id; elements it refuses are left out (it reports why). The
// result is never nil.
func (p *propParser) peerAddrList(path []string, v any, accept func(i, n int, peer string) bool) []PeerAddrs {
	out := []PeerAddrs{}
	arr, ok := p.array(path, v)
	if !ok {
		return out
	}
	index := map[string]int{}
	for i, e := range arr {
		peer, addr, ok := p.superior(path, i, len(arr), e)
		if !ok || accept != nil && !accept(i, len(arr), peer) {
			continue
		}
		j, ok := index[peer]
		if !ok {
			j = len(out)
			index[peer] = j
			out = append(out, PeerAddrs{Peer: peer, Addrs: []string{}})
		}
		if !slices.Contains(out[j].Addrs, addr) {
			out[j].Addrs = append(out[j].Addrs, addr)
		}
	}
	return out
}

// superior checks one superior address and splits it into peer id and
// canonical transport address.
func (p *propParser) superior(path []string, i, n int, e any) (peer, addr string, ok bool) {
	s, ok := e.(string)
	if !ok {
		p.errAt(path, i, n, "expected a multiaddr string, got %s", describe(e))
		return "", "", false
	}
	peer, addr, msg := splitPeerMaddr(s, "superior address")
	if msg != "" {
		p.errAt(path, i, n, "%s", msg)
		return "", "", false
	}
	return peer, addr, true
}

// attribute checks one [attributes] value and returns it normalised.
func (p *propParser) attribute(path []string, v any) (any, bool) {
	switch x := v.(type) {
	case []any:
		out := make([]any, 0, len(x))
		ok := true
		for i, e := range x {
			if msg := attributeScalar(e); msg != "" {
				p.errAt(path, i, len(x), "%s", msg)
				ok = false
				continue
			}
			out = append(out, e)
		}
		return out, ok
	case map[string]any:
		p.errAt(path, -1, 0, "nested tables are not allowed in [attributes]; use a string, number, boolean or an array of those")
		return nil, false
	case []map[string]any:
		p.errAt(path, -1, 0, "arrays of tables are not allowed in [attributes]; use a string, number, boolean or an array of those")
		return nil, false
	}
	if msg := attributeScalar(v); msg != "" {
		p.errAt(path, -1, 0, "%s", msg)
		return nil, false
	}
	return v, true
}

// attributeScalar says what is wrong with v as a scalar attribute value, or
// returns "".
func attributeScalar(v any) string {
	switch x := v.(type) {
	case string, int64, bool:
		return ""
	case float64:
		if math.IsNaN(x) {
			return "nan is not allowed as an attribute value"
		}
		return ""
	case time.Time:
		return "dates and times are not allowed in [attributes]; quote the value to keep it as a string"
	case []any:
		return "arrays inside arrays are not allowed in [attributes]"
	case map[string]any:
		return "tables are not allowed in [attributes]"
	}
	return fmt.Sprintf("%s is not allowed in [attributes]", describe(v))
}

// validName reports whether s is 1..64 bytes of [A-Za-z0-9._-].
func validName(s string) bool {
	if len(s) == 0 || len(s) > maxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// describe names the TOML type of a decoded value, with the value if short.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return "string " + text.QuoteShort(x)
	case int64:
		return "integer " + strconv.FormatInt(x, 10)
	case float64:
		return "float " + formatFloat(x)
	case bool:
		return "boolean " + strconv.FormatBool(x)
	case time.Time:
		return "a date/time"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	case []map[string]any:
		return "an array of tables"
	}
	return fmt.Sprintf("a value of type %T", v)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// suggest returns the known key closest to the unknown key path, or "".
func suggest(path []string) string {
	for _, k := range path {
		if len(k) > 40 {
			return ""
		}
	}
	full := strings.ToLower(strings.Join(path, "."))
	best, bestD := "", 3
	for _, k := range allKeys {
		if d := text.EditDistance(full, k); d < bestD && 2*d < len(k) {
			best, bestD = k, d
		}
	}
	if best != "" {
		return best
	}
	// The right key in the wrong table, such as "interval" at the top.
	leaf := strings.ToLower(path[len(path)-1])
	for _, k := range allKeys {
		kl := k[strings.LastIndexByte(k, '.')+1:]
		if d := text.EditDistance(leaf, kl); d < bestD && 3*d < len(kl) {
			best, bestD = k, d
		}
	}
	return best
}

// Line lookup.
//
// BurntSushi/toml records the position of every key but does not export
// it. It does put it in the ParseError it returns when a toml.Unmarshaler
// fails: the error is positioned at the key being decoded. The document is
// decoded once into a toml.Primitive; to find the line of a key path, the
// tables along the path are decoded into map[string]toml.Primitive (cached)
// and the key's Primitive is then decoded into lineProbe, whose
// UnmarshalTOML always fails. (Unlike a reflect.StructOf struct this needs
// no struct tags, so keys with commas, empty keys, "-" and keys differing
// only in case are all found exactly.) This works for keys in [tables],
// dotted keys and keys in inline tables. Fallbacks: see lineOf and
// elemLine; a key of repeated [[array.of.tables]] headers gets the line of
// the last header.

// lineProbe is a toml.Unmarshaler that always fails, to learn positions.
type lineProbe struct{}

var errLineProbe = errors.New("line probe")

// UnmarshalTOML implements toml.Unmarshaler by failing.
func (lineProbe) UnmarshalTOML(any) error { return errLineProbe }

// primTable returns the table at path decoded into Primitives, or nil.
func (p *propParser) primTable(path []string) map[string]toml.Primitive {
	ck := toml.Key(path).String()
	if t, ok := p.tables[ck]; ok {
		return t
	}
	prim := p.root
	if len(path) > 0 {
		parent := p.primTable(path[:len(path)-1])
		pr, ok := parent[path[len(path)-1]]
		if !ok {
			p.tables[ck] = nil
			return nil
		}
		prim = pr
	}
	var t map[string]toml.Primitive
	if err := p.md.PrimitiveDecode(prim, &t); err != nil {
		t = nil
	}
	p.tables[ck] = t
	return t
}

// probe returns the line and byte offset toml records for the key at path
// (0, 0 if it records none). The offset is that of the value for "key =
// value" lines (just after the "[" of an array), of the key inside inline
// tables, and of the header for [tables].
func (p *propParser) probe(path []string) (line, start int) {
	if len(path) == 0 || p.tables == nil {
		return 0, 0
	}
	prim, ok := p.primTable(path[:len(path)-1])[path[len(path)-1]]
	if !ok {
		return 0, 0
	}
	var pe toml.ParseError
	if err := p.md.PrimitiveDecode(prim, lineProbe{}); errors.As(err, &pe) {
		return pe.Position.Line, pe.Position.Start
	}
	return 0, 0
}

// lineOf returns the line of the key at path. Tables created implicitly
// (the "a" of "[a.b]" or of "a.b = 1") have no position of their own; they
// get the line of their first key in the file. If that fails too, the
// enclosing key's line is used.
func (p *propParser) lineOf(path []string) int {
	for n := len(path); n > 0; n-- {
		if l, _ := p.probe(path[:n]); l > 0 {
			return l
		}
		tries := 0
		for _, k := range p.md.Keys() {
			if len(k) > n && slices.Equal(k[:n], path[:n]) {
				if l, _ := p.probe(k); l > 0 {
					return l
				}
				if tries++; tries >= 4 {
					break
				}
			}
		}
	}
	return 0
}

// elemLine returns the line of element idx of the n-element array at path:
// the line where the element starts if the array is written as "key = [...]",
// otherwise (such as in an inline table) the line of the key.
func (p *propParser) elemLine(path []string, idx, n int) int {
	line, start := p.probe(path)
	if line == 0 {
		return p.lineOf(path)
	}
	if start <= 0 || start > len(p.src) || p.src[start-1] != '[' || lineAt(p.src, start-1) != line {
		return line
	}
	starts := arrayElemStarts(p.src, start)
	if len(starts) != n || idx >= n {
		return line
	}
	return lineAt(p.src, starts[idx])
}

// lineAt returns the 1-based line of byte offset off in src.
func lineAt(src string, off int) int {
	off = min(max(off, 0), len(src))
	return 1 + strings.Count(src[:off], "\n")
}

// arrayElemStarts returns the offsets of the top-level elements of the TOML
// array whose text starts at src[pos:], just after its "[". It returns nil
// if the array does not end.
func arrayElemStarts(src string, pos int) []int {
	starts := []int{}
	depth, expect := 1, true
	for i := pos; i < len(src); {
		c := src[i]
		switch c {
		case ' ', '\t', '\r', '\n':
			i++
			continue
		case '#':
			j := strings.IndexByte(src[i:], '\n')
			if j < 0 {
				return nil
			}
			i += j
			continue
		case ',':
			if depth == 1 {
				expect = true
			}
			i++
			continue
		case ']', '}':
			depth--
			i++
			if depth == 0 {
				return starts
			}
			continue
		}
		if depth == 1 && expect {
			starts = append(starts, i)
			expect = false
		}
		switch c {
		case '[', '{':
			depth++
			i++
		case '"', '\'':
			i = skipString(src, i)
		default:
			i++
		}
	}
	return nil
}

// skipString returns the offset just after the TOML string (basic, literal,
// or their multi-line forms) that starts at src[i]. A single-line string
// that does not end stops at the newline.
func skipString(src string, i int) int {
	q := src[i]
	triple := strings.Repeat(string(q), 3)
	if strings.HasPrefix(src[i:], triple) {
		for j := i + 3; j < len(src); {
			if q == '"' && src[j] == '\\' {
				j += 2
				continue
			}
			if strings.HasPrefix(src[j:], triple) {
				j += 3
				for k := 0; k < 2 && j < len(src) && src[j] == q; k++ {
					j++
				}
				return j
			}
			j++
		}
		return len(src)
	}
	for j := i + 1; j < len(src); {
		switch src[j] {
		case '\\':
			if q == '"' {
				j += 2
				continue
			}
		case q:
			return j + 1
		case '\n':
			return j
		}
		j++
	}
	return len(src)
}

// checkNesting scans src for brackets nested deeper than maxNesting and
// for keys with more than maxKeyParts dots, which the TOML decoder handles
// in quadratic time and memory. It returns the offset and a message, or ""
// if src is fine. Strings and comments are skipped; a dot counts towards a
// key when only key characters, strings and blanks separate it from the
// previous dot.
func checkNesting(src string) (int, string) {
	depth, dots := 0, 0
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '#':
			j := strings.IndexByte(src[i:], '\n')
			if j < 0 {
				return 0, ""
			}
			i += j
			continue
		case c == '"' || c == '\'':
			i = skipString(src, i)
			continue
		case c == '[' || c == '{':
			depth++
			dots = 0
			if depth > maxNesting {
				return i, fmt.Sprintf("values are nested more than %d levels deep", maxNesting)
			}
		case c == ']' || c == '}':
			depth = max(depth-1, 0)
			dots = 0
		case c == '.':
			dots++
			if dots > maxKeyParts {
				return i, fmt.Sprintf("key has more than %d dotted parts", maxKeyParts+1)
			}
		case c == ' ' || c == '\t' || c == '_' || c == '-' ||
			c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9':
		default:
			dots = 0
		}
		i++
	}
	return 0, ""
}

// Render returns p as a TOML properties file, with every key written:
// durations as strings, memory as bytes, superiors and fallback_superiors
// as full multiaddrs ending in /p2p/<peer id>, attributes sorted by key.
//
// Paths are written so that ParseProperties(p.File, ...) resolves them to
// the stored values again: relative stored paths (which ParseProperties
// produces only when p.File is relative) are written relative to
// filepath.Dir(p.File); absolute ones, and all paths when p.File is "",
// are written as stored. So for every p returned by ParseProperties(file,
// data, host), ParseProperties(p.File, p.Render(), anyHost) returns a value
// reflect.DeepEqual to p.
func (p *Properties) Render() []byte {
	var b strings.Builder
	kv := func(k, v string) {
		b.WriteString(k)
		b.WriteString(" = ")
		b.WriteString(v)
		b.WriteByte('\n')
	}
	kv("name", quoteTOML(p.Name))
	kv("data_dir", quoteTOML(p.renderPath(p.DataDir)))
	kv("identity", quoteTOML(p.renderPath(p.Identity)))
	kv("listen", stringArray(p.Listen))
	kv("superiors", stringArray(peerAddrStrings(p.Superiors)))
	kv("fallback_superiors", stringArray(peerAddrStrings(p.FallbackSuperiors)))
	kv("prefer_configured_superior", strconv.FormatBool(p.PreferConfiguredSuperior))
	kv("admins", stringArray(p.Admins))
	kv("private_network_key", quoteTOML(p.renderPath(p.PrivateNetworkKey)))
	kv("plugins_dir", quoteTOML(p.renderPath(p.PluginsDir)))
	kv("log_level", quoteTOML(p.LogLevel))
	if p.Policy != "" {
		kv("policy", quoteTOML(p.Policy))
	}

	b.WriteString("\n[heartbeat]\n")
	kv("interval", quoteTOML(p.Heartbeat.Interval.String()))
	kv("misses", strconv.Itoa(p.Heartbeat.Misses))

	b.WriteString("\n[dial]\n")
	kv("retry_initial", quoteTOML(p.Dial.RetryInitial.String()))
	kv("retry_max", quoteTOML(p.Dial.RetryMax.String()))

	b.WriteString("\n[failover]\n")
	if p.Failover.Settle > 0 { // hand-made Properties may leave it zero: the default then applies
		kv("settle", quoteTOML(p.Failover.Settle.String()))
	}

	b.WriteString("\n[resources]\n")
	kv("cpus", strconv.Itoa(p.Resources.CPUs))
	kv("memory", strconv.FormatUint(p.Resources.Memory, 10))
	kv("memory_free", strconv.FormatUint(p.Resources.MemoryFree, 10))
	if p.Resources.CPUUtil != nil {
		kv("cpu_util", formatFloat(*p.Resources.CPUUtil))
	}
	kv("net_mbps", formatFloat(p.Resources.NetMbps))
	if p.Resources.Refresh > 0 { // hand-made Properties may leave it zero: the default then applies
		kv("refresh", quoteTOML(p.Resources.Refresh.String()))
	}

	b.WriteString("\n[reservations]\n")
	for _, d := range []struct {
		k string
		v time.Duration
	}{
		{"hold_timeout", p.Reservations.HoldTimeout}, {"lease", p.Reservations.Lease},
		{"min_lease", p.Reservations.MinLease}, {"max_lease", p.Reservations.MaxLease},
		{"retain", p.Reservations.Retain},
	} {
		if d.v > 0 {
			kv(d.k, quoteTOML(d.v.String()))
		}
	}
	if p.Reservations.MaxLive > 0 {
		kv("max_live", strconv.Itoa(p.Reservations.MaxLive))
	}

	b.WriteString("\n[tokens]\n")
	for _, k := range sortedKeys(p.Tokens) {
		kv(quoteTOML(k), strconv.FormatInt(p.Tokens[k], 10))
	}

	b.WriteString("\n[access]\n")
	for _, k := range sortedKeys(p.Access) {
		kv(quoteTOML(k), stringArray(p.Access[k]))
	}

	b.WriteString("\n[attributes]\n")
	for _, k := range sortedKeys(p.Attributes) {
		kv(renderKey(k), renderValue(reflect.ValueOf(p.Attributes[k]), true))
	}
	return []byte(b.String())
}

// peerAddrStrings writes peers and their addresses as full multiaddrs
// ending in /p2p/<peer id>.
func peerAddrStrings(pas []PeerAddrs) []string {
	var out []string
	for _, pa := range pas {
		for _, a := range pa.Addrs {
			out = append(out, a+"/p2p/"+pa.Peer)
		}
	}
	return out
}

// renderPath writes a stored path so that resolving it again against the
// directory of p.File gives the stored path.
func (p *Properties) renderPath(s string) string {
	if p.File == "" || s == "" || filepath.IsAbs(s) {
		return s
	}
	rel, err := filepath.Rel(filepath.Dir(p.File), s)
	if err != nil {
		return s
	}
	return rel
}

// stringArray renders strings as a TOML array, one element a line if
// there are several.
func stringArray(ss []string) string {
	switch len(ss) {
	case 0:
		return "[]"
	case 1:
		return "[" + quoteTOML(ss[0]) + "]"
	}
	var b strings.Builder
	b.WriteString("[\n")
	for _, s := range ss {
		b.WriteString("  ")
		b.WriteString(quoteTOML(s))
		b.WriteString(",\n")
	}
	b.WriteString("]")
	return b.String()
}

// renderValue renders an attribute value. Values of ParseProperties are
// string, int64, float64, bool and []any of those; other Go values (from
// hand-made Properties) are rendered as the nearest TOML value, or as a
// string if there is none.
func renderValue(v reflect.Value, top bool) string {
	switch v.Kind() {
	case reflect.String:
		return quoteTOML(v.String())
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if v.Uint() <= math.MaxInt64 {
			return strconv.FormatUint(v.Uint(), 10)
		}
		return quoteTOML(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		return formatFloat(v.Float())
	case reflect.Interface:
		if !v.IsNil() {
			return renderValue(v.Elem(), top)
		}
	case reflect.Slice, reflect.Array:
		if top {
			parts := make([]string, v.Len())
			for i := range parts {
				parts[i] = renderValue(v.Index(i), false)
			}
			return "[" + strings.Join(parts, ", ") + "]"
		}
	}
	if !v.IsValid() {
		return `""`
	}
	return quoteTOML(fmt.Sprint(v.Interface()))
}

// formatFloat renders f as a TOML float that parses back to f.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// renderKey renders k as a TOML key: bare if it can be, else quoted.
func renderKey(k string) string {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return quoteTOML(k)
		}
	}
	if k == "" {
		return `""`
	}
	return k
}

// quoteTOML renders s as a TOML basic string.
func quoteTOML(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Bounds of the [reservations] and [tokens] tables.
const (
	maxTokens     = 32 // declared token kinds
	maxTokenCount = 1 << 40
	maxAccessList = 256
	maxLiveCap    = 10_000_000
)

// reservations checks [reservations], [tokens] and [access].
func (p *propParser) reservations(doc map[string]any, props *Properties) {
	if t, ok := p.subTable(doc, "reservations"); ok {
		r := &props.Reservations
		for _, d := range []struct {
			k      string
			to     *time.Duration
			lo, hi time.Duration
		}{
			{"hold_timeout", &r.HoldTimeout, 100 * time.Millisecond, time.Hour},
			{"lease", &r.Lease, time.Second, 30 * 24 * time.Hour},
			{"min_lease", &r.MinLease, 100 * time.Millisecond, 30 * 24 * time.Hour},
			{"max_lease", &r.MaxLease, time.Second, 365 * 24 * time.Hour},
			{"retain", &r.Retain, time.Second, 30 * 24 * time.Hour},
		} {
			if v, ok := t[d.k]; ok {
				if x, ok := p.duration([]string{"reservations", d.k}, v, d.lo, d.hi); ok {
					*d.to = x
				}
			}
		}
		if v, ok := t["max_live"]; ok {
			if n, ok := p.integer([]string{"reservations", "max_live"}, v, 1, maxLiveCap, ""); ok {
				r.MaxLive = int(n)
			}
		}
		minL, maxL, lease := r.MinLease, r.MaxLease, r.Lease
		if minL == 0 {
			minL = time.Second
		}
		if maxL == 0 {
			maxL = 24 * time.Hour
		}
		if lease == 0 {
			lease = 5 * time.Minute
		}
		switch {
		case minL > maxL:
			p.errAt([]string{"reservations", "min_lease"}, -1, 0, "%s is longer than reservations.max_lease (%s)", minL, maxL)
		case lease < minL || lease > maxL:
			p.errAt([]string{"reservations", "lease"}, -1, 0, "%s is outside [min_lease %s, max_lease %s]", lease, minL, maxL)
		}
	}

	if v, ok := doc["tokens"]; ok {
		if t, ok := p.table([]string{"tokens"}, v); ok {
			p.tokens([]string{"tokens"}, t, props.Tokens)
		}
	}

	if v, ok := doc["access"]; ok {
		if t, ok := p.table([]string{"access"}, v); ok {
			for _, k := range sortedKeys(t) {
				path := []string{"access", k}
				if k != "cpus" && k != "mem" {
					if _, ok := props.Tokens[k]; !ok {
						msg := fmt.Sprintf("%s is not a reservable kind: use cpus, mem or a kind declared in [tokens]", text.QuoteShort(k))
						kinds := append([]string{"cpus", "mem"}, sortedKeys(props.Tokens)...)
						if c := text.Closest(k, kinds, 3); c != "" {
							msg += fmt.Sprintf("; did you mean %q?", c)
						}
						p.errAt(path, -1, 0, "%s", msg)
						continue
					}
				}
				arr, ok := p.array(path, t[k])
				if !ok {
					continue
				}
				if len(arr) > maxAccessList {
					p.errAt(path, -1, 0, "has %d entries, limit %d", len(arr), maxAccessList)
					continue
				}
				list := []string{}
				for i, e := range arr {
					s, ok := e.(string)
					if !ok {
						p.errAt(path, i, len(arr), "expected \"*\", \"user:NAME\" or \"peer:ID\", got %s", describe(e))
						continue
					}
					entry, err := accessEntry(s)
					if err != nil {
						p.errAt(path, i, len(arr), "%v", err)
						continue
					}
					if !slices.Contains(list, entry) {
						list = append(list, entry)
					}
				}
				props.Access[k] = list
			}
		}
	}
}

// tokens reads a [tokens] table (or a nested one) into out.
func (p *propParser) tokens(path []string, t map[string]any, out map[string]int64) {
	for _, k := range sortedKeys(t) {
		kp := append(slices.Clip(path), k)
		name := strings.Join(kp[1:], ".")
		if sub, ok := t[k].(map[string]any); ok {
			if len(kp) >= maxKeyParts {
				p.errAt(kp, -1, 0, "tokens nest too deep")
				continue
			}
			p.tokens(kp, sub, out)
			continue
		}
		if !validName(k) || name == "cpus" || name == "mem" || len(name) > maxNameLen {
			p.errAt(kp, -1, 0, "%s is not a valid token name: use 1 to %d of A-Z a-z 0-9 . _ - (cpus and mem are built in)", text.QuoteShort(name), maxNameLen)
			continue
		}
		if len(out) >= maxTokens {
			p.errAt(kp, -1, 0, "more than %d token kinds", maxTokens)
			return
		}
		if n, ok := p.integer(kp, t[k], 0, maxTokenCount, ""); ok {
			out[name] = n
		}
	}
}

// accessEntry checks one [access] list entry and returns its canonical
// form ("*", "user:NAME" or "peer:ID").
func accessEntry(s string) (string, error) {
	e, err := reservation.ParseAccessEntry(s)
	if err != nil || !strings.HasPrefix(e, "peer:") {
		return e, err
	}
	pid, err := ParsePeerID(e[len("peer:"):])
	if err != nil {
		return "", fmt.Errorf("%s is not \"*\", \"user:NAME\", \"peer:ID\" or a peer id: %v", text.QuoteShort(s), err)
	}
	return "peer:" + pid, nil
}
