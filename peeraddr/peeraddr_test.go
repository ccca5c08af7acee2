package peeraddr

import (
	"errors"
	"strings"
	"testing"
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

const peer1 = "12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf"
