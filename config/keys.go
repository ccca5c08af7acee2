package config

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/reservation"
)

// key is one key of the properties file: its dotted path, what it means,
// whether `admin set` may change it on a running manager, and how its value
// is read from TOML, checked, defaulted and written. The table below is the
// one place that knows the file: Parse, Validate, Set, Render and the
// reference (Keys) all walk it.
type key struct {
	path     string
	doc      string
	settable bool
	// overrides is the query variable whose live value the key declares
	// instead of measuring it ("cpu_util" for resources.cpu_util).
	overrides string
	// decode reads the TOML value v into c; problems go to d.
	decode func(d *decoder, path []string, v any, c *Config)
	// check says what is wrong with c's value ("" if nothing).
	check func(c *Config) string
	// isZero, setDefault: Validate fills zero values with the default.
	isZero     func(c *Config) bool
	setDefault func(c *Config)
	// format writes c's value as TOML (a value, or for a table the lines
	// after its header); def is the default in the same form, for docs.
	format func(c *Config) string
	def    string
	open   bool // a table of free keys ([tokens], [access], [attributes])
}

// decodeChecked reads v with parse and bounds it with check; a value
// that fails either is reported at p and not used (false).
func decodeChecked[T any](d *decoder, p []string, v any, parse func(v any) (T, string), check func(T) string) (T, bool) {
	x, msg := parse(v)
	if msg == "" {
		msg = check(x)
	}
	if msg != "" {
		d.errAt(p, -1, "%s", msg)
		return x, false
	}
	return x, true
}

// scalar makes the key of one value of type T at get(c): parse reads it
// from TOML (returning a message if it cannot), check bounds it, show
// writes it as TOML.
func scalar[T comparable](path string, get func(*Config) *T, def T, settable bool,
	parse func(v any) (T, string), check func(T) string, show func(T) string, doc string) key {
	var zero T
	return key{
		path: path, doc: doc, settable: settable,
		decode: func(d *decoder, p []string, v any, c *Config) {
			if x, ok := decodeChecked(d, p, v, parse, check); ok {
				*get(c) = x
			}
		},
		check:      func(c *Config) string { return check(*get(c)) },
		isZero:     func(c *Config) bool { return *get(c) == zero },
		setDefault: func(c *Config) { *get(c) = def },
		format:     func(c *Config) string { return show(*get(c)) },
		def:        show(def),
	}
}

func durationKey(path string, get func(*Config) *time.Duration, def, lo, hi time.Duration, settable bool, doc string) key {
	return scalar(path, get, def, settable, parseDuration, func(d time.Duration) string {
		switch {
		case d < lo:
			return fmt.Sprintf("%s is too short; the minimum is %s", d, lo)
		case d > hi:
			return fmt.Sprintf("%s is too long; the maximum is %s", d, hi)
		}
		return ""
	}, func(d time.Duration) string { return strconv.Quote(d.String()) }, doc)
}

// intKey is an integer in lo..hi; 0 is accepted too if zero is not "" (it
// then says what 0 means).
func intKey(path string, get func(*Config) *int, def, lo, hi int, zero string, settable bool, doc string) key {
	return scalar(path, get, def, settable, func(v any) (int, string) {
		n, ok := v.(int64)
		if !ok {
			return 0, "expected an integer, got " + describe(v)
		}
		if n < math.MinInt32 || n > math.MaxInt32 {
			return 0, fmt.Sprintf("must be between %d and %d%s, got %d", lo, hi, zero, n)
		}
		return int(n), ""
	}, func(n int) string {
		if n == 0 && zero != "" || n >= lo && n <= hi {
			return ""
		}
		return fmt.Sprintf("must be between %d and %d%s, got %d", lo, hi, zero, n)
	}, strconv.Itoa, doc)
}

// parseSize reads a size: bytes, or a string such as "16GiB".
func parseSize(v any) (uint64, string) {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return 0, fmt.Sprintf("must not be negative, got %d", x)
		}
		return uint64(x), ""
	case string:
		n, err := text.ParseSize(x)
		if err != nil {
			return 0, fmt.Sprintf("invalid size %s: %v", text.QuoteShort(x), err)
		}
		return n, ""
	}
	return 0, `expected a size such as "16GiB" or an integer number of bytes, got ` + describe(v)
}

// formatSize writes a size in whole GiB or MiB where it is one, else
// in bytes.
func formatSize(n uint64) string {
	switch {
	case n != 0 && n%(1<<30) == 0:
		return strconv.Quote(strconv.FormatUint(n>>30, 10) + "GiB")
	case n%(1<<20) == 0:
		return strconv.Quote(strconv.FormatUint(n>>20, 10) + "MiB")
	}
	return strconv.FormatUint(n, 10)
}

func sizeKey(path string, get func(*Config) *uint64, doc string) key {
	return scalar(path, get, 0, false, parseSize, func(n uint64) string {
		if n != 0 && n < 1<<20 {
			return fmt.Sprintf("must be at least 1 MiB (%d bytes) or 0 to detect, got %d bytes", 1<<20, n)
		}
		return ""
	}, func(n uint64) string { return strconv.FormatUint(n, 10) }, doc)
}

// liveKey declares a live value queries read as variable (resources.NAME)
// instead of measuring it: absent (nil) means measured; any value in range,
// 0 included, is declared.
func liveKey[T any](path, variable string, get func(*Config) **T, parse func(v any) (T, string), check func(T) string,
	show func(T) string, doc string) key {
	return key{
		path: path, doc: doc, overrides: variable,
		decode: func(d *decoder, p []string, v any, c *Config) {
			if x, ok := decodeChecked(d, p, v, parse, check); ok {
				*get(c) = &x
			}
		},
		check: func(c *Config) string {
			if *get(c) == nil {
				return ""
			}
			return check(**get(c))
		},
		isZero: func(*Config) bool { return false }, setDefault: func(*Config) {},
		format: func(c *Config) string {
			if *get(c) == nil {
				return ""
			}
			return show(**get(c))
		},
	}
}

// maxSeconds bounds declared uptime_s and idle_s: about 317 years.
const maxSeconds = 1e10

// parseSeconds reads a number of seconds, or a duration string ("20m").
func parseSeconds(v any) (float64, string) {
	if s, ok := v.(string); ok {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, text.QuoteShort(s) + ` is not a duration; write seconds (1200) or a duration such as "20m"`
		}
		return d.Seconds(), ""
	}
	f, msg := parseNumber(v)
	if msg != "" {
		return 0, "expected a number of seconds or a duration such as \"20m\", got " + describe(v)
	}
	return f, ""
}

// parseWholeSeconds is parseSeconds, whole.
func parseWholeSeconds(v any) (int64, string) {
	f, msg := parseSeconds(v)
	if msg != "" {
		return 0, msg
	}
	if f != math.Trunc(f) {
		return 0, fmt.Sprintf("%v is not a whole number of seconds", f)
	}
	if math.IsNaN(f) || f < 0 || f > maxSeconds {
		return 0, fmt.Sprintf("%v is out of range 0 to %v", f, maxSeconds)
	}
	return int64(f), ""
}

// parseAnySize is parseSize, with an upper bound (queries see int64).
func parseAnySize(v any) (uint64, string) {
	n, msg := parseSize(v)
	if msg == "" && n > 1<<62 {
		msg = fmt.Sprintf("%d bytes is more than the most, 4 EiB", n)
	}
	return n, msg
}

func noCheck[T any](T) string { return "" }

func floatKey(path string, get func(*Config) *float64, hi float64, doc string) key {
	return scalar(path, get, 0, false, parseNumber, inRange(hi), formatFloat, doc)
}

func parseNumber(v any) (float64, string) {
	switch n := v.(type) {
	case int64:
		return float64(n), ""
	case float64:
		return n, ""
	}
	return 0, "expected a number, got " + describe(v)
}

func inRange(hi float64) func(float64) string {
	return func(f float64) string {
		if math.IsNaN(f) || f < 0 || f > hi {
			return fmt.Sprintf("%v is out of range 0 to %v", f, hi)
		}
		return ""
	}
}

func stringKey(path string, get func(*Config) *string, def string, settable bool, check func(string) string, doc string) key {
	return scalar(path, get, def, settable, func(v any) (string, string) {
		s, ok := v.(string)
		if !ok {
			return "", "expected a string, got " + describe(v)
		}
		return s, ""
	}, check, quoteTOML, doc)
}

// pathKey is a file or directory, resolved against the properties file's
// directory by decode; emptyOK says whether "" (none) is allowed.
func pathKey(path string, get func(*Config) *string, def string, emptyOK bool, doc string) key {
	k := stringKey(path, get, def, false, func(s string) string {
		switch {
		case s == "" && !emptyOK:
			return "must not be empty"
		case strings.ContainsRune(s, 0):
			return "must not contain NUL characters"
		}
		return ""
	}, doc)
	decode := k.decode
	k.decode = func(d *decoder, p []string, v any, c *Config) {
		if s, ok := v.(string); ok && s != "" {
			v = d.resolve(s)
		}
		decode(d, p, v, c)
	}
	k.format = func(c *Config) string { return quoteTOML(relativePath(c.File, *get(c))) }
	return k
}

// listKey is an array of strings, each read by elem (which returns the
// element's canonical form or a message), with duplicates refused.
func listKey(path string, get func(*Config) *[]string, def []string, what, noun string,
	elem func(s string) (string, string), check func([]string) string, doc string) key {
	return key{
		path: path, doc: doc,
		decode: func(d *decoder, p []string, v any, c *Config) {
			arr, ok := d.array(p, v)
			if !ok {
				return
			}
			out, bad := []string{}, false
			for i, e := range arr {
				s, ok := e.(string)
				if !ok {
					d.errAt(p, i, "expected %s string, got %s", what, describe(e))
					bad = true
					continue
				}
				x, msg := elem(s)
				if j := slices.Index(out, x); msg == "" && j >= 0 {
					msg = fmt.Sprintf("duplicate %s %s (same as %s[%d])", noun, x, path, j)
				}
				if msg != "" {
					d.errAt(p, i, "%s", msg)
					bad = true
					continue
				}
				out = append(out, x)
			}
			if msg := check(out); msg != "" && !bad {
				d.errAt(p, -1, "%s", msg)
			}
			*get(c) = out
		},
		check:      func(c *Config) string { return check(*get(c)) },
		isZero:     func(c *Config) bool { return *get(c) == nil },
		setDefault: func(c *Config) { *get(c) = slices.Clone(def) },
		format:     func(c *Config) string { return stringArray(*get(c)) },
		def:        stringArray(def),
	}
}

// peersKey is superiors or fallback_superiors: full multiaddrs ending in
// /p2p/<peer id>, grouped by peer in file order. A peer that is in the key
// at notIn (read before) is refused: a fallback is only tried when a
// superior fails.
func peersKey(path, notIn string, get func(*Config) *[]peeraddr.PeerAddrs, doc string) key {
	return key{
		path: path, doc: doc,
		decode: func(d *decoder, p []string, v any, c *Config) {
			arr, ok := d.array(p, v)
			if !ok {
				return
			}
			out := []peeraddr.PeerAddrs{}
			for i, e := range arr {
				s, ok := e.(string)
				if !ok {
					d.errAt(p, i, "expected a multiaddr string, got %s", describe(e))
					continue
				}
				pa, err := peeraddr.ParsePeerMaddr(s)
				if err != nil {
					d.errAt(p, i, "%s", strings.TrimPrefix(text.Human(err), "bad manager address: "+strconv.Quote(s)+": "))
					continue
				}
				if j, dup := d.first[notIn+"\x00"+pa.Peer]; dup && notIn != "" {
					d.errAt(p, i, "peer %s is already in %s[%d]; a fallback is only tried when a superior fails", pa.Peer, notIn, j)
					continue
				}
				if _, seen := d.first[path+"\x00"+pa.Peer]; !seen {
					d.first[path+"\x00"+pa.Peer] = i
				}
				j := slices.IndexFunc(out, func(x peeraddr.PeerAddrs) bool { return x.Peer == pa.Peer })
				if j < 0 {
					out = append(out, peeraddr.PeerAddrs{Peer: pa.Peer, Addrs: []string{}})
					j = len(out) - 1
				}
				if !slices.Contains(out[j].Addrs, pa.Addrs[0]) {
					out[j].Addrs = append(out[j].Addrs, pa.Addrs[0])
				}
			}
			*get(c) = out
		},
		check:      func(*Config) string { return "" },
		isZero:     func(c *Config) bool { return *get(c) == nil },
		setDefault: func(c *Config) { *get(c) = []peeraddr.PeerAddrs{} },
		format: func(c *Config) string {
			var s []string
			for _, pa := range *get(c) {
				for _, a := range pa.Addrs {
					s = append(s, a+"/p2p/"+pa.Peer)
				}
			}
			return stringArray(s)
		},
		def: "[]",
	}
}

// tableKey is a table of free keys (tokens, access, attributes).
func tableKey(path string, get func(*Config) any, decode func(d *decoder, t map[string]any, c *Config),
	format func(c *Config) string, doc string) key {
	return key{
		path: path, doc: doc,
		decode: func(d *decoder, p []string, v any, c *Config) {
			if t, ok := d.table(p, v); ok {
				decode(d, t, c)
			}
		},
		check:      func(*Config) string { return "" },
		isZero:     func(c *Config) bool { return reflect.ValueOf(get(c)).IsNil() },
		setDefault: func(c *Config) { reflect.ValueOf(get(c)).Elem().Set(reflect.MakeMap(reflect.TypeOf(get(c)).Elem())) },
		format:     format,
		open:       true,
	}
}

// identityKey is identity, whose default follows data_dir.
func identityKey() key {
	k := pathKey("identity", func(c *Config) *string { return &c.Identity }, "", false,
		"The Ed25519 identity key, created (0600) on first run when missing, so the peer id stays the same. Default: <data_dir>/identity.key.")
	k.setDefault = func(c *Config) { c.Identity = filepath.Join(c.DataDir, DefaultIdentityFile) }
	k.def = `"<data_dir>/identity.key"`
	return k
}

// ownerRankKey is rank, written only when set.
func ownerRankKey() key {
	k := stringKey("rank", func(c *Config) *string { return &c.Rank }, "", false, func(s string) string {
		if len(s) > 4096 {
			return fmt.Sprintf("rank is %d bytes; the limit is 4096", len(s))
		}
		return ""
	}, `The owner's rank: a CEL number over this host's values and the request, how much the owner wants it (higher is better), e.g. request.user in ["raman", "miron"] ? 10 : 0. It is computed before the policy, which reads it as owner_rank (owner_rank >= 10 || load1 < 0.3), and may not read owner_rank itself. Queries report it with each offer (owner_rank), beside the asker's own rank, and offers the asker ranks alike come best owner's rank first. Default: none.`)
	k.format = func(c *Config) string {
		if c.Rank == "" {
			return ""
		}
		return quoteTOML(c.Rank)
	}
	return k
}

// policyKey is policy, written only when set.
func policyKey() key {
	k := stringKey("policy", func(c *Config) *string { return &c.Policy }, "", false, func(s string) string {
		if len(s) > 4096 {
			return fmt.Sprintf("policy is %d bytes; the limit is 4096", len(s))
		}
		return ""
	}, "The owner's policy: a CEL expression over this host's values, the request (request.user, request.cpus, request.mem, request.attrs) and the owner's rank of it (owner_rank); offers go only to requests it accepts. Default: none.")
	k.format = func(c *Config) string {
		if c.Policy == "" {
			return ""
		}
		return quoteTOML(c.Policy)
	}
	return k
}

// DefaultIdentityFile is the identity key's name inside data_dir.
const DefaultIdentityFile = "identity.key"

// Levels of log_level.
var logLevels = []string{"debug", "info", "warn", "error"}

// DefaultListen is the listen address when none is given.
const DefaultListen = "/ip4/0.0.0.0/tcp/4001"

// table is every key of the properties file, in the order Render writes
// them and the reference lists them.
var table = []key{
	stringKey("name", func(c *Config) *string { return &c.Name }, "", false, checkName,
		"The manager's name, shown in trees, logs and status: 1 to 64 of A-Z a-z 0-9 . _ -. Default: the host name."),
	pathKey("data_dir", func(c *Config) *string { return &c.DataDir }, "/var/lib/gridmgr", false,
		"Where the manager keeps its identity key, lock, addr file, reservations.db, relations.json and audit.log (created 0700)."),
	identityKey(),
	listKey("listen", func(c *Config) *[]string { return &c.Listen }, []string{DefaultListen}, "a multiaddr", "listen address", listenAddr,
		func(l []string) string {
			if len(l) == 0 {
				return "at least one listen address is needed; remove the key to listen on " + DefaultListen
			}
			return ""
		}, "TCP multiaddrs to listen on (/ip4 or /ip6, no /p2p part)."),
	peersKey("superiors", "", func(c *Config) *[]peeraddr.PeerAddrs { return &c.Superiors },
		"Superiors to join, each a full multiaddr ending in /p2p/<peer id>; several entries with one peer id are several addresses of it. Default: none (a root)."),
	peersKey("fallback_superiors", "superiors", func(c *Config) *[]peeraddr.PeerAddrs { return &c.FallbackSuperiors },
		"Tried in order when a superior fails and none of its ancestors takes this manager; written like superiors, and no peer may be in both."),
	scalar("prefer_configured_superior", func(c *Config) *bool { return &c.PreferConfiguredSuperior }, false, true, parseBool,
		func(bool) string { return "" }, strconv.FormatBool,
		"true: after a failover, move back to a configured superior once it has been up for failover.settle. false: stay where failover put it."),
	listKey("admins", func(c *Config) *[]string { return &c.Admins }, []string{}, "a peer id", "admin", func(s string) (string, string) {
		id, err := peeraddr.ParsePeerID(s)
		if err != nil {
			return "", fmt.Sprintf("invalid peer id %s: %s", text.QuoteShort(s), peerIDProblem(s, err))
		}
		return id, ""
	}, func([]string) string { return "" }, "Peer ids allowed to change the manager (admin commands, plugins) and to act on anyone's reservation."),
	pathKey("private_network_key", func(c *Config) *string { return &c.PrivateNetworkKey }, "", true,
		"A libp2p pre-shared key file (gridmgr keygen --psk): only peers holding it can connect. Default: none (an open grid)."),
	pathKey("plugins_dir", func(c *Config) *string { return &c.PluginsDir }, "", true,
		"Where admin command plugins (executables gridmgr-cmd-NAME) are looked up at call time. Default: none."),
	stringKey("log_level", func(c *Config) *string { return &c.LogLevel }, "info", true, func(s string) string {
		if !slices.Contains(logLevels, s) {
			return fmt.Sprintf("unknown log level %s; use one of %s", text.QuoteShort(s), strings.Join(logLevels, ", "))
		}
		return ""
	}, "debug, info, warn or error."),
	scalar("memory_trim", func(c *Config) *time.Duration { return &c.MemoryTrim }, time.Minute, false, parseDuration, func(d time.Duration) string {
		if d != 0 && (d < 10*time.Second || d > 24*time.Hour) {
			return fmt.Sprintf("must be 0 (never) or between 10s and 24h, got %s", d)
		}
		return ""
	}, func(d time.Duration) string { return strconv.Quote(d.String()) },
		`How often the manager lets go of the pages of its own executable that it has not used since the last time, the first time as soon as it has started: starting touches most of the executable, running needs a fifth of it. They stay in the page cache, which the kernel may reclaim; what is used again comes back at its next use, without a disk read while cached. "0": never (an idle manager then holds about 15 MiB more).`),
	stringKey("os", func(c *Config) *string { return &c.OS }, "", false, checkSystemName,
		`The operating system's name as queries see it (os), e.g. "LINUX" for jobs written for ClassAds. Default: Go's name ("linux"), which go_os always gives.`),
	stringKey("arch", func(c *Config) *string { return &c.Arch }, "", false, checkSystemName,
		`The architecture's name as queries see it (arch), e.g. "INTEL" or "x86_64". Default: Go's name ("amd64"), which go_arch always gives.`),
	stringKey("http_listen", func(c *Config) *string { return &c.HTTPListen }, "", false, checkHTTPListen,
		`Address (host:port) where the manager serves its web UI and Prometheus /metrics, e.g. "127.0.0.1:8150". Default: none (neither is served). Anyone who can reach it can read the grid; changes need the admin token (gridmgr web-token). Requests must name this address in their Host header, or a name of http_hosts.`),
	listKey("http_hosts", func(c *Config) *[]string { return &c.HTTPHosts }, []string{}, "a host name or address", "host", httpHost,
		func(l []string) string {
			if len(l) > maxHTTPHosts {
				return fmt.Sprintf("has %d entries, limit %d", len(l), maxHTTPHosts)
			}
			for i, s := range l {
				if _, msg := httpHost(s); msg != "" {
					return fmt.Sprintf("entry %d: %s", i, msg)
				}
			}
			return ""
		},
		`Other names and addresses the web UI and /metrics answer to, as a request gives them in its Host header: "grid.example.org", "10.0.0.1", "[fd00::1]:8150" (a host name or IP, and a port if only that port may come with it). The address of http_listen (and localhost if it is on loopback; every address of the host if it is 0.0.0.0 or ::) needs no entry; a request that names any other host is refused, so that a web page whose name was pointed at this address (DNS rebinding) cannot read the grid. Add the names a proxy or DNS gives the UI. Default: none.`),
	policyKey(),
	ownerRankKey(),

	durationKey("heartbeat.interval", func(c *Config) *time.Duration { return &c.HeartbeatInterval }, time.Second, 10*time.Millisecond, time.Hour, true,
		"Heartbeats go both ways on every relation at this interval."),
	intKey("heartbeat.misses", func(c *Config) *int { return &c.HeartbeatMisses }, 3, 1, 100, "", true,
		"Missed heartbeats in a row after which a relation is down and a superior failed (one missed: suspect)."),
	durationKey("dial.retry_initial", func(c *Config) *time.Duration { return &c.RetryInitial }, 500*time.Millisecond, 10*time.Millisecond, time.Hour, true,
		"First retry of a superior that is not up; the delay doubles each time, jittered ±20%."),
	durationKey("dial.retry_max", func(c *Config) *time.Duration { return &c.RetryMax }, 30*time.Second, 10*time.Millisecond, 24*time.Hour, true,
		"Cap of that delay; not below dial.retry_initial."),
	durationKey("failover.settle", func(c *Config) *time.Duration { return &c.FailoverSettle }, 30*time.Second, time.Second, time.Hour, true,
		"With prefer_configured_superior: how long a returning superior must stay up before inferiors move back to it."),

	withOverride("cpus", intKey("resources.cpus", func(c *Config) *int { return &c.CPUs }, 0, 1, 65536, " (or 0 to detect)", false,
		"Processors this host offers (cpus). Default: detected.")),
	withOverride("mem", sizeKey("resources.memory", func(c *Config) *uint64 { return &c.Memory },
		`Memory this host offers (mem): bytes or a size such as "16GiB". Default: detected.`)),
	withOverride("mem_free", sizeKey("resources.memory_free", func(c *Config) *uint64 { return &c.MemoryFree },
		"Overrides the measured free memory (mem_free, before reservations; for tests, and hosts whose measurements mislead). Default: measured.")),
	liveKey("resources.cpu_util", "cpu_util", func(c *Config) **float64 { return &c.CPUUtil }, parseNumber, inRange(1), formatFloat,
		"Overrides the measured CPU utilisation (cpu_util), 0 to 1. Default: measured."),
	withOverride("net_mbps", floatKey("resources.net_mbps", func(c *Config) *float64 { return &c.NetMbps }, 1e7,
		"Overrides the measured link speed (net_mbps), Mbit/s. Default: measured.")),
	liveKey("resources.load1", "load1", func(c *Config) **float64 { return &c.Load1 }, parseNumber, inRange(1e6), formatFloat,
		"Declares the 1-minute load average (load1) instead of reading it from the host. Default: measured."),
	liveKey("resources.load5", "load5", func(c *Config) **float64 { return &c.Load5 }, parseNumber, inRange(1e6), formatFloat,
		"Declares the 5-minute load average (load5). Default: measured."),
	liveKey("resources.load15", "load15", func(c *Config) **float64 { return &c.Load15 }, parseNumber, inRange(1e6), formatFloat,
		"Declares the 15-minute load average (load15). Default: measured."),
	liveKey("resources.uptime_s", "uptime_s", func(c *Config) **int64 { return &c.UptimeS }, parseWholeSeconds, noCheck[int64],
		func(n int64) string { return strconv.FormatInt(n, 10) },
		`Declares the seconds since the host booted (uptime_s): whole seconds, or a duration such as "48h". Default: measured.`),
	liveKey("resources.disk_free", "disk_free", func(c *Config) **uint64 { return &c.DiskFree }, parseAnySize, noCheck[uint64],
		func(n uint64) string { return strconv.FormatUint(n, 10) },
		`Declares the free space of the data dir's filesystem (disk_free): bytes or a size such as "500GiB". Default: measured.`),
	liveKey("resources.idle_s", "idle_s", func(c *Config) **float64 { return &c.IdleS }, parseSeconds, inRange(maxSeconds), formatFloat,
		`Declares the seconds since console or keyboard input (idle_s): seconds, or a duration such as "20m" (a host without a console has none to measure). Default: measured.`),
	durationKey("resources.refresh", func(c *Config) *time.Duration { return &c.HostRefresh }, 5*time.Second, 100*time.Millisecond, time.Hour, false,
		"How often the live values are sampled."),
	// A table: after the other keys of [resources], which Render writes first.
	withOverride("disks", tableKey("resources.disks", func(c *Config) any { return &c.DisksFree }, decodeDisksFree, formatDisksFree,
		`Declares the free bytes of disks.NAME instead of reading the filesystem: NAME = "100GiB" (a name [disks] need not list). Default: measured.`)),

	durationKey("reservations.hold_timeout", func(c *Config) *time.Duration { return &c.Reservations.HoldTimeout },
		reservation.DefaultLimits.HoldTimeout, 100*time.Millisecond, time.Hour, false,
		"A held reservation lapses after it unless committed; also the longest hold a client may ask."),
	durationKey("reservations.lease", func(c *Config) *time.Duration { return &c.Reservations.DefaultLease },
		reservation.DefaultLimits.DefaultLease, time.Second, 30*24*time.Hour, false,
		"Lease of a commit or renew that names none; between min_lease and max_lease."),
	durationKey("reservations.min_lease", func(c *Config) *time.Duration { return &c.Reservations.MinLease },
		reservation.DefaultLimits.MinLease, 100*time.Millisecond, 30*24*time.Hour, false, "Shortest lease a client may ask."),
	durationKey("reservations.max_lease", func(c *Config) *time.Duration { return &c.Reservations.MaxLease },
		reservation.DefaultLimits.MaxLease, time.Second, 365*24*time.Hour, false, "Longest lease a client may ask."),
	durationKey("reservations.claim_window", func(c *Config) *time.Duration { return &c.ClaimWindow },
		0, 0, 10*time.Second, false,
		"With an owner's rank: new reservation requests wait this long, then are granted best ranked first, so that when claims compete the owner chooses (the ClassAd paper's machine Rank). 0: first come, first served."),
	durationKey("reservations.max_window", func(c *Config) *time.Duration { return &c.Reservations.MaxWindow },
		reservation.DefaultLimits.MaxWindow, time.Second, 366*24*time.Hour, false,
		"Longest window a client may book ahead (reserve --begin/--duration)."),
	durationKey("reservations.horizon", func(c *Config) *time.Duration { return &c.Reservations.Horizon },
		reservation.DefaultLimits.Horizon, time.Minute, 3*366*24*time.Hour, false,
		"How far ahead a window may begin: the end of the calendar."),
	durationKey("reservations.retain", func(c *Config) *time.Duration { return &c.Reservations.Retain },
		reservation.DefaultLimits.Retain, time.Second, 30*24*time.Hour, false,
		"How long ended reservations are remembered, so that retries and late releases get a precise answer."),
	intKey("reservations.max_live", func(c *Config) *int { return &c.Reservations.MaxLive },
		reservation.DefaultLimits.MaxLive, 1, 10_000_000, "", false, "Most held + committed reservations at once."),

	scalar("apps.max_bundle_size", func(c *Config) *uint64 { return &c.AppsMaxBundle }, 256<<20, false, parseSize, func(n uint64) string {
		if n < 1<<10 || n > 1<<40 {
			return fmt.Sprintf("must be between 1 KiB and 1 TiB, got %d bytes", n)
		}
		return ""
	}, formatSize,
		"Largest application bundle this manager accepts (gridmgr app install)."),
	scalar("apps.uid_range", func(c *Config) *UIDRange { return &c.AppsUIDs }, UIDRange{First: 60600, Last: 61099}, false, parseUIDRange,
		func(r UIDRange) string { return r.check() }, func(r UIDRange) string { return strconv.Quote(r.String()) },
		"The uids (and gids) applications run as, \"FIRST-LAST\": each reservation's instances get one of their own, and each class's shared setup another, given back at removal (like HTCondor's slot users or systemd's DynamicUser). Use numbers no account, subuid range or other service on the host uses; a uid that /etc/passwd names is skipped."),
	scalar("apps.max_instance_bytes", func(c *Config) *uint64 { return &c.AppsMaxInstance }, 10<<30, false, parseSize, func(n uint64) string {
		if n < 1<<20 || n > 1<<50 {
			return fmt.Sprintf("must be between 1 MiB and 1 PiB, got %d bytes", n)
		}
		return ""
	}, formatSize,
		"Most bytes one application instance may hold on disk: what its install places (checked before anything is written) and what it writes while running (measured; an instance past it is stopped). A reservation that holds tokens of kind disk (MiB) gets that much instead, if less."),
	intKey("apps.max_pids", func(c *Config) *int { return &c.AppsMaxPids }, 4096, 16, 4_194_304, "", false,
		"Most processes and threads the applications of one reservation may have at once (the pids limit of its cgroup)."),
	scalar("apps.max_store_bytes", func(c *Config) *uint64 { return &c.AppsMaxStore }, 4<<30, false, parseSize, func(n uint64) string {
		if n < 1<<20 || n > 1<<50 {
			return fmt.Sprintf("must be between 1 MiB and 1 PiB, got %d bytes", n)
		}
		return ""
	}, formatSize,
		"Most bytes the bundle store holds (uploaded bundles and uploads under way); past it, the bundles no instance uses go first, oldest first, and an upload that would still not fit is refused."),

	durationKey("monitor.interval", func(c *Config) *time.Duration { return &c.MonitorInterval }, 10*time.Second, time.Second, time.Hour, true,
		"How often the manager publishes a utilization sample (cpu, memory, free amounts, reservations, instances) to its superior's topic."),
	scalar("archive.enabled", func(c *Config) *bool { return &c.ArchiveEnabled }, false, false, parseBool,
		func(bool) string { return "" }, strconv.FormatBool,
		"true: store the grid's events this manager receives in its data dir (events.db), for gridmgr events."),
	durationKey("archive.max_age", func(c *Config) *time.Duration { return &c.ArchiveMaxAge }, 7*24*time.Hour, time.Minute, 10*365*24*time.Hour, false,
		"Archived events older than this are deleted."),
	intKey("archive.max_events", func(c *Config) *int { return &c.ArchiveMaxEvents }, 1_000_000, 100, 1_000_000_000, "", false,
		"Most events archived; the oldest go first."),

	scalar("jobs.enabled", func(c *Config) *bool { return &c.JobsEnabled }, true, false, parseBool,
		func(bool) string { return "" }, strconv.FormatBool,
		"true: keep a job queue (jobs/ in the data dir) that clients may submit to (gridmgr job submit); false: refuse jobs."),
	intKey("jobs.max_queued", func(c *Config) *int { return &c.JobsMaxQueued }, 100_000, 1, 10_000_000, "", false,
		"Most jobs not yet ended in the queue, all users together; a submit past it is refused."),
	intKey("jobs.max_queued_per_user", func(c *Config) *int { return &c.JobsMaxQueuedPerUser }, 20_000, 1, 10_000_000, "", false,
		"Most jobs not yet ended one user may have in the queue."),
	intKey("jobs.max_running", func(c *Config) *int { return &c.JobsMaxRunning }, 1000, 1, 1_000_000, "", false,
		"Most jobs placed at once (matched, reserved, staging, running, staging out), all users together."),
	intKey("jobs.max_running_per_user", func(c *Config) *int { return &c.JobsMaxRunningPerUser }, 500, 1, 1_000_000, "", false,
		"Most jobs one user may have placed at once."),
	durationKey("jobs.lost_after", func(c *Config) *time.Duration { return &c.JobsLostAfter }, 5*time.Minute, 10*time.Second, 7*24*time.Hour, false,
		"An executing manager that has not answered for this long is given up for a job that does not set its own lost_after: the job is matched again elsewhere, and the copy left there is stopped when it answers."),
	durationKey("jobs.keep_ended", func(c *Config) *time.Duration { return &c.JobsKeepEnded }, 7*24*time.Hour, time.Minute, 10*365*24*time.Hour, false,
		"Ended jobs (completed, failed, removed) and their results are kept this long, then forgotten."),

	tableKey("tokens", func(c *Config) any { return &c.Tokens }, decodeTokens, formatTokens,
		`Counted tokens reservable like cpus: gpus = 2; [tokens.licenses] matlab = 5 declares "licenses.matlab". Queries see the free count as tokens.gpus.`),
	tableKey("disks", func(c *Config) any { return &c.Disks }, decodeDisks, formatDisks,
		`Paths whose filesystems' free space queries see: NAME = "/absolute/path" makes disks.NAME the bytes free there (disks.scratch >= 100 * GiB), undefined when it cannot be read; disk_free is always the data dir's. Default: none.`),
	tableKey("access", func(c *Config) any { return &c.Access }, decodeAccess, formatAccess,
		`Who may reserve a kind (cpus, mem or a token): "*", "user:NAME" (a name of [users], or as the client states it if allow_declared) or "peer:ID" (authenticated). Kinds not listed are open; admins may reserve all.`),
	tableKey("attributes", func(c *Config) any { return &c.Attributes }, decodeAttributes, formatAttributes,
		`Free-form values describing the host: strings, numbers, booleans, arrays of those. Queries match on them: attrs.zone == "eu-1".`),
	tableKey("users", func(c *Config) any { return &c.Users }, decodeUsers, formatUsers,
		`Authenticated users: NAME = ["PEER_ID", …] makes those client peers that user (request.user, "user:NAME" in access lists), whatever name they state. allow_declared = false gives every other peer request.user = "peer:<id>"; true (the default) takes the name a client states, which is not security.`),
}

// withOverride marks k as the owner's declaration of the live value that
// queries read as variable.
func withOverride(variable string, k key) key {
	k.overrides = variable
	return k
}

// decodeDisksFree reads [resources.disks]: disk name → free bytes.
func decodeDisksFree(d *decoder, t map[string]any, c *Config) {
	for _, k := range slices.Sorted(mapKeys(t)) {
		kp := []string{"resources", "disks", k}
		if msg := checkName(k); msg != "" || strings.Contains(k, ".") {
			d.errAt(kp, -1, "%s is not a valid disk name: use 1 to 64 of A-Z a-z 0-9 _ -", text.QuoteShort(k))
			continue
		}
		if len(c.DisksFree) >= maxDisks {
			d.errAt(kp, -1, "more than %d disks", maxDisks)
			return
		}
		n, msg := parseAnySize(t[k])
		if msg != "" {
			d.errAt(kp, -1, "%s", msg)
			continue
		}
		c.DisksFree[k] = n
	}
}

func formatDisksFree(c *Config) string {
	var b strings.Builder
	for _, k := range slices.Sorted(mapKeys(c.DisksFree)) {
		fmt.Fprintf(&b, "%s = %d\n", renderKey(k), c.DisksFree[k])
	}
	return b.String()
}

// CheckUser says what is wrong with a user name or one of its client peer
// ids ("" if nothing), as [users] checks them; ids come back parsed.
func CheckUser(name string, ids []string) ([]string, string) {
	if msg := userNameOK(name); msg != "" {
		return nil, msg
	}
	if len(ids) == 0 {
		return nil, "give at least one client peer id (gridmgr id --client prints one)"
	}
	var out []string
	for _, s := range ids {
		id, err := peeraddr.ParsePeerID(s)
		if err != nil {
			return nil, fmt.Sprintf("invalid peer id %s: %s", text.QuoteShort(s), peerIDProblem(s, err))
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out, ""
}

// userNameOK says what is wrong with a user name ("" if nothing).
func userNameOK(s string) string {
	if s == "" || len(s) > 64 || strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._@-", r))
	}) >= 0 {
		return fmt.Sprintf("%s is not a user name: 1–64 of letters, digits, '.', '_', '@', '-'", text.QuoteShort(s))
	}
	return ""
}

func decodeUsers(d *decoder, t map[string]any, c *Config) {
	owner := map[string]string{} // peer → the name it was given first
	for _, k := range slices.Sorted(mapKeys(t)) {
		path := []string{"users", k}
		if k == "allow_declared" {
			b, ok := t[k].(bool)
			if !ok {
				d.errAt(path, -1, "expected true or false, got %s", describe(t[k]))
				continue
			}
			c.UsersDeclared = &b
			continue
		}
		if msg := userNameOK(k); msg != "" {
			d.errAt(path, -1, "%s", msg)
			continue
		}
		var items []any
		switch x := t[k].(type) {
		case string:
			items = []any{x}
		default:
			arr, ok := d.array(path, t[k])
			if !ok {
				continue
			}
			items = arr
		}
		var ids []string
		for i, e := range items {
			s, ok := e.(string)
			if !ok {
				d.errAt(path, i, "expected a client peer id (gridmgr id --client prints one), got %s", describe(e))
				continue
			}
			id, err := peeraddr.ParsePeerID(s)
			if err != nil {
				d.errAt(path, i, "invalid peer id %s: %s", text.QuoteShort(s), peerIDProblem(s, err))
				continue
			}
			if other, dup := owner[id]; dup && other != k {
				d.errAt(path, i, "peer %s is already user %s: a peer can be one user only", text.ShortPeer(id), other)
				continue
			}
			owner[id] = k
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		c.Users[k] = ids
	}
}

func formatUsers(c *Config) string {
	var b strings.Builder
	if c.UsersDeclared != nil {
		fmt.Fprintf(&b, "allow_declared = %v\n", *c.UsersDeclared)
	}
	for _, k := range slices.Sorted(mapKeys(c.Users)) {
		fmt.Fprintf(&b, "%s = %s\n", quoteTOML(k), stringArray(c.Users[k]))
	}
	return b.String()
}

// crossCheck checks the rules between keys: retry_max ≥ retry_initial,
// min_lease ≤ lease ≤ max_lease, no fallback that is also a superior, and
// access lists only for kinds that exist.
func crossCheck(c *Config) Errors {
	var es Errors
	bad := func(key, format string, args ...any) {
		es = append(es, &Error{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	if c.RetryMax < c.RetryInitial {
		bad("dial.retry_max", "%s is shorter than dial.retry_initial (%s)", c.RetryMax, c.RetryInitial)
	}
	r := c.Reservations.WithDefaults()
	switch {
	case r.MinLease > r.MaxLease:
		bad("reservations.min_lease", "%s is longer than reservations.max_lease (%s)", r.MinLease, r.MaxLease)
	case r.DefaultLease < r.MinLease || r.DefaultLease > r.MaxLease:
		bad("reservations.lease", "%s is outside [min_lease %s, max_lease %s]", r.DefaultLease, r.MinLease, r.MaxLease)
	}
	for i, f := range c.FallbackSuperiors {
		if j := slices.IndexFunc(c.Superiors, func(s peeraddr.PeerAddrs) bool { return s.Peer == f.Peer }); j >= 0 {
			bad(fmt.Sprintf("fallback_superiors[%d]", i), "peer %s is already in superiors[%d]; a fallback is only tried when a superior fails", f.Peer, j)
		}
	}
	for _, k := range slices.Sorted(mapKeys(c.Access)) {
		if _, ok := c.Tokens[k]; !ok && k != reservation.CPUs && k != reservation.Mem {
			msg := fmt.Sprintf("%s is not a reservable kind: use cpus, mem or a kind declared in [tokens]", text.QuoteShort(k))
			if s := text.Closest(k, append([]string{"cpus", "mem"}, slices.Sorted(mapKeys(c.Tokens))...), 3); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			bad("access."+k, "%s", msg)
		}
	}
	glideinCrossCheck(c, bad)
	return es
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func checkName(s string) string {
	if len(s) == 0 || len(s) > 64 || strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) >= 0 {
		return text.QuoteShort(s) + " is not a valid name: use 1 to 64 of the characters A-Z a-z 0-9 . _ -"
	}
	return ""
}

func parseDuration(v any) (time.Duration, string) {
	s, ok := v.(string)
	if !ok {
		return 0, `expected a duration string such as "1s", got ` + describe(v)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, text.QuoteShort(s) + ` is not a duration; write one such as "500ms", "1s" or "2m30s"`
	}
	return d, ""
}

func parseBool(v any) (bool, string) {
	b, ok := v.(bool)
	if !ok {
		return false, "expected a boolean (true or false), got " + describe(v)
	}
	return b, ""
}

// listenAddr checks one listen address and returns its canonical form.
func listenAddr(s string) (string, string) {
	m, err := ma.NewMultiaddr(s)
	if err != nil {
		return "", "invalid multiaddr: " + err.Error()
	}
	if slices.ContainsFunc(m, func(c ma.Component) bool { return c.Code() == ma.P_P2P }) {
		return "", fmt.Sprintf("listen address %s must not have a /p2p part", m)
	}
	if len(m) != 2 || (m[0].Code() != ma.P_IP4 && m[0].Code() != ma.P_IP6) || m[1].Code() != ma.P_TCP {
		return "", fmt.Sprintf("listen address %s is not /ip4/<address>/tcp/<port> or /ip6/<address>/tcp/<port>", m)
	}
	return m.String(), ""
}

// peerIDProblem says why s is not a peer id, in the operator's terms.
func peerIDProblem(s string, err error) string {
	if s == "" {
		return "empty"
	}
	if strings.Contains(err.Error(), "not a single peer id") {
		return "not a single peer id"
	}
	return "not a peer id (base58, as `gridmgr id` prints it: 12D3KooW…)"
}

// decodeTokens reads [tokens] (nested tables flatten with dots).
func decodeTokens(d *decoder, t map[string]any, c *Config) {
	var walk func(path []string, t map[string]any)
	walk = func(path []string, t map[string]any) {
		for _, k := range slices.Sorted(mapKeys(t)) {
			kp := append(slices.Clip(path), k)
			name := strings.Join(kp[1:], ".")
			if sub, ok := t[k].(map[string]any); ok {
				walk(kp, sub)
				continue
			}
			if checkName(k) != "" || name == reservation.CPUs || name == reservation.Mem || len(name) > 64 {
				d.errAt(kp, -1, "%s is not a valid token name: use 1 to 64 of A-Z a-z 0-9 . _ - (cpus and mem are built in)", text.QuoteShort(name))
				continue
			}
			if len(c.Tokens) >= reservation.MaxKinds-2 {
				d.errAt(kp, -1, "more than %d token kinds", reservation.MaxKinds-2)
				return
			}
			n, ok := t[k].(int64)
			if !ok || n < 0 || n > 1<<40 {
				if !ok {
					d.errAt(kp, -1, "expected an integer, got %s", describe(t[k]))
				} else {
					d.errAt(kp, -1, "must be between 0 and %d, got %d", int64(1<<40), n)
				}
				continue
			}
			c.Tokens[name] = n
		}
	}
	walk([]string{"tokens"}, t)
}

// maxDisks bounds [disks].
const maxDisks = 16

func decodeDisks(d *decoder, t map[string]any, c *Config) {
	for _, k := range slices.Sorted(mapKeys(t)) {
		kp := []string{"disks", k}
		if msg := checkName(k); msg != "" || strings.Contains(k, ".") {
			d.errAt(kp, -1, "%s is not a valid disk name: use 1 to 64 of A-Z a-z 0-9 _ -", text.QuoteShort(k))
			continue
		}
		p, ok := t[k].(string)
		if !ok || !filepath.IsAbs(p) || len(p) > 4096 {
			d.errAt(kp, -1, "expected an absolute path such as \"/scratch\", got %s", describe(t[k]))
			continue
		}
		if len(c.Disks) >= maxDisks {
			d.errAt(kp, -1, "more than %d disks", maxDisks)
			return
		}
		c.Disks[k] = filepath.Clean(p)
	}
}

func formatDisks(c *Config) string {
	var b strings.Builder
	for _, k := range slices.Sorted(mapKeys(c.Disks)) {
		fmt.Fprintf(&b, "%s = %s\n", quoteTOML(k), quoteTOML(c.Disks[k]))
	}
	return b.String()
}

func formatTokens(c *Config) string {
	var b strings.Builder
	for _, k := range slices.Sorted(mapKeys(c.Tokens)) {
		fmt.Fprintf(&b, "%s = %d\n", quoteTOML(k), c.Tokens[k])
	}
	return b.String()
}

// decodeAccess reads [access]; kinds are checked against [tokens] by
// crossCheck, once every key is read.
func decodeAccess(d *decoder, t map[string]any, c *Config) {
	for _, k := range slices.Sorted(mapKeys(t)) {
		path := []string{"access", k}
		arr, ok := d.array(path, t[k])
		if !ok {
			continue
		}
		if len(arr) > 256 {
			d.errAt(path, -1, "has %d entries, limit 256", len(arr))
			continue
		}
		list := []string{}
		for i, e := range arr {
			s, ok := e.(string)
			if !ok {
				d.errAt(path, i, `expected "*", "user:NAME" or "peer:ID", got %s`, describe(e))
				continue
			}
			entry, err := reservation.ParseAccessEntry(s)
			if err == nil && strings.HasPrefix(entry, "peer:") {
				var id string
				if id, err = peeraddr.ParsePeerID(entry[len("peer:"):]); err == nil {
					entry = "peer:" + id
				} else {
					err = fmt.Errorf(`%s is not "*", "user:NAME", "peer:ID" or a peer id`, text.QuoteShort(s))
				}
			}
			if err != nil {
				d.errAt(path, i, "%s", text.Human(err))
				continue
			}
			if !slices.Contains(list, entry) {
				list = append(list, entry)
			}
		}
		c.Access[k] = list
	}
}

func formatAccess(c *Config) string {
	var b strings.Builder
	for _, k := range slices.Sorted(mapKeys(c.Access)) {
		fmt.Fprintf(&b, "%s = %s\n", quoteTOML(k), stringArray(c.Access[k]))
	}
	return b.String()
}

func decodeAttributes(d *decoder, t map[string]any, c *Config) {
	for _, k := range slices.Sorted(mapKeys(t)) {
		path := []string{"attributes", k}
		switch x := t[k].(type) {
		case []any:
			out := make([]any, 0, len(x))
			for i, e := range x {
				if msg := attributeScalar(e); msg != "" {
					d.errAt(path, i, "%s", msg)
					continue
				}
				out = append(out, e)
			}
			c.Attributes[k] = out
		case map[string]any:
			d.errAt(path, -1, "nested tables are not allowed in [attributes]; use a string, number, boolean or an array of those")
		case []map[string]any:
			d.errAt(path, -1, "arrays of tables are not allowed in [attributes]; use a string, number, boolean or an array of those")
		default:
			if msg := attributeScalar(x); msg != "" {
				d.errAt(path, -1, "%s", msg)
				continue
			}
			c.Attributes[k] = x
		}
	}
}

// attributeScalar says what is wrong with v as a scalar attribute value.
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
	return describe(v) + " is not allowed in [attributes]"
}

func formatAttributes(c *Config) string {
	var b strings.Builder
	for _, k := range slices.Sorted(mapKeys(c.Attributes)) {
		fmt.Fprintf(&b, "%s = %s\n", renderKey(k), renderValue(reflect.ValueOf(c.Attributes[k]), true))
	}
	return b.String()
}

// relativePath writes a stored path so that resolving it against the
// directory of file gives it back.
func relativePath(file, s string) string {
	if file == "" || s == "" || filepath.IsAbs(s) {
		return s
	}
	if rel, err := filepath.Rel(filepath.Dir(file), s); err == nil {
		return rel
	}
	return s
}

// checkHTTPListen accepts "" or host:port with a numeric port.
func checkHTTPListen(s string) string {
	if s == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("%s is not host:port (e.g. \"127.0.0.1:8150\")", text.QuoteShort(s))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Sprintf("%s: port %s is not a number from 0 to 65535", text.QuoteShort(s), text.QuoteShort(port))
	}
	if strings.ContainsAny(host, "/ \t") {
		return fmt.Sprintf("%s: %s is not a host name or address", text.QuoteShort(s), text.QuoteShort(host))
	}
	return ""
}

// maxHTTPHosts bounds http_hosts.
const maxHTTPHosts = 64

// httpHost checks one entry of http_hosts, a host name or IP address with
// an optional port, and returns its canonical form: the name in lower
// case or the address as netip writes it, then ":port" if given (IPv6 in
// brackets then).
func httpHost(s string) (string, string) {
	bad := func(why string) (string, string) {
		return "", fmt.Sprintf("%s is not a host name or address with an optional port (%s), e.g. \"grid.example.org\", \"10.0.0.1\" or \"[fd00::1]:8150\"", text.QuoteShort(s), why)
	}
	if strings.Contains(s, "/") {
		return bad("give the host of a URL, without scheme or path")
	}
	host, port := s, ""
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return a.Unmap().String(), "" // a bare IPv6 address, or IPv4
	}
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return bad("the port must be a number from 1 to 65535")
		}
		host, port = h, strconv.Itoa(n)
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
		if _, err := netip.ParseAddr(host); err != nil {
			return bad("brackets hold an IPv6 address")
		}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return bad("no zone: a Host header does not carry one")
		}
		host = a.Unmap().String()
	} else {
		host = strings.ToLower(host)
		if msg := hostNameOK(host); msg != "" {
			return bad(msg)
		}
	}
	if port == "" {
		return host, ""
	}
	return net.JoinHostPort(host, port), ""
}

// hostNameOK says what is wrong with a DNS host name ("" if nothing):
// dot-separated labels of 1–63 letters, digits, '-' and '_', not
// beginning or ending with '-', 253 bytes at most.
func hostNameOK(h string) string {
	if h == "" {
		return "empty"
	}
	if len(h) > 253 {
		return "a host name has at most 253 characters"
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 {
			return "each dot-separated part of a name has 1 to 63 characters"
		}
		if l[0] == '-' || l[len(l)-1] == '-' || strings.IndexFunc(l, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}) >= 0 {
			return "a name has letters, digits, '-' and '_' between dots"
		}
	}
	return ""
}

// checkSystemName accepts "" or 1–32 printable characters without spaces.
func checkSystemName(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > 32 || strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == '"' || r == 0x7f }) >= 0 {
		return fmt.Sprintf("%s: give 1–32 characters without spaces or quotes", text.QuoteShort(s))
	}
	return ""
}
