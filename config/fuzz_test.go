package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzFiles are the file arguments the fuzz target picks from, to exercise
// path resolution and its round trip.
var fuzzFiles = []string{"", "gm154.toml", "conf/gm154.toml", "../conf/gm154.toml", "/etc/gridmgr/gm154.toml"}

// FuzzParse checks that Parse never panics, that its
// errors are always well-formed Errors, and that whatever it
// accepts survives Render and a second parse unchanged.
func FuzzParse(f *testing.F) {
	paths, err := filepath.Glob("testdata/*.toml")
	if err != nil {
		f.Fatal(err)
	}
	for i, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, uint8(i))
	}
	for i, tc := range errorCases {
		f.Add([]byte(tc.in), uint8(i))
	}
	for i, in := range []string{
		"",
		"name = \"gm154\"\nlisten = [\"/ip6/::1/tcp/0\"]\nsuperiors = [\"/dns/gm1/tcp/1/p2p/" + peer1 + "\"]\n",
		"data_dir = \"a/../../b\"\nidentity = \"./k\"\nprivate_network_key = \"/x/../y\"\n",
		"[attributes]\nf = -0.0\ng = inf\nh = 1e300\ni = -9223372036854775808\ns = \"\\u0000\\t\\\"\"\n\"\" = []\n",
		"[resources]\ncpus = 65536\nmemory = \"1.5 GiB\"\n[heartbeat]\ninterval = \"1h\"\nmisses = 100\n[dial]\nretry_initial = \"10ms\"\nretry_max = \"24h\"\n",
		"superiors = [\"/ip4/1.2.3.4/tcp/1/p2p/" + peer1 + "\"]\nfallback_superiors = [\"/dns4/gm3/tcp/1/p2p/" + peer2 + "\", \"/ip6/::1/tcp/2/ipfs/" + peer2 + "\"]\nprefer_configured_superior = true\n[failover]\nsettle = \"1h\"\n",
	} {
		f.Add([]byte(in), uint8(i))
	}

	f.Fuzz(func(t *testing.T, data []byte, fileIdx uint8) {
		file := fuzzFiles[int(fileIdx)%len(fuzzFiles)]
		p, err := Parse(file, data, "fuzz-host")
		if err != nil {
			if p != nil {
				t.Fatalf("got both a Config and error %v", err)
			}
			var list Errors
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error is %T %v, want a non-empty Errors", err, err)
			}
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error does not wrap ErrConfig: %v", err)
			}
			for _, e := range list {
				if e == nil || e.Msg == "" || e.File != file || e.Line < 0 {
					t.Fatalf("malformed error %#v in %v", e, err)
				}
				if strings.Contains(e.Msg, "internal error") {
					t.Fatalf("panic inside Parse: %v", e)
				}
				if strings.ContainsAny(e.Msg+e.Key, "\n\r") {
					t.Fatalf("error text spans lines: %q", e.Error())
				}
			}
			return
		}
		if p == nil {
			t.Fatal("nil Config without an error")
		}
		checkRoundTrip(t, p)
	})
}
