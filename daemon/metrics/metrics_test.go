package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The children made in advance count into the same series as
// WithLabelValues would, and a label nobody made in advance still counts.
func TestHopsAndReservationsCountWhereTheyShould(t *testing.T) {
	m := New("gm1", "test")
	m.QueryHop("down", time.Millisecond, 3, 0, false)
	m.QueryHop("down", time.Millisecond, 2, 0, true)
	m.QueryHop("entry", time.Second, 1, 0, false)
	m.QueryHop("sideways", time.Millisecond, 0, 0, true)
	m.Reservation("held")
	m.Reservation("held")
	m.Reservation("odd")
	for _, c := range []struct {
		role, res string
		want      float64
	}{{"down", "complete", 1}, {"down", "partial", 1}, {"entry", "complete", 1}, {"entry", "partial", 0}, {"up", "complete", 0}, {"sideways", "partial", 1}} {
		if got := testutil.ToFloat64(m.hops.WithLabelValues(c.role, c.res)); got != c.want {
			t.Errorf("hops{role=%q,result=%q} = %v, want %v", c.role, c.res, got, c.want)
		}
	}
	if got := testutil.ToFloat64(m.forwarded); got != 6 {
		t.Errorf("forwarded = %v, want 6", got)
	}
	if n := testutil.CollectAndCount(m.hopTime); n != 4 {
		t.Errorf("%d hop-time series, want 4 (entry, down, up and sideways)", n)
	}
	for typ, want := range map[string]float64{"held": 2, "committed": 0, "odd": 1} {
		if got := testutil.ToFloat64(m.resv.WithLabelValues(typ)); got != want {
			t.Errorf("reservations{type=%q} = %v, want %v", typ, got, want)
		}
	}
}
