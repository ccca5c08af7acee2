package reservation_test

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	rv "github.com/gridmgr/gridmgr/reservation"
)

// Oldest is List cut to limit, with the count of all it accepts, for any
// limit and filter; OldestAfter is the same of those made after a
// number. List's order is the order of making (the sequence numbers),
// whatever the creation times say: here they tie and go back and forth.
func TestOldestIsListCut(t *testing.T) {
	l := lbLedger()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		now := ltEpoch.Add(time.Duration(rng.IntN(50)) * time.Millisecond) // ties in Created, and a clock set back
		if _, _, err := l.Reserve(now, rv.Request{RequestID: "r" + strconv.Itoa(i), Holder: ltAlice,
			Amounts: []rv.Amount{{Kind: rv.CPUs, N: 1}}, Commit: rng.IntN(2) == 0}); err != nil {
			t.Fatal(err)
		}
	}
	seqOf := func(r rv.Reservation) uint64 {
		_, seq, _, err := rv.ParseID(r.ID)
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	if all := l.List(nil); len(all) != 300 {
		t.Fatalf("List: %d, want 300", len(all))
	} else {
		for i, r := range all {
			if seqOf(r) != uint64(i+1) {
				t.Fatalf("List #%d is %s: not in the order of making", i, r.ID)
			}
		}
	}
	for _, keep := range []func(*rv.Reservation) bool{nil, func(r *rv.Reservation) bool { return r.State == rv.Committed }} {
		all := l.List(keep)
		for _, after := range []uint64{0, 1, 2, 150, 299, 300, 301, 1 << 40} {
			var rest []rv.Reservation
			for _, r := range all {
				if seqOf(r) > after {
					rest = append(rest, r)
				}
			}
			for _, limit := range []int{0, 1, 2, 7, 150, 299, 300, 1000} {
				got, total := l.OldestAfter(after, keep, limit)
				if after == 0 {
					got0, total0 := l.Oldest(keep, limit)
					if total0 != total || len(got0) != len(got) {
						t.Fatalf("limit %d: Oldest %d of %d, OldestAfter(0) %d of %d", limit, len(got0), total0, len(got), total)
					}
				}
				if total != len(rest) {
					t.Fatalf("after %d, limit %d: total %d, want %d", after, limit, total, len(rest))
				}
				want := rest[:min(limit, len(rest))]
				if len(got) != len(want) {
					t.Fatalf("after %d, limit %d: %d listed, want %d", after, limit, len(got), len(want))
				}
				for i := range got {
					if got[i].ID != want[i].ID {
						t.Fatalf("after %d, limit %d: #%d is %s, want %s", after, limit, i, got[i].ID, want[i].ID)
					}
				}
			}
		}
	}
}

// SeqOf takes any well-formed number of this manager, known or not, and
// refuses others as a bad request that says what is wrong.
func TestSeqOf(t *testing.T) {
	l := lbLedger()
	r, _, err := l.Reserve(ltEpoch, rv.Request{RequestID: "r", Holder: ltAlice, Amounts: []rv.Amount{{Kind: rv.CPUs, N: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	name, _, tag, _ := rv.ParseID(r.ID)
	for id, want := range map[string]uint64{
		r.ID:                          1,
		rv.FormatID(name, 9000, tag):  9000, // not made yet
		rv.FormatID("old", 7, tag):    7,    // made under another name
		rv.FormatID(name, 1<<63, tag): 1 << 63,
	} {
		if got, err := l.SeqOf(id); err != nil || got != want {
			t.Errorf("SeqOf(%q) = %d, %v; want %d", id, got, err, want)
		}
	}
	for id, want := range map[string]string{
		"":                             "malformed",
		"nope":                         "malformed",
		rv.FormatID(name, 1, "aaaaaa"): "not this manager's",
		name + "-0-" + tag:             "not a positive number",
		name + "-x-" + tag:             "not a positive number",
		strings.Repeat("a", 200):       "malformed",
	} {
		_, err := l.SeqOf(id)
		if rv.CodeOf(err) != rv.CodeBadRequest || !strings.Contains(err.Error(), want) {
			t.Errorf("SeqOf(%q) = %v (%v), want a bad request saying %q", id, err, rv.CodeOf(err), want)
		}
	}
}
