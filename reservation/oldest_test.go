package reservation_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	rv "github.com/gridmgr/gridmgr/reservation"
)

// Oldest is List cut to limit, with the count of all it accepts, for any
// limit and filter.
func TestOldestIsListCut(t *testing.T) {
	l := lbLedger()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		now := ltEpoch.Add(time.Duration(rng.IntN(50)) * time.Millisecond) // ties in Created
		r, _, err := l.Reserve(now, rv.Request{RequestID: "r" + strconv.Itoa(i), Holder: ltAlice,
			Amounts: []rv.Amount{{Kind: rv.CPUs, N: 1}}, Commit: rng.IntN(2) == 0})
		if err != nil {
			t.Fatal(err)
		}
		_ = r
	}
	for _, keep := range []func(*rv.Reservation) bool{nil, func(r *rv.Reservation) bool { return r.State == rv.Committed }} {
		all := l.List(keep)
		for _, limit := range []int{0, 1, 2, 7, 150, 299, 300, 1000} {
			got, total := l.Oldest(keep, limit)
			if total != len(all) {
				t.Fatalf("limit %d: total %d, want %d", limit, total, len(all))
			}
			want := all[:min(limit, len(all))]
			if len(got) != len(want) {
				t.Fatalf("limit %d: %d listed, want %d", limit, len(got), len(want))
			}
			for i := range got {
				if got[i].ID != want[i].ID {
					t.Fatalf("limit %d: #%d is %s, want %s", limit, i, got[i].ID, want[i].ID)
				}
			}
		}
	}
}
