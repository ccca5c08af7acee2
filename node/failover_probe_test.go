package node_test

import (
	"strings"
	"testing"
	"time"
)

// The helper of an indirect probe may know the asker as a relation that
// is down (a former inferior, kept for a minute): it must still answer the
// probe, which comes on a new channel without a hello. gm160 was gm154's
// inferior and died; it restarts under gm162 (gm154's other inferior);
// then gm162 crashes: gm160 asks gm154, which still lists the old gm160 as
// a down inferior, and moves to gm154 about a second after the crash, not
// after the 3.5s heartbeat timeout.
func TestProbeHelperKnowsAskerAsDown(t *testing.T) {
	n := patentNet(t, 7)
	for _, e := range patent {
		n.Start(pid(e[0]))
	}
	if !n.RunUntil(func() bool { return formed(n) }, time.Minute) {
		t.Fatal("tree not formed")
	}
	n.Kill(pid("gm160"))
	n.RunFor(5 * time.Second)
	if got := relState(n, "gm154", "gm160"); got != "inferior:down" {
		t.Fatalf("gm154 sees gm160 as %q, want inferior:down", got)
	}
	nd := n.Node(pid("gm160"))
	nd.SetConfig(testConfig(t, "gm160", "gm162"))
	nd.Disk.Relations = nil
	n.Start(pid("gm160"))
	if !n.RunUntil(func() bool { return relState(n, "gm160", "gm162") == "superior:up" }, 10*time.Second) {
		t.Fatalf("gm160 not under gm162:\n%s", dump(n))
	}
	n.RunFor(2*time.Second + 300*time.Millisecond)
	if got := relState(n, "gm154", "gm160"); got != "inferior:down" {
		t.Fatalf("gm154 sees gm160 as %q, want it still inferior:down", got)
	}
	n.Kill(pid("gm162"))
	start := n.Now()
	if !n.RunUntil(func() bool { return relState(n, "gm160", "gm154") == "superior:up" }, 10*time.Second) {
		t.Fatalf("gm160 not under gm154:\n%s", dump(n))
	}
	if took := n.Now().Sub(start); took > 1500*time.Millisecond {
		var ev []string
		for _, e := range nd.Events {
			ev = append(ev, e.At.Sub(start).String()+" "+e.What)
		}
		t.Fatalf("reparented %v after the crash, want ≤ 1.5s:\n%s", took, strings.Join(ev, "\n"))
	}
}
