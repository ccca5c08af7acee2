package relations

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A relation keeps its times as stamps, offsets from the first time it
// stored: every time must come back as it went in (the same instant, and
// the zero time as zero), before, at and after that first time, far from
// it, and with a monotonic clock reading or without.
func TestStampsKeepTimes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	bases := []time.Time{
		time.Now(), // with a monotonic reading
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(0, 1),
	}
	offsets := []time.Duration{0, 1, -1, 2, -2, time.Millisecond, -time.Hour, 200 * 365 * 24 * time.Hour, -200 * 365 * 24 * time.Hour}
	for range 10000 {
		offsets = append(offsets, time.Duration(rng.Int64N(int64(100*365*24*time.Hour)))-50*365*24*time.Hour)
	}
	for _, base := range bases {
		r := &Relation{}
		if got := r.at(r.stamp(time.Time{})); !got.IsZero() {
			t.Fatalf("the zero time came back as %v", got)
		}
		if !r.t0.IsZero() {
			t.Fatal("storing the zero time set the origin")
		}
		first := r.stamp(base)
		if first == 0 {
			t.Fatalf("the first time stored (%v) reads as the zero time", base)
		}
		for _, d := range offsets {
			in := base.Add(d)
			s := r.stamp(in)
			if s == 0 {
				t.Fatalf("%v (t0%+v) stored as the zero time", in, d)
			}
			out := r.at(s)
			if !out.Equal(in) || out.Sub(base) != d {
				t.Fatalf("%v (t0%+v) came back as %v (t0%+v)", in, d, out, out.Sub(base))
			}
			// Comparisons with a time taken from the same clock agree.
			if in.Before(base) != out.Before(base) || in.After(base) != out.After(base) {
				t.Fatalf("%v compares with t0 unlike what was stored", out)
			}
		}
		if !r.at(first).Equal(base) {
			t.Fatal("the first time stored came back changed")
		}
	}
}

// The setters and getters of a relation's times, with the zero time
// meaning "none" as it always did.
func TestRelationTimesZeroMeansNone(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Relation{}
	for name, get := range map[string]func() time.Time{
		"Since": r.Since, "LastHeard": r.LastHeard, "NextDial": r.NextDial, "HeldUntil": r.HeldUntil,
		"RestoredAt": r.RestoredAt, "TrialDeadline": r.TrialDeadline, "HandshakeDeadline": r.HandshakeDeadline,
	} {
		if !get().IsZero() {
			t.Errorf("a new relation's %s is %v, want zero", name, get())
		}
	}
	r.SetNextDial(now.Add(-time.Second)) // before anything else was stored
	r.SetLastHeard(now)
	r.SetHeldUntil(now.Add(time.Hour))
	if !r.NextDial().Equal(now.Add(-time.Second)) || !r.LastHeard().Equal(now) || !r.HeldUntil().Equal(now.Add(time.Hour)) {
		t.Fatalf("times read back as %v %v %v", r.NextDial(), r.LastHeard(), r.HeldUntil())
	}
	r.SetNextDial(time.Time{})
	if !r.NextDial().IsZero() || !r.LastHeard().Equal(now) {
		t.Fatal("clearing NextDial did not make it zero, or changed another time")
	}
}
