package render

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

func TestNumber(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want string
	}{
		{134217728, "134217728"}, {0, "0"}, {-3, "-3"}, {128, "128"}, {2.5, "2.5"},
		{1.0 / 3, "0.333333"}, {1e20, "1e+20"}, {-2.25e-7, "-2.25e-07"},
	} {
		if got := Number(tc.f); got != tc.want {
			t.Errorf("Number(%v) = %q, want %q", tc.f, got, tc.want)
		}
	}
	res := Resources(&wire.ResourcesReply{Values: &wire.Offer{Name: "m", NetMbps: 1e6, CpuUtil: -1}})
	if !strings.Contains(res, "net_mbps   1000000\n") {
		t.Errorf("a whole link speed prints in full:\n%s", res)
	}
}

// An ended reservation shows when it ended, not when the manager will
// forget it; a live one shows when it expires.
func TestReservationListWhen(t *testing.T) {
	now := time.Date(2025, 1, 2, 12, 10, 0, 0, time.Local)
	ms := func(d time.Duration) int64 { return now.Add(d).UnixMilli() }
	out := ReservationList([]*wire.Reservation{
		{Id: "a-1-x", State: wire.ReservationState_RESERVATION_STATE_COMMITTED, ExpiresUnixMs: ms(5 * time.Minute), UpdatedUnixMs: ms(-time.Minute)},
		{Id: "a-2-x", State: wire.ReservationState_RESERVATION_STATE_RELEASED, Reason: "released by its holder",
			UpdatedUnixMs: ms(-9 * time.Minute), ExpiresUnixMs: ms(51 * time.Minute)},
		{Id: "a-3-x", State: wire.ReservationState_RESERVATION_STATE_EXPIRED, Reason: "hold timed out",
			UpdatedUnixMs: ms(-2 * time.Second), ExpiresUnixMs: ms(time.Hour)},
	}, now)
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[0], "WHEN") || strings.Contains(lines[0], "EXPIRES") {
		t.Errorf("header: %s", lines[0])
	}
	for i, want := range []string{"expires 12:15:00 (in 5m0s)", "ended 12:01:00 (9m0s ago)", "ended 12:09:58 (2s ago)"} {
		if !strings.Contains(lines[i+1], want) {
			t.Errorf("line %d lacks %q:\n%s", i+1, want, out)
		}
	}
	if strings.Contains(out, "13:") || strings.Contains(out, "in 51m") || strings.Contains(out, "in 1h") {
		t.Errorf("an ended record shows when it will be forgotten:\n%s", out)
	}
	if got := Until(now.UnixMilli(), now); got != "12:10:00 (now)" {
		t.Errorf("Until(now) = %q", got)
	}
}

// Status shows the last DefaultEvents events unless asked for more.
func TestStatusEvents(t *testing.T) {
	st := &wire.StatusReply{Name: "m"}
	for i := range 64 {
		st.Events = append(st.Events, &wire.RelationEvent{MsAgo: uint64(64-i) * 1000, Name: fmt.Sprintf("e%02d", i), What: "up"})
	}
	count := func(s string) int { return strings.Count(s, ": up\n") }
	if s := Status(st); count(s) != DefaultEvents || !strings.Contains(s, "e63: up") || strings.Contains(s, "e53: up") ||
		!strings.Contains(s, "recent events (the last 10 of 64):") {
		t.Errorf("Status shows %d events:\n%s", count(s), s)
	}
	if s := StatusEvents(st, 0, "hint"); count(s) != 64 || strings.Contains(s, "hint") {
		t.Errorf("StatusEvents(0) shows %d events:\n%s", count(s), s)
	}
	if s := StatusEvents(st, 3, "--events N shows more"); count(s) != 3 || !strings.Contains(s, "(the last 3 of 64; --events N shows more)") {
		t.Errorf("StatusEvents(3):\n%s", s)
	}
	st.Events = st.Events[:4]
	if s := Status(st); count(s) != 4 || !strings.Contains(s, "recent events:\n") {
		t.Errorf("few events are all shown:\n%s", s)
	}
}
