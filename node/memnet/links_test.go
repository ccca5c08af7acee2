package memnet

import (
	"slices"
	"testing"
)

// links answer as the two maps they replace would (peer → channel open
// now, channel → peer, a replaced channel kept until forgotten).
func TestLinksAsTwoMaps(t *testing.T) {
	var ls links
	chans, peerOf := map[string]uint64{}, map[uint64]string{}
	nodes := map[string]*Node{"a": {Peer: "a"}, "b": {Peer: "b"}, "c": {Peer: "c"}}
	check := func(step string) {
		t.Helper()
		for _, p := range []string{"a", "b", "c"} {
			if got := ls.chanTo(p); got != chans[p] {
				t.Fatalf("%s: channel to %s is %d, want %d", step, p, got, chans[p])
			}
		}
		for ch := uint64(1); ch <= 6; ch++ {
			nd, ok := ls.peerOf(ch)
			p := ""
			if nd != nil {
				p = nd.Peer
			}
			want, wok := peerOf[ch]
			if p != want || ok != wok {
				t.Fatalf("%s: channel %d goes to %q %v, want %q %v", step, ch, p, ok, want, wok)
			}
		}
		var want []string
		for p := range chans {
			want = append(want, p)
		}
		slices.Sort(want)
		if got := ls.peers(); !slices.Equal(got, want) {
			t.Fatalf("%s: peers %v, want %v", step, got, want)
		}
	}
	open := func(p string, ch uint64) {
		ls.open(nodes[p], ch)
		chans[p], peerOf[ch] = ch, p
		check("open " + p)
	}
	open("b", 1)
	open("a", 2)
	open("b", 3) // replaces 1, which still goes to b
	ls.forget(3)
	delete(chans, "b")
	delete(peerOf, 3)
	check("forget 3")
	open("c", 4)
	ls.forget(1)
	delete(peerOf, 1)
	check("forget the replaced 1")
	open("a", 5)
	open("a", 6)
	ls.forget(6)
	delete(chans, "a")
	delete(peerOf, 6)
	check("forget a's latest")
}
