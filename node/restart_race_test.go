package node_test

import (
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/node/memnet"
)

// A superior that stops and is back before its inferior has finished
// replacing it (the inferior's redial reaches it while the grandparent's
// welcome is still on its way, over a slower link): whichever of the two
// the inferior keeps, it tells the other that it left, so that neither
// shows it as an inferior gone down for DownInferiorRetention (a minute).
// Without that goodbye this fails where the link to the grandparent takes
// 250 ms or more: c goes back to b, and a keeps c as gone down.
// TestPrivateNetworkGlideInJoinsLauncher met the other way round with
// real processes (the launcher kept the inferior that had moved on).
func TestQuickRestartLeavesNoDownInferior(t *testing.T) {
	for _, back := range []time.Duration{5 * time.Millisecond, 40 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond} {
		for _, slow := range []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond, 45 * time.Millisecond, 60 * time.Millisecond, 90 * time.Millisecond, 120 * time.Millisecond, 180 * time.Millisecond, 250 * time.Millisecond, 400 * time.Millisecond, 700 * time.Millisecond} {
			n := newNet(1)
			n.Add(pid("a"), testConfig(t, "a"))
			n.Add(pid("b"), testConfig(t, "b", "a"))
			n.Add(pid("c"), testConfig(t, "c", "b"))
			for _, m := range []string{"a", "b", "c"} {
				n.Start(pid(m))
			}
			if !n.RunUntil(func() bool {
				return relState(n, "c", "b") == "superior:up" && relState(n, "b", "a") == "superior:up"
			}, time.Minute) {
				t.Fatal("a ← b ← c did not form")
			}
			n.Link = func(from, to *memnet.Node) time.Duration {
				if from.Name == "c" && to.Name == "a" || from.Name == "a" && to.Name == "c" {
					return slow
				}
				return time.Millisecond
			}
			n.Stop(pid("b"), "shutting down")
			n.RunFor(back)
			n.Start(pid("b"))
			n.RunFor(10 * time.Second)
			ups := 0
			for _, sup := range []string{"a", "b"} {
				if s := relState(n, "c", sup); s == "superior:up" {
					ups++
				}
				if s := relState(n, sup, "c"); s == "inferior:down" {
					t.Errorf("back after %v, link to a %v: %s holds c as an inferior gone down (c: a %q, b %q)", back, slow, sup, relState(n, "c", "a"), relState(n, "c", "b"))
				}
			}
			if ups != 1 {
				t.Errorf("link to a %v: c has %d superiors up (a %q, b %q), want 1", slow, ups, relState(n, "c", "a"), relState(n, "c", "b"))
			}
		}
	}
}
