package relations

import (
	"math/rand/v2"
	"testing"
	"time"
)

// beatsByTime is the heartbeat bookkeeping as it was written before the
// ring kept offsets: every sent beat's time in full.
type beatsByTime struct {
	lastSent time.Time
	sendSeq  uint64
	sent     [rttSamples]struct {
		seq uint64
		at  time.Time
	}
	recvSeq  uint64
	recvAt   time.Time
	rtt      time.Duration
	rttCount int
}

func (r *beatsByTime) next(now time.Time) Beat {
	r.sendSeq++
	r.lastSent = now
	r.sent[r.sendSeq%rttSamples].seq, r.sent[r.sendSeq%rttSamples].at = r.sendSeq, now
	b := Beat{Seq: r.sendSeq}
	if r.recvSeq != 0 {
		b.EchoSeq = r.recvSeq
		if h := now.Sub(r.recvAt); h > 0 {
			b.Hold = h
		}
	}
	return b
}

func (r *beatsByTime) on(now time.Time, b Beat) {
	if b.Seq > r.recvSeq {
		r.recvSeq, r.recvAt = b.Seq, now
	}
	if b.EchoSeq == 0 {
		return
	}
	s := r.sent[b.EchoSeq%rttSamples]
	if s.seq != b.EchoSeq {
		return
	}
	sample := now.Sub(s.at) - b.Hold
	if sample < 0 {
		return
	}
	if r.rttCount == 0 {
		r.rtt = sample
	} else {
		r.rtt += (sample - r.rtt) / 8
	}
	r.rttCount++
}

func (r *beatsByTime) due(now time.Time, interval time.Duration) bool {
	return r.lastSent.IsZero() || now.Sub(r.lastSent) >= interval
}

func (r *beatsByTime) nextAt(now time.Time, interval time.Duration) time.Time {
	if r.lastSent.IsZero() {
		return now
	}
	return r.lastSent.Add(interval)
}

// The ring of sent heartbeats keeps offsets from the first one, not
// times: the round trips measured, the beats' fields and when the next
// beat is due are the same as with times, on the simulator's clock (no
// monotonic reading) and on the real one, across channel resets, lost
// and reordered echoes, and echoes of beats the ring has forgotten.
func TestBeatOffsetsAsTimes(t *testing.T) {
	for _, clock := range []struct {
		name  string
		start time.Time
	}{{"virtual", time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)}, {"monotonic", time.Now()}} {
		rng := rand.New(rand.NewPCG(5, 6))
		for trial := range 200 {
			r := &Relation{State: Up}
			ref := &beatsByTime{}
			now := clock.start.Add(time.Duration(rng.Int64N(int64(time.Hour))))
			interval := time.Duration(1+rng.IntN(2000)) * time.Millisecond
			var out []Beat // beats we sent that the peer may echo
			peerSeq := uint64(0)
			for step := range 400 {
				now = now.Add(time.Duration(rng.Int64N(int64(3 * interval))))
				switch k := rng.IntN(20); {
				case k == 0:
					r.resetChannel()
					*ref = beatsByTime{rtt: ref.rtt, rttCount: ref.rttCount}
					out, peerSeq = nil, 0
				case k < 9:
					got, want := r.NextBeat(now), ref.next(now)
					if got != want {
						t.Fatalf("%s trial %d step %d: NextBeat = %+v, want %+v", clock.name, trial, step, got, want)
					}
					out = append(out, got)
				default:
					// The peer's beat, echoing one of ours (or none, or an
					// old one), held a while.
					peerSeq++
					b := Beat{Seq: peerSeq}
					if len(out) > 0 && rng.IntN(5) > 0 {
						e := out[max(0, len(out)-1-rng.IntN(12))]
						b.EchoSeq, b.Hold = e.Seq, time.Duration(rng.Int64N(int64(interval)))
					}
					r.OnBeat(now, b)
					ref.on(now, b)
				}
				if r.RTT != ref.rtt || r.rttSeen != (ref.rttCount > 0) {
					t.Fatalf("%s trial %d step %d: RTT %v (measured: %v), want %v after %d samples", clock.name, trial, step, r.RTT, r.rttSeen, ref.rtt, ref.rttCount)
				}
				if got, want := r.HeartbeatDue(now, interval), ref.due(now, interval); got != want {
					t.Fatalf("%s trial %d step %d: HeartbeatDue = %v, want %v", clock.name, trial, step, got, want)
				}
				if got, want := r.NextHeartbeat(now, interval), ref.nextAt(now, interval); !got.Equal(want) {
					t.Fatalf("%s trial %d step %d: NextHeartbeat = %v, want %v", clock.name, trial, step, got, want)
				}
			}
		}
	}
}
