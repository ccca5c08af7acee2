package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node/p2p"
)

// run runs gridmgr in-process and returns exit code, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodPeer = "12D3KooWQ4qwPRmkkWeAMpEhufgtsxeEkxLdMZGXQRB249SkJYjv"

// Every kind of properties-file error exits 2 and names file, line and key.
func TestBadPropertiesExitCode2(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, body, line, key string
	}{
		{"unknown key", "name = \"a\"\nsuperiors = []\nlisten_addr = [\"/ip4/127.0.0.1/tcp/1\"]\n", "3", "listen_addr"},
		{"unknown table key", "name = \"a\"\n[heartbeat]\ninterval = \"1s\"\nmises = 3\n", "4", "heartbeat.mises"},
		{"wrong type", "name = \"a\"\n[heartbeat]\ninterval = 5\n", "3", "heartbeat.interval"},
		{"wrong type int", "name = \"a\"\n\n[heartbeat]\nmisses = \"three\"\n", "4", "heartbeat.misses"},
		{"malformed multiaddr", "name = \"a\"\nlisten = [\"/ip4/1.2.3/tcp/4001\"]\n", "2", "listen[0]"},
		{"missing peer id", "name = \"a\"\nsuperiors = [\n  \"/ip4/10.0.0.1/tcp/4001\",\n]\n", "3", "superiors[0]"},
		{"bad peer id", "name = \"a\"\nsuperiors = [\"/ip4/10.0.0.1/tcp/4001/p2p/12D3KooWbad\"]\n", "2", "superiors[0]"},
		{"bad admin", "name = \"a\"\n\n\nadmins = [\"not-a-peer\"]\n", "4", "admins[0]"},
		{"toml syntax", "name = \"a\"\nlisten = [\n", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := writeFile(t, dir, strings.ReplaceAll(tc.name, " ", "_")+".toml", tc.body)
			code, _, stderr := run(t, "run", "-c", f)
			if code != exitUsage {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			want := f + ":"
			if tc.line != "" {
				want += tc.line + ": " + tc.key + ":"
			}
			if !strings.Contains(stderr, want) {
				t.Fatalf("stderr does not name %q:\n%s", want, stderr)
			}
		})
	}
	// A policy that does not compile is placed at its line too.
	f := writeFile(t, dir, "policy.toml", "name = \"a\"\n\npolicy = \"request.usr == 'x'\"\n")
	if code, _, stderr := run(t, "run", "-c", f); code != exitUsage || !strings.Contains(stderr, f+":3: policy:") || !strings.Contains(stderr, "did you mean") {
		t.Fatalf("bad policy: exit %d\n%s", code, stderr)
	}
	// id reads the same file and fails the same way.
	f = writeFile(t, dir, "id.toml", "name = \"a\"\nheartbeat = 1\n")
	if code, _, stderr := run(t, "id", "-c", f); code != exitUsage || !strings.Contains(stderr, f+":2: heartbeat:") {
		t.Fatalf("id: exit %d\n%s", code, stderr)
	}
	// A missing file, a missing -c, and a bad flag are usage errors too.
	for _, args := range [][]string{{"run", "-c", filepath.Join(dir, "nope.toml")}, {"run"}, {"run", "--bogus"}, {"tree"}, {"tree", "-n", "/ip4/127.0.0.1/tcp/1"}} {
		if code, _, stderr := run(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, stderr)
		}
	}
}

func TestHelpAndUnknown(t *testing.T) {
	code, out, _ := run(t, "help")
	if code != 0 {
		t.Fatalf("help exit %d", code)
	}
	for _, c := range commands() {
		if !strings.Contains(out, "  "+c.name) {
			t.Errorf("help does not list %s", c.name)
		}
	}
	code, _, stderr := run(t, "stauts")
	if code != exitUsage || !strings.Contains(stderr, `did you mean "status"`) {
		t.Fatalf("unknown command: exit %d\n%s", code, stderr)
	}
	for _, args := range [][]string{{"help", "stauts"}, {"help", "nosuch"}, {"help", "query", "extra"}} {
		code, out, stderr := run(t, args...)
		if code != exitUsage || out != "" || stderr == "" {
			t.Errorf("%v: exit %d, want 2 and a message on stderr\nstdout %s\nstderr %s", args, code, out, stderr)
		}
	}
	if _, _, stderr := run(t, "help", "stauts"); !strings.Contains(stderr, `did you mean "status"`) {
		t.Errorf("help stauts does not suggest status:\n%s", stderr)
	}
	if code, out, _ := run(t, "version"); code != 0 || !strings.Contains(out, "/gridmgr/mesh/1.0.0") {
		t.Fatalf("version: %d %s", code, out)
	}
}

// Every command's -h and `help COMMAND` print its usage once and every
// flag once, with its default; a bad flag is one line and a pointer to -h.
func TestCommandUsageListsFlags(t *testing.T) {
	for _, cmd := range commands() {
		if cmd.run == nil {
			continue
		}
		t.Run(cmd.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			c := &cli{stdout: &out, stderr: &errb}
			if code := c.main([]string{cmd.name, "-h"}); code != 0 {
				t.Fatalf("-h: exit %d\n%s", code, errb.String())
			}
			usage := out.String()
			if n := strings.Count(usage, "Usage: gridmgr "+cmd.name); n != 1 {
				t.Errorf("-h prints the header %d times:\n%s", n, usage)
			}
			if errb.Len() != 0 {
				t.Errorf("-h wrote to stderr: %s", errb.String())
			}
			fs := c.flags
			lines := strings.Split(usage, "\n")
			fs.VisitAll(func(f *flag.Flag) {
				if fs.hidden[f.Name] {
					return
				}
				syn := flagSynopsis(f)
				n, line := 0, ""
				for _, l := range lines {
					if strings.HasPrefix(l, "  "+syn+" ") || l == "  "+syn {
						n, line = n+1, l
					}
				}
				if n != 1 {
					t.Errorf("flag %s listed %d times:\n%s", syn, n, usage)
					return
				}
				if zero := reflect.New(reflect.TypeOf(f.Value).Elem()).Interface().(flag.Value).String(); f.DefValue != zero &&
					!strings.Contains(line, "(default "+f.DefValue+")") {
					t.Errorf("flag %s does not show its default %q: %s", syn, f.DefValue, line)
				}
			})
			if code, out2, _ := run(t, "help", cmd.name); code != 0 || out2 != usage {
				t.Errorf("help %s: exit %d, and not the same text as -h:\n%s", cmd.name, code, out2)
			}
			code, out3, stderr := run(t, cmd.name, "--no-such-flag")
			if code != exitUsage || out3 != "" || strings.Contains(stderr, "Usage:") ||
				stderr != "gridmgr "+cmd.name+": unknown flag --no-such-flag\nRun 'gridmgr "+cmd.name+" -h' to see its usage and flags.\n" {
				t.Errorf("bad flag: exit %d\nstdout %s\nstderr %s", code, out3, stderr)
			}
		})
	}
	// Bad values name the flag and what would do, in one line.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"query", "--timeout", "5", "true"}, `gridmgr query: --timeout "5": missing unit: want a duration such as 500ms, 5s, 2m, 1h30m or 7d`},
		{[]string{"query", "--down", "x", "true"}, `gridmgr query: --down "x": want a number of levels (0-255) or "all"`},
		{[]string{"query", "--limit", "-1", "true"}, `gridmgr query: --limit "-1": out of range: want 1 to 1000`},
		{[]string{"query", "-n"}, `gridmgr query: -n ADDR needs a value`},
		{[]string{"reserve", "--usr", "x"}, `gridmgr reserve: unknown flag --usr (did you mean --user?)`},
		{[]string{"version", "x"}, `gridmgr version: unexpected argument "x"`},
	} {
		code, _, stderr := run(t, tc.args...)
		if code != exitUsage || !strings.HasPrefix(stderr, tc.want+"\nRun 'gridmgr ") || strings.Count(stderr, "\n") != 2 {
			t.Errorf("%v: exit %d\n%s\nwant %s", tc.args, code, stderr, tc.want)
		}
	}
}

func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "k.key")
	code, out, stderr := run(t, "keygen", "-o", path)
	if code != 0 {
		t.Fatalf("keygen: %d %s", code, stderr)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	key, err := p2p.ReadIdentity(path)
	if err != nil || !strings.Contains(out, p2p.PeerIDOf(key)) {
		t.Fatalf("printed id does not match the key: %v\n%s", err, out)
	}
	if code, _, stderr := run(t, "keygen", "-o", path); code != exitUsage || !strings.Contains(stderr, "not overwriting") {
		t.Fatalf("keygen over an existing key: %d %s", code, stderr)
	}
	psk := filepath.Join(dir, "swarm.key")
	if code, _, stderr := run(t, "keygen", "--psk", "-o", psk); code != 0 {
		t.Fatalf("keygen --psk: %d %s", code, stderr)
	}
	if _, err := p2p.ReadPSK(psk); err != nil {
		t.Fatal(err)
	}
}

// The example configs agree with each other: every superiors entry names
// the peer id of that superior's key and the port it listens on.
func TestConfigsConsistent(t *testing.T) {
	files, _ := filepath.Glob("../../configs/*.toml")
	if len(files) < 7 {
		t.Fatalf("expected the six patent configs and single.toml, found %v", files)
	}
	byAddr := map[string]string{} // listen addr/p2p/id → name
	props := map[string]*config.Config{}
	for _, f := range files {
		data, _ := os.ReadFile(f)
		p, err := config.Parse(f, data, "host")
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		props[p.Name] = p
		if strings.HasPrefix(filepath.Base(f), "single") {
			continue
		}
		key, err := p2p.ReadIdentity(p.Identity)
		if err != nil {
			t.Fatalf("%s: identity: %v", f, err)
		}
		for _, l := range p.Listen {
			byAddr[l+"/p2p/"+p2p.PeerIDOf(key)] = p.Name
		}
	}
	want := map[string]string{"gm154": "gm152", "gm156": "gm152", "gm160": "gm154", "gm162": "gm154", "gm164": "gm156"}
	for child, sup := range want {
		p := props[child]
		if p == nil || len(p.Superiors) != 1 {
			t.Fatalf("%s: want one superior", child)
		}
		s := p.Superiors[0]
		if got := byAddr[s.Addrs[0]+"/p2p/"+s.Peer]; got != sup {
			t.Errorf("%s's superior resolves to %q, want %s", child, got, sup)
		}
	}
	if len(props["gm152"].Superiors) != 0 {
		t.Error("gm152 should be the root")
	}
}

func TestRunWritesAddrFileAndStopsOnSignal(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "m.toml", "name = \"solo\"\nlisten = [\"/ip4/127.0.0.1/tcp/0\"]\ndata_dir = \"data\"\n")
	stop := make(chan struct{})
	var out, errb bytes.Buffer
	c := &cli{stdout: &out, stderr: &errb, interrupt: stop}
	done := make(chan int)
	go func() { done <- c.main([]string{"run", "-c", f, "--log-level", "warn"}) }()
	addrFile := filepath.Join(dir, "data", daemon.AddrFile)
	deadline := time.Now().Add(10 * time.Second)
	var addr string
	for time.Now().Before(deadline) {
		if a, err := daemon.ReadAddrFile(filepath.Join(dir, "data")); err == nil {
			addr = a
			break
		}
		time.Sleep(10 * time.Millisecond) // waiting for a real process, not timing it
	}
	if addr == "" {
		t.Fatalf("no addr file at %s; stderr:\n%s", addrFile, errb.String())
	}
	if !regexp.MustCompile(`^/ip4/127\.0\.0\.1/tcp/\d+/p2p/12D3Koo`).MatchString(addr) {
		t.Fatalf("addr file holds %q", addr)
	}
	code, stdout, stderr := run(t, "status", "-d", filepath.Join(dir, "data"))
	if code != 0 || !strings.Contains(stdout, "solo") || !strings.Contains(stdout, "ancestors none (a root)") {
		t.Fatalf("status: %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = run(t, "ping", "-d", filepath.Join(dir, "data"), "--count", "2")
	if code != 0 || strings.Count(stdout, "solo: round trip") != 2 {
		t.Fatalf("ping: %d\n%s\n%s", code, stdout, stderr)
	}
	code, _, stderr = run(t, "ping", "-d", filepath.Join(dir, "data"), "nobody")
	if code != exitFailure || !strings.Contains(stderr, `solo has no relation with "nobody"`) {
		t.Fatalf("ping of a stranger: %d\n%s", code, stderr)
	}
	code, stdout, stderr = run(t, "query", "-d", filepath.Join(dir, "data"), "cpus >= 1", "--rank", "mem_free")
	if code != 0 || !strings.Contains(stdout, "1  solo") || !strings.Contains(stdout, "1 offer(s) shown of 1 matched; 1 manager(s) searched") {
		t.Fatalf("query: %d\n%s\n%s", code, stdout, stderr)
	}
	code, _, stderr = run(t, "query", "-d", filepath.Join(dir, "data"), "cpus >= 1 &&")
	if code != exitUsage || !strings.Contains(stderr, "syntax error") || !strings.Contains(stderr, "^") {
		t.Fatalf("bad query: %d\n%s", code, stderr)
	}
	code, stdout, _ = run(t, "resources", "-d", filepath.Join(dir, "data"))
	if code != 0 || !strings.Contains(stdout, "solo") || !strings.Contains(stdout, "cpus ") {
		t.Fatalf("resources: %d\n%s", code, stdout)
	}
	code, stdout, _ = run(t, "tree", "-d", filepath.Join(dir, "data"), "--json")
	var tree struct{ Name, State string }
	if err := json.Unmarshal([]byte(stdout), &tree); code != 0 || err != nil || tree.Name != "solo" || tree.State != "up" {
		t.Fatalf("tree --json: %d %v\n%s", code, err, stdout)
	}
	close(stop)
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d\n%s", code, errb.String())
	}
	if _, err := os.Stat(addrFile); !os.IsNotExist(err) {
		t.Fatalf("addr file left behind: %v", err)
	}
}

func TestDemoOnce(t *testing.T) {
	// The demo makes the CLI's client key its admin, creating it if
	// missing: not in the home of whoever runs the tests.
	t.Setenv("GRIDMGR_CLIENT_KEY", filepath.Join(t.TempDir(), "client.key"))
	code, out, stderr := run(t, "demo", "--once")
	if code != 0 {
		t.Fatalf("demo exit %d\n%s\n%s", code, out, stderr)
	}
	for _, want := range []string{"gm152", "├── gm154  up", "│   ├── gm160  up", "│   └── gm162  up", "└── gm156  up", "    └── gm164  up", "grid formed: 6 managers",
		"query at gm160 (a leaf)", "1  gm164    32/32", "1 offer(s) shown of 1 matched; 6 manager(s) searched",
		"gm154      asked by gm160      up", "gm152      asked by gm154      up", "gm164      asked by gm156      down  offers 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

// The shipped configs keep their keys in configs/keys/, not in the data
// dir: `web-token -d DIR`, as the web UI says to run it, finds the key
// where the manager that ran with DIR keeps it, and prints the token
// `web-token -c FILE` prints. A data dir no such manager ran with says
// to give -c.
func TestWebTokenDataDirWithShippedConfigs(t *testing.T) {
	files, _ := filepath.Glob("../../configs/gm*.toml")
	if len(files) != 6 {
		t.Fatalf("want the six configs of the example tree, found %v", files)
	}
	for _, f := range files {
		data, _ := os.ReadFile(f)
		cfg, err := config.Parse(f, data, "host")
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(cfg.Identity) == cfg.DataDir {
			t.Fatalf("%s keeps its key in its data dir: this test is about the others", f)
		}
		// Its own key, on a data dir and port of the test's.
		cfg.DataDir = filepath.Join(t.TempDir(), cfg.Name)
		cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
		cfg.HTTPListen, cfg.Superiors, cfg.LogLevel = "", nil, "error"
		m, err := daemon.Start(*cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		m.Stop()
		_, byFile, _ := run(t, "web-token", "-c", f)
		code, byDir, stderr := run(t, "web-token", "-d", cfg.DataDir)
		want, _ := daemon.WebToken(m.Key)
		if code != exitOK || byDir != want+"\n" || byFile != byDir {
			t.Errorf("%s: web-token -d: exit %d %q %s; -c: %q; want %q", f, code, byDir, stderr, byFile, want)
		}
	}
	empty := t.TempDir()
	code, _, stderr := run(t, "web-token", "-d", empty)
	if code != exitUsage || stderr != "gridmgr web-token: "+empty+" holds no identity key, and no manager started with this data dir has said where its key is: give -c FILE, its properties file\n" {
		t.Errorf("a data dir without a key: exit %d %s", code, stderr)
	}
	code, _, stderr = run(t, "web-token", "-d", filepath.Join(empty, "none"))
	if code != exitUsage || !strings.Contains(stderr, "no such data dir") {
		t.Errorf("no data dir: exit %d %s", code, stderr)
	}
}
