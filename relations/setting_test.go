package relations

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParsePeerMaddr(t *testing.T) {
	pa, err := ParsePeerMaddr("/ip4/10.0.0.2/tcp/4001/p2p/" + peer1)
	if err != nil || pa.Peer != peer1 || len(pa.Addrs) != 1 || pa.Addrs[0] != "/ip4/10.0.0.2/tcp/4001" {
		t.Fatalf("got %+v, %v", pa, err)
	}
	for in, want := range map[string]string{
		"gm156":                               "must begin with /",
		"/ip4/10.0.0.2/tcp/4001":              "has no /p2p/<peer id> part",
		"/ip4/10.0.0.2/udp/4001/p2p/" + peer1: "is not /ip4|/ip6|/dns|/dns4|/dns6/<host>/tcp/<port>/p2p/<peer id>",
		"/p2p/" + peer1 + "/ip4/10.0.0.2":     "must end with its /p2p/<peer id> part",
	} {
		if _, err := ParsePeerMaddr(in); err == nil || !errors.Is(err, ErrAddr) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want ErrAddr with %q", in, err, want)
		}
	}
}

func TestParseSetting(t *testing.T) {
	p, err := ParseSetting("heartbeat.interval", "500ms")
	if err != nil || p.Heartbeat.Interval != 500*time.Millisecond {
		t.Fatalf("heartbeat.interval 500ms: %v, %v", p, err)
	}
	if p, err := ParseSetting("prefer_configured_superior", "true"); err != nil || !p.PreferConfiguredSuperior {
		t.Fatalf("prefer_configured_superior true: %v", err)
	}
	if p, err := ParseSetting("log_level", "debug"); err != nil || p.LogLevel != "debug" {
		t.Fatalf("log_level debug: %v", err)
	}
	for _, tc := range []struct{ k, v, want string }{
		{"heartbeat.interval", "5", "expected a duration string"},
		{"heartbeat.misses", "0", "heartbeat.misses"},
		{"heartbeat.intervl", "1s", `did you mean "heartbeat.interval"`},
		{"log_level", "loud", "log_level"},
		{"heartbeat", "1s", "unknown key"},
		{"heartbeat.interval", "1s\nname = \"x\"", "heartbeat.interval"},
	} {
		if _, err := ParseSetting(tc.k, tc.v); err == nil || !errors.Is(err, ErrSetting) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("set %s %q: %v, want ErrSetting with %q", tc.k, tc.v, err, tc.want)
		}
	}
}
