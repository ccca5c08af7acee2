package config

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/reservation"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// Real peer ids (checked by TestPeerIDsAreValid).
const (
	peer1 = "12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf"
	peer2 = "12D3KooWRBy97UB99e3J6hiPesre1MZeuNQvfan4gBziswrRJsNK"
	peer3 = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"
	peer4 = "12D3KooWQ4qwPRmkkWeAMpEhufgtsxeEkxLdMZGXQRB249SkJYjv"
)

func TestPeerIDsAreValid(t *testing.T) {
	for _, id := range []string{peer1, peer2, peer3, peer4} {
		if _, err := ma.NewMultiaddr("/p2p/" + id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
}

// wantErr is one expected *Error: its line and key exactly, and
// msg as a substring of its Msg (or all of it, if exact is set).
type wantErr struct {
	line  int
	key   string
	msg   string
	exact bool
}

// errorCase is an input of Parse that must fail.
type errorCase struct {
	name     string
	in       string
	hostname string // default "gm154"
	want     []wantErr
}

const testFile = "gm154.toml"

// errorCases cover every kind of error; the fuzz test uses them as seeds.
var errorCases = []errorCase{
	// TOML syntax.
	{name: "syntax/missing value", in: "name = \"gm154\"\nlog_level =\n",
		want: []wantErr{{line: 2, key: "log_level", msg: "invalid TOML: expected value"}}},
	{name: "syntax/duplicate key", in: "name = 'a'\nname = 'b'\n",
		want: []wantErr{{line: 2, key: "name", msg: "invalid TOML: Key 'name' has already been defined."}}},
	{name: "syntax/garbage in table", in: "[heartbeat]\nmisses = 3\noops\n",
		want: []wantErr{{line: 3, key: "heartbeat", msg: "invalid TOML: expected '.' or '='"}}},
	{name: "syntax/unterminated string", in: "# c\nname = \"gm154\n",
		want: []wantErr{{line: 2, key: "name", msg: "invalid TOML: "}}},

	// Disks.
	{name: "disks/relative path", in: "[disks]\nscratch = 'scratch'\n",
		want: []wantErr{{line: 2, key: "disks.scratch", msg: `expected an absolute path such as "/scratch", got string "scratch"`, exact: true}}},
	{name: "disks/bad name", in: "[disks]\n'a b' = '/x'\n",
		want: []wantErr{{line: 2, key: `disks."a b"`, msg: `"a b" is not a valid disk name`}}},

	// Applications.
	{name: "apps/replaced user", in: "[apps]\nuser = 'nobody'\n",
		want: []wantErr{{line: 2, key: "apps.user", msg: "unknown key; applications no longer share one user: each reservation's run as a uid of their own from apps.uid_range", exact: true}}},
	{name: "apps/uid range words", in: "[apps]\nuid_range = 'lots'\n",
		want: []wantErr{{line: 2, key: "apps.uid_range", msg: `"lots" is not a range of uids: write FIRST-LAST, such as "60600-61099"`, exact: true}}},
	{name: "apps/uid range number", in: "[apps]\nuid_range = 60600\n",
		want: []wantErr{{line: 2, key: "apps.uid_range", msg: `expected a range of uids such as "60600-61099", got integer 60600`, exact: true}}},
	{name: "apps/uid range of root", in: "[apps]\nuid_range = '0-100'\n",
		want: []wantErr{{line: 2, key: "apps.uid_range", msg: "0-100 starts below 1000: applications must not run as the system's own users", exact: true}}},
	{name: "apps/uid range backwards", in: "[apps]\nuid_range = '70000-60000'\n",
		want: []wantErr{{line: 2, key: "apps.uid_range", msg: "70000-60000 ends before it starts", exact: true}}},
	{name: "apps/uid range of one", in: "[apps]\nuid_range = '70000-70000'\n",
		want: []wantErr{{line: 2, key: "apps.uid_range", msg: "holds one uid"}}},
	{name: "apps/uid range too high", in: "[apps]\nuid_range = '70000-4294967295'\n",
		want: []wantErr{{line: 2, key: "apps.uid_range", msg: "not portable"}}},
	{name: "apps/instance bytes", in: "[apps]\nmax_instance_bytes = '1KiB'\n",
		want: []wantErr{{line: 2, key: "apps.max_instance_bytes", msg: "must be between 1 MiB and 1 PiB, got 1024 bytes", exact: true}}},
	{name: "apps/pids", in: "[apps]\nmax_pids = 3\n",
		want: []wantErr{{line: 2, key: "apps.max_pids", msg: "3"}}},

	// Web UI host names.
	{name: "http_hosts/each entry", in: "http_listen = '127.0.0.1:8150'\nhttp_hosts = [\n  'grid.example.org',\n  'http://grid.example.org/',\n  'grid.example.org:0',\n  '*',\n  'GRID.example.org',\n  '[fe80::1%eth0]:8150',\n  8150,\n]\n",
		want: []wantErr{
			{line: 4, key: "http_hosts[1]", msg: `"http://grid.example.org/" is not a host name or address with an optional port (give the host of a URL, without scheme or path)`},
			{line: 5, key: "http_hosts[2]", msg: "the port must be a number from 1 to 65535"},
			{line: 6, key: "http_hosts[3]", msg: `"*" is not a host name or address`},
			{line: 7, key: "http_hosts[4]", msg: "duplicate host grid.example.org (same as http_hosts[0])", exact: true},
			{line: 8, key: "http_hosts[5]", msg: "no zone"},
			{line: 9, key: "http_hosts[6]", msg: "expected a host name or address string, got integer 8150", exact: true},
		}},
	{name: "http_hosts/not a list", in: "\nhttp_hosts = 'grid.example.org'\n",
		want: []wantErr{{line: 2, key: "http_hosts", msg: "expected an array of strings"}}},

	// Unknown keys.
	{name: "unknown/top level", in: "nmae = 'x'\n",
		want: []wantErr{{line: 1, key: "nmae", msg: `unknown key; did you mean "name"?`, exact: true}}},
	{name: "unknown/case", in: "# c\nName = 'x'\n",
		want: []wantErr{{line: 2, key: "Name", msg: `unknown key; did you mean "name"?`, exact: true}}},
	{name: "unknown/in table", in: "[heartbeat]\ninterval = '1s'\nintervall = '2s'\n",
		want: []wantErr{{line: 3, key: "heartbeat.intervall", msg: `unknown key; did you mean "heartbeat.interval"?`, exact: true}}},
	{name: "unknown/table", in: "name = 'x'\n\n[heartbeet]\nmisses = 3\n",
		want: []wantErr{{line: 3, key: "heartbeet", msg: `unknown key; did you mean "heartbeat"?`, exact: true}}},
	{name: "unknown/implicit table", in: "# c\n[cluster.limits]\nmax = 3\n",
		want: []wantErr{{line: 2, key: "cluster", msg: "unknown key", exact: true}}},
	{name: "unknown/dotted key", in: "name = 'x'\ncluster.size = 3\n",
		want: []wantErr{{line: 2, key: "cluster", msg: "unknown key", exact: true}}},
	{name: "unknown/sub-table of known table", in: "[heartbeat]\nmisses = 3\n[heartbeat.extra]\nx = 1\n",
		want: []wantErr{{line: 3, key: "heartbeat.extra", msg: "unknown key", exact: true}}},
	{name: "unknown/key of another table", in: "\nretry_max = '1m'\n",
		want: []wantErr{{line: 2, key: "retry_max", msg: `unknown key; did you mean "dial.retry_max"?`, exact: true}}},
	{name: "unknown/settle at top level", in: "settle = '1m'\n",
		want: []wantErr{{line: 1, key: "settle", msg: `unknown key; did you mean "failover.settle"?`, exact: true}}},
	{name: "unknown/in failover", in: "[failover]\nsettle = '1m'\nsetle = '2m'\n",
		want: []wantErr{{line: 3, key: "failover.setle", msg: `unknown key; did you mean "failover.settle"?`, exact: true}}},
	{name: "unknown/fallback_superior", in: "\nfallback_superior = []\n",
		want: []wantErr{{line: 2, key: "fallback_superior", msg: `unknown key; did you mean "fallback_superiors"?`, exact: true}}},
	{name: "unknown/prefer_configured_superiors", in: "prefer_configured_superiors = true\n",
		want: []wantErr{{line: 1, key: "prefer_configured_superiors", msg: `unknown key; did you mean "prefer_configured_superior"?`, exact: true}}},
	{name: "unknown/key in wrong table", in: "[heartbeat]\nretry_max = '1m'\n",
		want: []wantErr{{line: 2, key: "heartbeat.retry_max", msg: `unknown key; did you mean "dial.retry_max"?`, exact: true}}},
	{name: "unknown/inline table", in: "dial = { retry_initial = '1s',\n  retry_mx = '1m' }\n",
		want: []wantErr{{line: 2, key: "dial.retry_mx", msg: `unknown key; did you mean "dial.retry_max"?`, exact: true}}},
	{name: "unknown/quoted key with a dot", in: "\n\"heartbeat.interval\" = '1s'\n",
		want: []wantErr{{line: 2, key: `"heartbeat.interval"`, msg: "unknown key"}}},
	{name: "unknown/empty and unicode keys", in: "\"\" = 1\n\"名前\" = 'x'\n",
		want: []wantErr{{line: 1, key: `""`, msg: "unknown key", exact: true}, {line: 2, key: `"名前"`, msg: "unknown key", exact: true}}},

	// Types.
	{name: "type/name", in: "name = 5\n",
		want: []wantErr{{line: 1, key: "name", msg: "expected a string, got integer 5", exact: true}}},
	{name: "type/data_dir", in: "\ndata_dir = true\n",
		want: []wantErr{{line: 2, key: "data_dir", msg: "expected a string, got boolean true", exact: true}}},
	{name: "type/private_network_key", in: "private_network_key = 1.5\n",
		want: []wantErr{{line: 1, key: "private_network_key", msg: "expected a string, got float 1.5", exact: true}}},
	{name: "type/log_level", in: "log_level = 1\n",
		want: []wantErr{{line: 1, key: "log_level", msg: "expected a string, got integer 1", exact: true}}},
	{name: "type/listen not an array", in: "listen = \"/ip4/0.0.0.0/tcp/4001\"\n",
		want: []wantErr{{line: 1, key: "listen", msg: `expected an array of strings, got string "/ip4/0.0.0.0/tcp/4001"`, exact: true}}},
	{name: "type/listen element", in: "listen = [4001]\n",
		want: []wantErr{{line: 1, key: "listen[0]", msg: "expected a multiaddr string, got integer 4001", exact: true}}},
	{name: "type/superiors", in: "superiors = {a = 1}\n",
		want: []wantErr{{line: 1, key: "superiors", msg: "expected an array of strings, got a table", exact: true}}},
	{name: "type/fallback_superiors", in: "fallback_superiors = \"/p2p/" + peer1 + "\"\n",
		want: []wantErr{{line: 1, key: "fallback_superiors", msg: `expected an array of strings, got string "/p2p/` + peer1 + `"`, exact: true}}},
	{name: "type/fallback_superiors element", in: "fallback_superiors = [\n  true,\n]\n",
		want: []wantErr{{line: 2, key: "fallback_superiors[0]", msg: "expected a multiaddr string, got boolean true", exact: true}}},
	{name: "type/prefer_configured_superior string", in: "# c\nprefer_configured_superior = \"true\"\n",
		want: []wantErr{{line: 2, key: "prefer_configured_superior", msg: `expected a boolean (true or false), got string "true"`, exact: true}}},
	{name: "type/prefer_configured_superior integer", in: "prefer_configured_superior = 1\n",
		want: []wantErr{{line: 1, key: "prefer_configured_superior", msg: "expected a boolean (true or false), got integer 1", exact: true}}},
	{name: "type/failover", in: "failover = \"30s\"\n",
		want: []wantErr{{line: 1, key: "failover", msg: `expected a table, got string "30s"`, exact: true}}},
	{name: "type/duration failover", in: "[failover]\nsettle = 30\n",
		want: []wantErr{{line: 2, key: "failover.settle", msg: `expected a duration string such as "1s", got integer 30`, exact: true}}},
	{name: "type/admins element", in: "admins = [1]\n",
		want: []wantErr{{line: 1, key: "admins[0]", msg: "expected a peer id string, got integer 1", exact: true}}},
	{name: "type/table", in: "heartbeat = 5\n",
		want: []wantErr{{line: 1, key: "heartbeat", msg: "expected a table, got integer 5", exact: true}}},
	{name: "type/array of tables", in: "[[heartbeat]]\ninterval = '1s'\n",
		want: []wantErr{{line: 1, key: "heartbeat", msg: "expected a table, got an array of tables", exact: true}}},
	{name: "type/duration", in: "name = \"gm154\"\ndata_dir = \"/var/lib/gridmgr\"\nlisten = [\"/ip4/0.0.0.0/tcp/4001\"]\nlog_level = \"info\"\n\n[heartbeat]\ninterval = 5\n",
		want: []wantErr{{line: 7, key: "heartbeat.interval", msg: `expected a duration string such as "1s", got integer 5`, exact: true}}},
	{name: "type/duration dial", in: "[dial]\nretry_max = 30\n",
		want: []wantErr{{line: 2, key: "dial.retry_max", msg: `expected a duration string such as "1s", got integer 30`, exact: true}}},
	{name: "type/misses string", in: "[heartbeat]\nmisses = \"3\"\n",
		want: []wantErr{{line: 2, key: "heartbeat.misses", msg: `expected an integer, got string "3"`, exact: true}}},
	{name: "type/misses float", in: "[heartbeat]\nmisses = 3.0\n",
		want: []wantErr{{line: 2, key: "heartbeat.misses", msg: "expected an integer, got float 3.0", exact: true}}},
	{name: "type/cpus", in: "[resources]\ncpus = 2.5\n",
		want: []wantErr{{line: 2, key: "resources.cpus", msg: "expected an integer, got float 2.5", exact: true}}},
	{name: "type/memory", in: "[resources]\nmemory = 1.5\n",
		want: []wantErr{{line: 2, key: "resources.memory", msg: `expected a size such as "16GiB" or an integer number of bytes, got float 1.5`, exact: true}}},
	{name: "type/attributes", in: "attributes = 3\n",
		want: []wantErr{{line: 1, key: "attributes", msg: "expected a table, got integer 3", exact: true}}},

	// Durations and ranges.
	{name: "range/interval short", in: "[heartbeat]\ninterval = \"5ms\"\n",
		want: []wantErr{{line: 2, key: "heartbeat.interval", msg: "5ms is too short; the minimum is 10ms", exact: true}}},
	{name: "range/interval negative", in: "[heartbeat]\ninterval = \"-1s\"\n",
		want: []wantErr{{line: 2, key: "heartbeat.interval", msg: "-1s is too short; the minimum is 10ms", exact: true}}},
	{name: "range/interval long", in: "[heartbeat]\ninterval = \"2h\"\n",
		want: []wantErr{{line: 2, key: "heartbeat.interval", msg: "2h0m0s is too long; the maximum is 1h0m0s", exact: true}}},
	{name: "range/interval malformed", in: "[heartbeat]\ninterval = \"1 s\"\n",
		want: []wantErr{{line: 2, key: "heartbeat.interval", msg: `"1 s" is not a duration; write one such as "500ms", "1s" or "2m30s"`, exact: true}}},
	{name: "range/misses low", in: "[heartbeat]\nmisses = 0\n",
		want: []wantErr{{line: 2, key: "heartbeat.misses", msg: "must be between 1 and 100, got 0", exact: true}}},
	{name: "range/misses high", in: "[heartbeat]\nmisses = 101\n",
		want: []wantErr{{line: 2, key: "heartbeat.misses", msg: "must be between 1 and 100, got 101", exact: true}}},
	{name: "range/retry_initial short", in: "[dial]\nretry_initial = \"1ms\"\n",
		want: []wantErr{{line: 2, key: "dial.retry_initial", msg: "1ms is too short; the minimum is 10ms", exact: true}}},
	{name: "range/retry_initial long", in: "[dial]\nretry_initial = \"61m\"\nretry_max = \"2h\"\n",
		want: []wantErr{{line: 2, key: "dial.retry_initial", msg: "1h1m0s is too long; the maximum is 1h0m0s", exact: true}}},
	{name: "range/retry_max long", in: "[dial]\nretry_max = \"25h\"\n",
		want: []wantErr{{line: 2, key: "dial.retry_max", msg: "25h0m0s is too long; the maximum is 24h0m0s", exact: true}}},
	{name: "range/retry_max below retry_initial", in: "[dial]\nretry_initial = \"2s\"\nretry_max = \"1s\"\n",
		want: []wantErr{{line: 3, key: "dial.retry_max", msg: "1s is shorter than dial.retry_initial (2s)", exact: true}}},
	{name: "range/retry_initial above default retry_max", in: "[dial]\nretry_initial = \"1h\"\n",
		want: []wantErr{{line: 2, key: "dial.retry_initial", msg: "1h0m0s is longer than dial.retry_max (default 30s)", exact: true}}},
	{name: "range/settle short", in: "[failover]\nsettle = \"999ms\"\n",
		want: []wantErr{{line: 2, key: "failover.settle", msg: "999ms is too short; the minimum is 1s", exact: true}}},
	{name: "range/settle long", in: "[failover]\nsettle = \"61m\"\n",
		want: []wantErr{{line: 2, key: "failover.settle", msg: "1h1m0s is too long; the maximum is 1h0m0s", exact: true}}},
	{name: "range/settle malformed", in: "failover.settle = \"30\"\n",
		want: []wantErr{{line: 1, key: "failover.settle", msg: `"30" is not a duration; write one such as "500ms", "1s" or "2m30s"`, exact: true}}},
	{name: "range/cpus negative", in: "[resources]\ncpus = -1\n",
		want: []wantErr{{line: 2, key: "resources.cpus", msg: "must be between 1 and 65536 (or 0 to detect), got -1", exact: true}}},
	{name: "range/cpus high", in: "[resources]\ncpus = 65537\n",
		want: []wantErr{{line: 2, key: "resources.cpus", msg: "must be between 1 and 65536 (or 0 to detect), got 65537", exact: true}}},
	{name: "range/memory small", in: "[resources]\nmemory = 1000\n",
		want: []wantErr{{line: 2, key: "resources.memory", msg: "must be at least 1 MiB (1048576 bytes) or 0 to detect, got 1000 bytes", exact: true}}},
	{name: "range/memory small string", in: "[resources]\nmemory = \"1KiB\"\n",
		want: []wantErr{{line: 2, key: "resources.memory", msg: "must be at least 1 MiB (1048576 bytes) or 0 to detect, got 1024 bytes", exact: true}}},
	{name: "range/memory negative", in: "[resources]\nmemory = -5\n",
		want: []wantErr{{line: 2, key: "resources.memory", msg: "must not be negative, got -5", exact: true}}},
	{name: "range/memory unit", in: "[resources]\nmemory = \"16 gb\"\n",
		want: []wantErr{{line: 2, key: "resources.memory", msg: `invalid size "16 gb": unknown unit "gb"; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB (units are case-sensitive)`, exact: true}}},
	{name: "range/memory fraction of a byte", in: "[resources]\nmemory = \"1.0005KB\"\n",
		want: []wantErr{{line: 2, key: "resources.memory", msg: `invalid size "1.0005KB": not a whole number of bytes`, exact: true}}},
	{name: "range/memory no unit", in: "[resources]\nmemory = \"5\"\n",
		want: []wantErr{{line: 2, key: "resources.memory", msg: `invalid size "5": missing unit`}}},
	{name: "range/memory too large", in: "[resources]\nmemory = \"99999999999TiB\"\n",
		want: []wantErr{{line: 2, key: "resources.memory", msg: `invalid size "99999999999TiB": too large`, exact: true}}},

	// Multiaddrs and peer ids.
	{name: "listen/malformed", in: "listen = [\"/ip4/999.1.1.1/tcp/1\"]\n",
		want: []wantErr{{line: 1, key: "listen[0]", msg: `invalid multiaddr: failed to parse multiaddr "/ip4/999.1.1.1/tcp/1": invalid value "999.1.1.1" for protocol ip4`}}},
	{name: "listen/port range", in: "listen = [\"/ip4/1.2.3.4/tcp/70000\"]\n",
		want: []wantErr{{line: 1, key: "listen[0]", msg: `invalid multiaddr: failed to parse multiaddr "/ip4/1.2.3.4/tcp/70000"`}}},
	{name: "listen/not tcp", in: "listen = [\"/ip4/1.2.3.4/udp/1\"]\n",
		want: []wantErr{{line: 1, key: "listen[0]", msg: "listen address /ip4/1.2.3.4/udp/1 is not /ip4/<address>/tcp/<port> or /ip6/<address>/tcp/<port>", exact: true}}},
	{name: "listen/dns", in: "listen = [\"/dns4/gm154.example.org/tcp/1\"]\n",
		want: []wantErr{{line: 1, key: "listen[0]", msg: "listen address /dns4/gm154.example.org/tcp/1 is not /ip4/<address>/tcp/<port>"}}},
	{name: "listen/p2p", in: "listen = [\"/ip4/1.2.3.4/tcp/1/p2p/" + peer1 + "\"]\n",
		want: []wantErr{{line: 1, key: "listen[0]", msg: "listen address /ip4/1.2.3.4/tcp/1/p2p/" + peer1 + " must not have a /p2p part", exact: true}}},
	{name: "listen/duplicate", in: "listen = [\n  \"/ip4/1.2.3.4/tcp/1\",\n  \"/ip4/1.2.3.4/tcp/01\",\n]\n",
		want: []wantErr{{line: 3, key: "listen[1]", msg: "duplicate listen address /ip4/1.2.3.4/tcp/1 (same as listen[0])", exact: true}}},
	{name: "listen/empty", in: "listen = []\n",
		want: []wantErr{{line: 1, key: "listen", msg: "at least one listen address is needed; remove the key to listen on /ip4/0.0.0.0/tcp/4001", exact: true}}},
	{name: "superiors/no p2p", in: "superiors = [\n  \"/ip4/10.0.0.1/tcp/4001/p2p/" + peer1 + "\", # [comment], \"with\" 'quotes'\n\n  '/ip4/10.0.0.2/tcp/4001',\n]\n",
		want: []wantErr{{line: 4, key: "superiors[1]", msg: "address has no /p2p/<peer id> part", exact: true}}},
	{name: "superiors/p2p not last", in: "superiors = [\"/ip4/10.0.0.1/tcp/4001/p2p/" + peer1 + "/p2p-circuit\"]\n",
		want: []wantErr{{line: 1, key: "superiors[0]", msg: "address /ip4/10.0.0.1/tcp/4001/p2p/" + peer1 + "/p2p-circuit must end with its /p2p/<peer id> part", exact: true}}},
	{name: "superiors/not tcp", in: "superiors = [\"/ip4/10.0.0.1/udp/4001/quic-v1/p2p/" + peer1 + "\"]\n",
		want: []wantErr{{line: 1, key: "superiors[0]", msg: "address /ip4/10.0.0.1/udp/4001/quic-v1/p2p/" + peer1 + " is not /ip4|/ip6|/dns|/dns4|/dns6/<host>/tcp/<port>/p2p/<peer id>", exact: true}}},
	{name: "superiors/no transport", in: "superiors = [\"/p2p/" + peer1 + "\"]\n",
		want: []wantErr{{line: 1, key: "superiors[0]", msg: "address /p2p/" + peer1 + " is not /ip4|/ip6|/dns|/dns4|/dns6/<host>/tcp/<port>/p2p/<peer id>", exact: true}}},
	{name: "superiors/bad peer id", in: "superiors = [\n'''/ip4/10.0.0.1/tcp/4001/p2p/" + peer1 + "''',\n\"/ip4/10.0.0.1/tcp/4001/p2p/xyz\"]\n",
		want: []wantErr{{line: 3, key: "superiors[1]", msg: `invalid multiaddr: failed to parse multiaddr "/ip4/10.0.0.1/tcp/4001/p2p/xyz": invalid value "xyz" for protocol p2p`}}},
	{name: "fallback/no p2p", in: "fallback_superiors = [\n  \"/ip4/10.0.0.3/tcp/4001/p2p/" + peer3 + "\",\n  \"/ip4/10.0.0.4/tcp/4001\",\n]\n",
		want: []wantErr{{line: 3, key: "fallback_superiors[1]", msg: "address has no /p2p/<peer id> part", exact: true}}},
	{name: "fallback/not tcp", in: "fallback_superiors = [\"/ip4/10.0.0.3/udp/4001/quic-v1/p2p/" + peer3 + "\"]\n",
		want: []wantErr{{line: 1, key: "fallback_superiors[0]", msg: "address /ip4/10.0.0.3/udp/4001/quic-v1/p2p/" + peer3 + " is not /ip4|/ip6|/dns|/dns4|/dns6/<host>/tcp/<port>/p2p/<peer id>", exact: true}}},
	{name: "fallback/bad peer id", in: "fallback_superiors = [\"/dns4/gm3/tcp/4001/p2p/xyz\"]\n",
		want: []wantErr{{line: 1, key: "fallback_superiors[0]", msg: `invalid multiaddr: failed to parse multiaddr "/dns4/gm3/tcp/4001/p2p/xyz": invalid value "xyz" for protocol p2p`}}},
	{name: "fallback/already a superior", in: "superiors = [\n  \"/ip4/10.0.0.1/tcp/4001/p2p/" + peer1 + "\",\n  \"/ip4/10.0.0.2/tcp/4001/p2p/" + peer2 + "\",\n]\n" +
		"fallback_superiors = [\n  \"/ip4/10.0.0.3/tcp/4001/p2p/" + peer3 + "\",\n  \"/ip4/10.0.0.9/tcp/4001/p2p/" + peer2 + "\",\n]\n",
		want: []wantErr{{line: 7, key: "fallback_superiors[1]", msg: "peer " + peer2 + " is already in superiors[1]; a fallback is only tried when a superior fails", exact: true}}},
	{name: "fallback/already a superior, every address", in: "superiors = ['/ip4/10.0.0.1/tcp/4001/p2p/" + peer1 + "', '/dns/gm1/tcp/4001/p2p/" + peer1 + "']\n" +
		"fallback_superiors = [\n  '/ip4/10.0.0.1/tcp/4001/p2p/" + peer1 + "',\n  '/ip4/10.0.0.3/tcp/4001/p2p/" + peer3 + "',\n  '/ip6/fd00::1/tcp/4001/ipfs/" + peer1 + "',\n]\n",
		want: []wantErr{
			{line: 3, key: "fallback_superiors[0]", msg: "peer " + peer1 + " is already in superiors[0]; a fallback is only tried when a superior fails", exact: true},
			{line: 5, key: "fallback_superiors[2]", msg: "peer " + peer1 + " is already in superiors[0]; a fallback is only tried when a superior fails", exact: true},
		}},
	{name: "fallback/same peer id in another form", in: "superiors = [\"/ip4/10.0.0.1/tcp/4001/p2p/bafzaajaiaejcbzdibmxyzdjbulwsmqjqjcxbrxjqxhtq3j4kpj2w7isggmjzfhu6u\"]\n" +
		"fallback_superiors = [\"/ip4/10.0.0.2/tcp/4001/p2p/12D3KooWRBy97UB99f7D7h8UHJPYZEezw6R83X1zxZM6Vxo4Vdx9\"]\n",
		want: []wantErr{{line: 2, key: "fallback_superiors[0]", msg: "peer 12D3KooWRBy97UB99f7D7h8UHJPYZEezw6R83X1zxZM6Vxo4Vdx9 is already in superiors[0]; a fallback is only tried when a superior fails", exact: true}}},
	{name: "admins/invalid", in: "admins = [\"abc\"]\n",
		want: []wantErr{{line: 1, key: "admins[0]", msg: `invalid peer id "abc": not a peer id (base58`}}},
	{name: "admins/empty", in: "admins = [\"\"]\n",
		want: []wantErr{{line: 1, key: "admins[0]", msg: `invalid peer id "": empty`, exact: true}}},
	{name: "admins/with more parts", in: "admins = [\"" + peer1 + "/tcp/1\"]\n",
		want: []wantErr{{line: 1, key: "admins[0]", msg: `invalid peer id "` + peer1 + `/tcp/1": not a single peer id`, exact: true}}},
	{name: "admins/duplicate", in: "admins = [\n  \"" + peer1 + "\",\n  \"" + peer3 + "\",\n  \"" + peer1 + "\",\n]\n",
		want: []wantErr{{line: 4, key: "admins[2]", msg: "duplicate admin " + peer1 + " (same as admins[0])", exact: true}}},

	// Other values.
	{name: "name/invalid", in: "name = \"gm 154\"\n",
		want: []wantErr{{line: 1, key: "name", msg: `"gm 154" is not a valid name: use 1 to 64 of the characters A-Z a-z 0-9 . _ -`, exact: true}}},
	{name: "name/too long", in: "name = \"" + strings.Repeat("g", 65) + "\"\n",
		want: []wantErr{{line: 1, key: "name", msg: "is not a valid name"}}},
	{name: "name/empty", in: "name = \"\"\n",
		want: []wantErr{{line: 1, key: "name", msg: `"" is not a valid name`}}},
	{name: "name/bad hostname", in: "log_level = \"info\"\n", hostname: "bad host",
		want: []wantErr{{line: 0, key: "name", msg: `no name is set and the host name "bad host" is not a valid name (1 to 64 of A-Z a-z 0-9 . _ -); set name in the file`, exact: true}}},
	{name: "log_level/unknown", in: "log_level = \"verbose\"\n",
		want: []wantErr{{line: 1, key: "log_level", msg: `unknown log level "verbose"; use one of debug, info, warn, error`, exact: true}}},
	{name: "memory_trim/too often", in: "\nmemory_trim = \"5s\"\n",
		want: []wantErr{{line: 2, key: "memory_trim", msg: "must be 0 (never) or between 10s and 24h, got 5s", exact: true}}},
	{name: "memory_trim/negative", in: "memory_trim = \"-1m\"\n",
		want: []wantErr{{line: 1, key: "memory_trim", msg: "must be 0 (never) or between 10s and 24h, got -1m0s", exact: true}}},
	{name: "memory_trim/too rare", in: "memory_trim = \"25h\"\n",
		want: []wantErr{{line: 1, key: "memory_trim", msg: "got 25h0m0s"}}},
	{name: "memory_trim/a number", in: "memory_trim = 60\n",
		want: []wantErr{{line: 1, key: "memory_trim", msg: `expected a duration string such as "1s", got integer 60`, exact: true}}},
	{name: "paths/empty", in: "data_dir = \"\"\nidentity = ''\n",
		want: []wantErr{{line: 1, key: "data_dir", msg: "must not be empty", exact: true}, {line: 2, key: "identity", msg: "must not be empty", exact: true}}},
	{name: "paths/NUL", in: "private_network_key = \"swarm\\u0000.key\"\n",
		want: []wantErr{{line: 1, key: "private_network_key", msg: "must not contain NUL characters", exact: true}}},
	{name: "attributes/nested table", in: "[attributes]\nsite = \"x\"\nhw = {cpu = \"x\"}\n",
		want: []wantErr{{line: 3, key: "attributes.hw", msg: "nested tables are not allowed in [attributes]; use a string, number, boolean or an array of those", exact: true}}},
	{name: "attributes/sub-table", in: "[attributes.hw]\ncpu = \"x\"\n",
		want: []wantErr{{line: 1, key: "attributes.hw", msg: "nested tables are not allowed in [attributes]"}}},
	{name: "attributes/dotted key", in: "[attributes]\n\nhw.cpu = \"x\"\n",
		want: []wantErr{{line: 3, key: "attributes.hw", msg: "nested tables are not allowed in [attributes]"}}},
	{name: "attributes/array of tables", in: "[[attributes.disks]]\nsize = 1\n",
		want: []wantErr{{line: 1, key: "attributes.disks", msg: "arrays of tables are not allowed in [attributes]"}}},
	{name: "attributes/array elements", in: "[attributes]\nx = [\n  1,\n  [2],\n  {a = 1},\n  nan,\n  1979-05-27,\n]\n",
		want: []wantErr{
			{line: 4, key: "attributes.x[1]", msg: "arrays inside arrays are not allowed in [attributes]", exact: true},
			{line: 5, key: "attributes.x[2]", msg: "tables are not allowed in [attributes]", exact: true},
			{line: 6, key: "attributes.x[3]", msg: "nan is not allowed as an attribute value", exact: true},
			{line: 7, key: "attributes.x[4]", msg: "dates and times are not allowed in [attributes]; quote the value to keep it as a string", exact: true},
		}},
	{name: "attributes/datetime", in: "[attributes]\nbuilt = 2024-01-02T03:04:05Z\n",
		want: []wantErr{{line: 2, key: "attributes.built", msg: "dates and times are not allowed in [attributes]"}}},
	{name: "attributes/quoted key", in: "[attributes]\n\"a.b\" = {x = 1}\n",
		want: []wantErr{{line: 2, key: `attributes."a.b"`, msg: "nested tables are not allowed"}}},

	// Whole-file problems.
	{name: "file/not utf-8", in: "name = 'gm154'\n[attributes]\nsite = '\xff'\n",
		want: []wantErr{{line: 3, key: "", msg: "file is not valid UTF-8", exact: true}}},
	{name: "file/too deep", in: "[attributes]\nx = [[[[[[[[[1]]]]]]]]]\n",
		want: []wantErr{{line: 2, key: "", msg: "values are nested more than 8 levels deep", exact: true}}},
	{name: "file/too many key parts", in: "\na.b.c.d.e.f.g.h.i.j = 1\n",
		want: []wantErr{{line: 2, key: "", msg: "key has more than 9 dotted parts", exact: true}}},

	// Line lookup in the various TOML forms.
	{name: "lines/dotted key", in: "# comment\nheartbeat.interval = 5\n",
		want: []wantErr{{line: 2, key: "heartbeat.interval", msg: "expected a duration string"}}},
	{name: "lines/dotted key in table", in: "[resources]\ncpus = 1\n\nmemory.size = 3\n",
		want: []wantErr{{line: 4, key: "resources.memory", msg: "got a table"}}},
	{name: "lines/inline table", in: "\n\nheartbeat = {interval = 5, misses = \"3\"}\n",
		want: []wantErr{
			{line: 3, key: "heartbeat.interval", msg: "expected a duration string"},
			{line: 3, key: "heartbeat.misses", msg: "expected an integer"},
		}},
	{name: "lines/multi-line inline table", in: "heartbeat = {\n  misses = 3,\n  interval = 5,\n}\n",
		want: []wantErr{{line: 3, key: "heartbeat.interval", msg: "expected a duration string"}}},
	{name: "lines/array in inline table", in: "\nattributes = { tags = [\n 1,\n [2] ] }\n",
		want: []wantErr{{line: 2, key: "attributes.tags[1]", msg: "arrays inside arrays"}}},
	{name: "lines/multi-line strings in array", in: "listen = [\n\"\"\"/ip4/1.2.3.4/\n\"\"\", '''x''', \"\"\"\"a\"\"\"\"\n, # x\n 3]\n",
		want: []wantErr{
			{line: 2, key: "listen[0]", msg: `invalid multiaddr: failed to parse multiaddr "/ip4/1.2.3.4/\n"`},
			{line: 3, key: "listen[1]", msg: `invalid multiaddr: failed to parse multiaddr "x"`},
			{line: 3, key: "listen[2]", msg: `invalid multiaddr: failed to parse multiaddr "\"a\""`},
			{line: 5, key: "listen[3]", msg: "expected a multiaddr string, got integer 3"},
		}},
	{name: "lines/BOM and CRLF", in: "\ufeffname = 'gm154'\r\n\r\n[heartbeat]\r\ninterval = 5\r\n",
		want: []wantErr{{line: 4, key: "heartbeat.interval", msg: "expected a duration string"}}},
	{name: "lines/sorted", in: "[heartbeat]\nmisses = 0\n[dial]\nretry_max = 1\n",
		want: []wantErr{{line: 2, key: "heartbeat.misses", msg: "must be between"}, {line: 4, key: "dial.retry_max", msg: "expected a duration"}}},
}

func checkErrors(t *testing.T, err error, want []wantErr) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %d", len(want))
	}
	if !errors.Is(err, ErrConfig) {
		t.Errorf("errors.Is(err, ErrConfig) is false for %v", err)
	}
	var list Errors
	if !errors.As(err, &list) {
		t.Fatalf("error is a %T, not a Errors: %v", err, err)
	}
	var pe *Error
	if !errors.As(err, &pe) || pe != list[0] {
		t.Errorf("errors.As(err, *Error) does not find the first error")
	}
	if len(list) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(list), len(want), err)
	}
	for i, w := range want {
		g := list[i]
		msgOK := strings.Contains(g.Msg, w.msg)
		if w.exact {
			msgOK = g.Msg == w.msg
		}
		if g.File != testFile || g.Line != w.line || g.Key != w.key || !msgOK {
			t.Errorf("error %d:\n got  %s:%d key %q msg %q\n want %s:%d key %q msg %q (exact %v)",
				i, g.File, g.Line, g.Key, g.Msg, testFile, w.line, w.key, w.msg, w.exact)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			host := tc.hostname
			if host == "" {
				host = "gm154"
			}
			p, err := Parse(testFile, []byte(tc.in), host)
			if p != nil {
				t.Errorf("got a Config %+v with the error", p)
			}
			checkErrors(t, err, tc.want)
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	in := "name = 'gm154'\n" + strings.Repeat("# padding\n", maxFileSize/10)
	_, err := Parse(testFile, []byte(in), "gm154")
	msg := fmt.Sprintf("file is too large (%d bytes); the limit is 1048576 bytes", len(in))
	checkErrors(t, err, []wantErr{{line: 0, key: "", msg: msg, exact: true}})
}

func TestParseTooManyErrors(t *testing.T) {
	var b strings.Builder
	for i := range 150 {
		b.WriteString("unknown_")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(string(rune('a'+i%26)) + string(rune('a'+i/26)))
		b.WriteString(" = 1\n")
	}
	_, err := Parse(testFile, []byte(b.String()), "gm154")
	var list Errors
	if !errors.As(err, &list) {
		t.Fatalf("got %v", err)
	}
	if len(list) != maxErrors+1 {
		t.Fatalf("got %d errors, want %d", len(list), maxErrors+1)
	}
	if last := list[maxErrors]; last.Msg != "too many errors; 50 more not shown" || last.Line != 0 {
		t.Errorf("last error = %+v", last)
	}
	for i := 1; i < maxErrors; i++ {
		if list[i].Line < list[i-1].Line {
			t.Fatalf("errors not sorted by line at %d: %v", i, err)
		}
	}
}

// TestParseErrorFile checks a file with many problems against
// testdata/errors.golden: all are reported, sorted by line.
func TestParseErrorFile(t *testing.T) {
	data, err := os.ReadFile("testdata/errors.toml")
	if err != nil {
		t.Fatal(err)
	}
	_, perr := Parse("testdata/errors.toml", data, "gm154")
	if perr == nil {
		t.Fatal("no error")
	}
	got := perr.Error() + "\n"
	if *update {
		if err := os.WriteFile("testdata/errors.golden", []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/errors.golden")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("errors differ from testdata/errors.golden (run with -update to see):\n%s", got)
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{File: "gm154.toml", Line: 7, Key: "heartbeat.interval", Msg: "m"}, "gm154.toml:7: heartbeat.interval: m"},
		{Error{File: "gm154.toml", Key: "name", Msg: "m"}, "gm154.toml: name: m"},
		{Error{File: "gm154.toml", Line: 3, Msg: "m"}, "gm154.toml:3: m"},
		{Error{File: "gm154.toml", Msg: "m"}, "gm154.toml: m"},
		{Error{Line: 3, Key: "k", Msg: "m"}, "3: k: m"},
		{Error{Msg: "m"}, "m"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	es := Errors{{File: "f", Line: 1, Msg: "a"}, {File: "f", Line: 2, Key: "k", Msg: "b"}}
	if got, want := es.Error(), "f:1: a\nf:2: k: b"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var err error = es
	var pe *Error
	if !errors.Is(err, ErrConfig) || !errors.As(err, &pe) || pe != es[0] {
		t.Errorf("errors.Is/As do not see through Errors")
	}
}

// defaults is what a file with no keys gives, read from file on host.
func defaults(file, host string) *Config {
	c := Default()
	c.File, c.Name = file, host
	c.DataDir = filepath.Clean("/var/lib/gridmgr")
	c.Identity = filepath.Join(c.DataDir, DefaultIdentityFile)
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return &c
}

func mustParse(t *testing.T, file, in, host string) *Config {
	t.Helper()
	c, err := Parse(file, []byte(in), host)
	if err != nil {
		t.Fatalf("Parse(%q): %v", file, err)
	}
	checkRoundTrip(t, c)
	return c
}

// checkRoundTrip checks that Render gives a file that parses to c again.
func checkRoundTrip(t testing.TB, c *Config) {
	t.Helper()
	out := c.Render()
	q, err := Parse(c.File, out, "some-other-host")
	if err != nil {
		t.Fatalf("rendered properties do not parse: %v\n%s", err, out)
	}
	if !equal(c, q) {
		t.Fatalf("round trip differs:\n got  %#v\n want %#v\nrendered:\n%s", q, c, out)
	}
}

// equal compares Configs, the compiled policy by its source.
func equal(a, b *Config) bool {
	x, y := *a, *b
	x.policy, y.policy = nil, nil
	return reflect.DeepEqual(x, y) && (a.policy == nil) == (b.policy == nil)
}

func TestParseDefaults(t *testing.T) {
	for _, in := range []string{
		"", "# nothing here\n", "[heartbeat]\n[dial]\n[failover]\n[resources]\n[attributes]\n",
		"fallback_superiors = []\nprefer_configured_superior = false\n",
	} {
		for _, file := range []string{"", "gm154.toml", "/etc/gridmgr/gm154.toml"} {
			got := mustParse(t, file, in, "gm154.example.org")
			if want := defaults(file, "gm154.example.org"); !equal(got, want) {
				t.Errorf("Parse(%q, %q):\n got  %#v\n want %#v", file, in, got, want)
			}
		}
	}
}

func TestParseFull(t *testing.T) {
	data, err := os.ReadFile("testdata/full.toml")
	if err != nil {
		t.Fatal(err)
	}
	const file = "/etc/gridmgr/gm154.toml"
	got := mustParse(t, file, string(data), "ignored")
	want := defaults(file, "gm154")
	want.DataDir = "/etc/gridmgr/state"
	want.Identity = "/etc/gridmgr/gm154.key"
	want.Listen = []string{"/ip4/0.0.0.0/tcp/4001", "/ip6/::/tcp/4001"}
	want.Superiors = []peeraddr.PeerAddrs{
		{Peer: peer1, Addrs: []string{"/ip4/10.0.0.1/tcp/4001", "/ip6/fd00::1/tcp/4001"}},
		{Peer: peer2, Addrs: []string{"/dns4/gm2.example.org/tcp/4001"}},
	}
	want.FallbackSuperiors = []peeraddr.PeerAddrs{
		{Peer: peer4, Addrs: []string{"/dns4/gm3.example.org/tcp/4001", "/ip4/10.0.1.3/tcp/4001"}},
		{Peer: peer3, Addrs: []string{"/ip6/fd00::4/tcp/4001"}},
	}
	want.PreferConfiguredSuperior = true
	want.Admins = []string{peer3}
	want.PrivateNetworkKey = "/etc/gridmgr/swarm.key"
	want.PluginsDir = "/etc/gridmgr/plugins"
	want.LogLevel = "debug"
	want.HeartbeatInterval, want.HeartbeatMisses = 250*time.Millisecond, 5
	want.RetryInitial, want.RetryMax = time.Second, time.Minute
	want.FailoverSettle = 2 * time.Minute
	want.CPUs, want.Memory = 8, 16<<30
	want.Reservations.HoldTimeout, want.Reservations.DefaultLease, want.Reservations.MaxLive = 10*time.Second, 10*time.Minute, 5000
	want.Tokens = map[string]int64{"gpus": 2, "licenses.matlab": 5}
	want.Access = map[string][]string{"gpus": {"user:alice", "peer:" + peer3}, "licenses.matlab": {"*"}}
	want.Attributes = map[string]any{
		"site": "lab-3", "rack": int64(12), "gpu": true, "load_factor": 0.75,
		"tags": []any{"ssd", "infiniband"}, "room number": "B.104",
	}
	want.HTTPHosts = []string{"grid.example.org", "10.0.0.1:8150", "fd00::1", "[fd00::2]:8150"}
	want.HandshakeTimeout = 2 * time.Second
	if !equal(got, want) {
		t.Errorf("got  %#v\nwant %#v", got, want)
	}

	// The rendered form is canonical.
	rendered := got.Render()
	if *update {
		if err := os.WriteFile("testdata/full.rendered.toml", rendered, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile("testdata/full.rendered.toml")
	if err != nil {
		t.Fatal(err)
	}
	if string(rendered) != string(golden) {
		t.Errorf("Render differs from testdata/full.rendered.toml (run with -update to see):\n%s", rendered)
	}
	// Rendering the rendered file again changes nothing.
	if again := mustParse(t, file, string(golden), "x"); string(again.Render()) != string(golden) {
		t.Errorf("Render is not idempotent")
	}
}

func TestParseRoundTripFiles(t *testing.T) {
	data, err := os.ReadFile("testdata/full.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range fuzzFiles {
		mustParse(t, file, string(data), "gm154")
	}
}

func TestParseMergesSuperiors(t *testing.T) {
	in := `superiors = [
  "/ip4/10.0.0.1/tcp/4001/p2p/` + peer1 + `",
  "/dns/gm2.example.org/tcp/4001/p2p/` + peer2 + `",
  "/ip4/10.0.0.2/tcp/4001/p2p/` + peer1 + `",
  "/ip4/10.0.0.1/tcp/04001/ipfs/` + peer1 + `",
  "/dns6/gm3.example.org/tcp/4001/p2p/` + peer3 + `",
  "/ip6/fd00::2/tcp/4001/p2p/` + peer2 + `",
  "/ip4/10.0.0.2/tcp/4001/p2p/` + peer1 + `",
]
`
	got := mustParse(t, testFile, in, "gm154").Superiors
	want := []peeraddr.PeerAddrs{
		{Peer: peer1, Addrs: []string{"/ip4/10.0.0.1/tcp/4001", "/ip4/10.0.0.2/tcp/4001"}},
		{Peer: peer2, Addrs: []string{"/dns/gm2.example.org/tcp/4001", "/ip6/fd00::2/tcp/4001"}},
		{Peer: peer3, Addrs: []string{"/dns6/gm3.example.org/tcp/4001"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %#v\nwant %#v", got, want)
	}
}

func TestParseFallbacks(t *testing.T) {
	in := `superiors = ["/ip4/10.0.0.1/tcp/4001/p2p/` + peer1 + `"]
fallback_superiors = [
  "/dns4/gm3.example.org/tcp/4001/p2p/` + peer4 + `",
  "/ip4/10.0.0.3/tcp/4001/p2p/` + peer3 + `",
  "/ip4/10.0.0.4/tcp/04001/ipfs/` + peer4 + `",
  "/dns4/gm3.example.org/tcp/4001/p2p/` + peer4 + `",
  "/ip6/fd00::2/tcp/4001/p2p/` + peer2 + `",
]
prefer_configured_superior = true

[failover]
settle = "90s"
`
	got := mustParse(t, testFile, in, "gm154")
	want := defaults(testFile, "gm154")
	want.Superiors = []peeraddr.PeerAddrs{{Peer: peer1, Addrs: []string{"/ip4/10.0.0.1/tcp/4001"}}}
	want.FallbackSuperiors = []peeraddr.PeerAddrs{
		{Peer: peer4, Addrs: []string{"/dns4/gm3.example.org/tcp/4001", "/ip4/10.0.0.4/tcp/4001"}},
		{Peer: peer3, Addrs: []string{"/ip4/10.0.0.3/tcp/4001"}},
		{Peer: peer2, Addrs: []string{"/ip6/fd00::2/tcp/4001"}},
	}
	want.PreferConfiguredSuperior = true
	want.FailoverSettle = 90 * time.Second
	if !equal(got, want) {
		t.Errorf("got  %#v\nwant %#v", got, want)
	}
	for in, want := range map[string]time.Duration{
		"":                                30 * time.Second,
		"[failover]":                      30 * time.Second,
		"[failover]\nsettle = \"1s\"":     time.Second,
		"failover.settle = \"2m30s\"":     150 * time.Second,
		"failover = { settle = \"45s\" }": 45 * time.Second,
	} {
		if got := mustParse(t, testFile, in, "gm154").FailoverSettle; got != want {
			t.Errorf("%q: FailoverSettle = %v, want %v", in, got, want)
		}
	}
}

func TestRoundTripOddValues(t *testing.T) {
	for _, in := range []string{
		"superiors = ['/dns/a\"b\\c\u0085é/tcp/1/p2p/" + peer1 + "', '/dns4/a%20b/tcp/1/p2p/" + peer1 + "']",
		"superiors = ['/ip6/0:0::ffff:1.2.3.4/tcp/1/p2p/" + peer1 + "', '/ip6/0:0::1/tcp/01/p2p/" + peer2 + "']",
		"admins = ['bafzaajaiaejcbzdibmxyzdjbulwsmqjqjcxbrxjqxhtq3j4kpj2w7isggmjzfhu6u']",
		"[attributes]\n\"\u0085\u2028\ufeff\" = \"\u0085\u2028\ufeff\\u007f\\r\"\nx = 0x10\ny = 1_000\nz = 0o7\nw = 0b1\nv = +inf\n",
		"policy = 'request.user in [\"a\", \"b\"] || cpu_util < 0.5'\n",
	} {
		for _, file := range fuzzFiles {
			mustParse(t, file, in, "gm154")
		}
	}
	// Peer ids are stored in their canonical (base58) form.
	c := mustParse(t, "", "admins = ['bafzaajaiaejcbzdibmxyzdjbulwsmqjqjcxbrxjqxhtq3j4kpj2w7isggmjzfhu6u']", "gm154")
	if want := []string{"12D3KooWRBy97UB99f7D7h8UHJPYZEezw6R83X1zxZM6Vxo4Vdx9"}; !reflect.DeepEqual(c.Admins, want) {
		t.Errorf("Admins = %q, want %q", c.Admins, want)
	}
}

func TestParsePaths(t *testing.T) {
	in := "data_dir = \"state\"\nprivate_network_key = \"../swarm.key\"\n"
	inID := in + "identity = \"keys//id.key\"\n"
	for _, tc := range []struct {
		file, in                  string
		dataDir, identity, netKey string
	}{
		{"/etc/gridmgr/gm.toml", in, "/etc/gridmgr/state", "/etc/gridmgr/state/identity.key", "/etc/swarm.key"},
		{"/etc/gridmgr/gm.toml", inID, "/etc/gridmgr/state", "/etc/gridmgr/keys/id.key", "/etc/swarm.key"},
		{"conf/gm.toml", in, "conf/state", "conf/state/identity.key", "swarm.key"},
		{"gm.toml", in, "state", "state/identity.key", "../swarm.key"},
		{"../gm.toml", in, "../state", "../state/identity.key", "../../swarm.key"},
		{"", inID, "state", "keys/id.key", "../swarm.key"},
		{"conf/gm.toml", "data_dir = \"/var//lib/./gridmgr/\"\nidentity = \"/keys/../k\"\nprivate_network_key = \"\"\n", "/var/lib/gridmgr", "/k", ""},
	} {
		c := mustParse(t, tc.file, tc.in, "gm154")
		if c.DataDir != tc.dataDir || c.Identity != tc.identity || c.PrivateNetworkKey != tc.netKey || c.File != tc.file {
			t.Errorf("file %q, %q: got %q %q %q, want %q %q %q", tc.file, tc.in,
				c.DataDir, c.Identity, c.PrivateNetworkKey, tc.dataDir, tc.identity, tc.netKey)
		}
	}
}

func TestParseForms(t *testing.T) {
	// The same keys written as [tables], dotted keys and inline tables.
	forms := []string{
		"[heartbeat]\ninterval = \"2s\"\nmisses = 4\n[dial]\nretry_initial = \"1s\"\nretry_max = \"10s\"\n[failover]\nsettle = \"5m\"\n",
		"heartbeat.interval = \"2s\"\nheartbeat.misses = 4\ndial.retry_initial = \"1s\"\ndial.retry_max = \"10s\"\nfailover.settle = \"5m\"\n",
		"heartbeat = { interval = \"2s\", misses = 4 }\ndial = { retry_initial = \"1s\", retry_max = \"10s\" }\nfailover = { settle = \"300s\" }\n",
	}
	want := defaults(testFile, "gm154")
	want.HeartbeatInterval, want.HeartbeatMisses = 2*time.Second, 4
	want.RetryInitial, want.RetryMax = time.Second, 10*time.Second
	want.FailoverSettle = 5 * time.Minute
	want.HandshakeTimeout = 8 * time.Second
	for _, in := range forms {
		if got := mustParse(t, testFile, in, "gm154"); !equal(got, want) {
			t.Errorf("%q:\n got  %#v\n want %#v", in, got, want)
		}
	}
}

func TestRenderAttributes(t *testing.T) {
	in := `[attributes]
s = "tab\there \"quoted\" back\\slash \u0001 \u007f é 名"
empty = ""
i = -9223372036854775808
f2 = -0.0
f3 = inf
f6 = 3.0
none = []
mixed = [1, "two", 3.5, true]
"key with spaces" = 1
"" = "empty key"
"dotted.key" = 2
"quote\"key" = 3
`
	c := mustParse(t, testFile, in, "gm154")
	if got := c.Attributes["none"]; !reflect.DeepEqual(got, []any{}) {
		t.Errorf("none = %#v", got)
	}
	if got := c.Attributes["i"]; got != int64(math.MinInt64) {
		t.Errorf("i = %#v", got)
	}
	if got := c.Attributes["f2"].(float64); got != 0 || !math.Signbit(got) {
		t.Errorf("f2 = %#v", got)
	}
	// A Config made in code may hold values Parse never produces: Render
	// still writes TOML that parses.
	m := defaults("", "gm154")
	m.Attributes = map[string]any{"int": 3, "u8": uint8(4), "f32": float32(0.5), "strs": []string{"a"}, "nil": nil, "dur": time.Second}
	q, err := Parse("", m.Render(), "h")
	if err != nil {
		t.Fatalf("%v\n%s", err, m.Render())
	}
	want := map[string]any{"int": int64(3), "u8": int64(4), "f32": 0.5, "strs": []any{"a"}, "nil": "", "dur": int64(time.Second)}
	if !reflect.DeepEqual(q.Attributes, want) {
		t.Errorf("got %#v, want %#v", q.Attributes, want)
	}
}

func TestSuggest(t *testing.T) {
	for in, want := range map[string]string{
		"nme": "name", "datadir": "data_dir", "lisen": "listen", "superior": "superiors", "dail": "dial",
		"failovr": "failover", "fallback_superior": "fallback_superiors", "fallback": "",
		"failover.setle": "failover.settle", "settle": "failover.settle", "prefer_configured": "",
		"prefer_configured_superiors": "prefer_configured_superior", "heartbeat.intervall": "heartbeat.interval",
		"heartbeat.Misses": "heartbeat.misses", "interval": "heartbeat.interval", "cpu": "resources.cpus",
		"resources.mem": "", "x": "", "identity_file": "", "completely_unknown": "",
	} {
		if got := suggest(strings.Split(in, ".")); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestResourceOverridesAndPolicy(t *testing.T) {
	in := `name = "gm154"
policy = "request.user in ['alice'] && cpu_util < 0.3"

[resources]
cpus = 4
memory = "8GiB"
memory_free = "6GiB"
cpu_util = 0.25
net_mbps = 1000
refresh = "2s"
`
	c := mustParse(t, testFile, in, "h")
	if c.CPUs != 4 || c.Memory != 8<<30 || c.MemoryFree != 6<<30 || c.CPUUtil == nil || *c.CPUUtil != 0.25 || c.NetMbps != 1000 || c.HostRefresh != 2*time.Second {
		t.Fatalf("resources %+v", c)
	}
	if c.PolicyProgram() == nil || c.PolicyProgram().Source() != "request.user in ['alice'] && cpu_util < 0.3" {
		t.Fatalf("policy %q", c.Policy)
	}
	for _, bad := range []struct{ in, key, msg string }{
		{"[resources]\ncpu_util = 1.5\n", "resources.cpu_util", "1.5 is out of range 0 to 1"},
		{"[resources]\ncpu_util = \"high\"\n", "resources.cpu_util", `expected a number, got string "high"`},
		{"[resources]\nnet_mbps = -1\n", "resources.net_mbps", "out of range"},
		{"[resources]\nrefresh = \"1ms\"\n", "resources.refresh", "too short"},
		{"policy = 3\n", "policy", "expected a string"},
		// The policy is compiled here, its error placed on its line, and
		// its key said once.
		{"\npolicy = 'cpus_fre > 1'\n", "policy", "undeclared reference to 'cpus_fre' (did you mean 'cpus_free'?)"},
		// So is the owner's rank, at its own line (not the policy's).
		{"policy = 'true'\n\nrank = 'cpus_fre'\n", "rank", "undeclared reference to 'cpus_fre'"},
		// It computes owner_rank, which policies read: it may not read it.
		{"policy = 'owner_rank > 1'\nrank = 'owner_rank + 1.0'\n", "rank", "the owner's rank cannot read owner_rank"},
	} {
		_, err := Parse(testFile, []byte(bad.in), "h")
		var es Errors
		if !errors.As(err, &es) || len(es) != 1 || es[0].Key != bad.key || es[0].Line == 0 || !strings.Contains(es[0].Msg, bad.msg) ||
			strings.HasPrefix(es[0].Msg, "policy:") || strings.HasPrefix(es[0].Msg, "rank:") {
			t.Errorf("%q: %v", bad.in, err)
		} else if line := strings.Count(bad.in[:strings.Index(bad.in, bad.key[strings.LastIndex(bad.key, ".")+1:]+" = ")], "\n") + 1; es[0].Line != line {
			t.Errorf("%q: %v: want line %d", bad.in, err, line)
		}
	}
}

// Validate fills what a Config made in code leaves zero, with the file's
// defaults, and holds it to the file's bounds, naming the key.
func TestValidate(t *testing.T) {
	c := Config{Name: "gm154"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.HeartbeatInterval != time.Second || c.HeartbeatMisses != 3 || c.RetryMax != 30*time.Second ||
		c.Reservations != reservation.DefaultLimits || c.HandshakeTimeout != 3*time.Second || c.Identity != "/var/lib/gridmgr/identity.key" {
		t.Errorf("defaults not filled: %+v", c)
	}
	// The identity follows a data dir set after Default: two managers made
	// that way must not share a key.
	d := Default()
	d.Name, d.DataDir = "gm154", "/srv/gm154"
	if err := d.Validate(); err != nil || d.Identity != "/srv/gm154/identity.key" {
		t.Errorf("identity %q after setting the data dir (%v)", d.Identity, err)
	}
	for _, tc := range []struct {
		mod       func(*Config)
		key, want string
	}{
		{func(c *Config) { c.Name = "" }, "name", "must be set"},
		{func(c *Config) { c.HeartbeatInterval = time.Millisecond }, "heartbeat.interval", "1ms is too short; the minimum is 10ms"},
		{func(c *Config) { c.RetryInitial, c.RetryMax = 2*time.Second, time.Second }, "dial.retry_max", "1s is shorter than dial.retry_initial (2s)"},
		{func(c *Config) { c.LogLevel = "loud" }, "log_level", `unknown log level "loud"`},
		{func(c *Config) { c.Reservations.DefaultLease = 48 * time.Hour }, "reservations.lease", "outside"},
		{func(c *Config) { c.Access = map[string][]string{"gpus": {"*"}} }, "access.gpus", "not a reservable kind"},
		{func(c *Config) {
			c.Superiors = []peeraddr.PeerAddrs{{Peer: peer1}}
			c.FallbackSuperiors = []peeraddr.PeerAddrs{{Peer: peer2}, {Peer: peer1}}
		}, "fallback_superiors[1]", "already in superiors[0]"},
		{func(c *Config) { c.Policy = "cpus >" }, "policy", "syntax error"},
		{func(c *Config) { c.HTTPHosts = []string{"grid.example.org", "evil example"} }, "http_hosts", `entry 1: "evil example" is not a host name`},
	} {
		c := Config{Name: "gm154"}
		tc.mod(&c)
		err := c.Validate()
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrConfig) || e.Key != tc.key || !strings.Contains(e.Msg, tc.want) {
			t.Errorf("Validate: %v; want %s: …%s…", err, tc.key, tc.want)
		}
	}
}

// admin set goes through the same keys: type, bounds and messages of the
// file, only the settable keys, and the rules between keys.
func TestSet(t *testing.T) {
	c := *defaults("", "gm154")
	out, old, nw, err := Set(c, "heartbeat.interval", "500ms")
	if err != nil || out.HeartbeatInterval != 500*time.Millisecond || old != "1s" || nw != "500ms" || out.HandshakeTimeout != 2*time.Second {
		t.Fatalf("heartbeat.interval 500ms: %+v %q %q %v", out.HeartbeatInterval, old, nw, err)
	}
	if out, _, _, err := Set(c, "heartbeat.misses", "10"); err != nil || out.HandshakeTimeout != 10*time.Second {
		t.Errorf("heartbeat.misses 10: the handshake timeout should follow: %v %v", out.HandshakeTimeout, err)
	}
	if out, _, _, err := Set(c, "prefer_configured_superior", "true"); err != nil || !out.PreferConfiguredSuperior {
		t.Fatalf("prefer_configured_superior true: %v", err)
	}
	if out, _, nw, err := Set(c, "log_level", "debug"); err != nil || out.LogLevel != "debug" || nw != "debug" {
		t.Fatalf("log_level debug: %v", err)
	}
	for _, tc := range []struct{ k, v, want string }{
		{"heartbeat.interval", "5", `expected a duration string such as "1s", got integer 5`},
		{"heartbeat.interval", "5ms", "5ms is too short; the minimum is 10ms"},
		{"heartbeat.misses", "0", "must be between 1 and 100, got 0"},
		{"heartbeat.intervl", "1s", `did you mean "heartbeat.interval"`},
		{"log_level", "loud", `unknown log level "loud"`},
		{"name", "x", `"name" cannot be changed at runtime; it can: prefer_configured_superior, log_level, heartbeat.interval`},
		{"dial.retry_initial", "1m", "30s is shorter than dial.retry_initial (1m0s)"},
		{"heartbeat.interval", "1s\nname = \"x\"", `"1s\nname = \"x\"" is not a duration`},
	} {
		if _, _, _, err := Set(c, tc.k, tc.v); err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("set %s %q: %v, want …%s…", tc.k, tc.v, err, tc.want)
		}
	}
}

// http_hosts entries are names or addresses with an optional port,
// written back in one canonical form (so duplicates are found).
func TestHTTPHost(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"grid.example.org", "grid.example.org"},
		{"Grid.Example.ORG:8443", "grid.example.org:8443"},
		{"localhost", "localhost"},
		{"my_host-1", "my_host-1"},
		{"10.0.0.1", "10.0.0.1"},
		{"10.0.0.1:08150", "10.0.0.1:8150"},
		{"fd00::1", "fd00::1"},
		{"FD00:0::1", "fd00::1"},
		{"[fd00::1]", "fd00::1"},
		{"[fd00::1]:8150", "[fd00::1]:8150"},
		{"::ffff:10.0.0.1", "10.0.0.1"},
		{"", ""},
		{"grid.example.org.", ""},
		{"-grid.example.org", ""},
		{"grid..example.org", ""},
		{"grid example", ""},
		{"grid.example.org:http", ""},
		{"grid.example.org:65536", ""},
		{"grid.example.org:", ""},
		{"[grid.example.org]", ""},
		{"[fd00::1", ""},
		{"10.0.0.1/24", ""},
		{"fe80::1%eth0", ""},
		{strings.Repeat("a", 64) + ".org", ""},
		{strings.Repeat("a.", 127) + "org", ""},
	} {
		got, msg := httpHost(tc.in)
		if got != tc.want || (msg == "") != (tc.want != "") {
			t.Errorf("httpHost(%q) = %q, %q; want %q", tc.in, got, msg, tc.want)
		}
	}
}

// configs/single.toml documents every key: each appears there, set or
// commented out, and the file parses.
func TestSingleTomlDocumentsEveryKey(t *testing.T) {
	data, err := os.ReadFile("../configs/single.toml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse("../configs/single.toml", data, "h"); err != nil {
		t.Fatal(err)
	}
	section := ""
	seen := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.Trim(line, "[]")
			seen[section] = true
			continue
		}
		if k, _, ok := strings.Cut(line, " = "); ok && !strings.Contains(k, " ") {
			if section != "" {
				k = section + "." + k
			}
			seen[k] = true
		}
	}
	for _, k := range Keys() {
		if !seen[k.Path] {
			t.Errorf("configs/single.toml does not mention %s (%s)", k.Path, k.Doc)
		}
	}
}

func TestMemoryTrim(t *testing.T) {
	for in, want := range map[string]time.Duration{"": time.Minute, "memory_trim = '0'\n": 0, "memory_trim = '10s'\n": 10 * time.Second, "memory_trim = '24h'\n": 24 * time.Hour} {
		if got := mustParse(t, "", in, "gm1").MemoryTrim; got != want {
			t.Errorf("%q: memory_trim %v, want %v", in, got, want)
		}
	}
}
