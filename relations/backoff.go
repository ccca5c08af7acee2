package relations

import (
	"math/rand/v2"
	"time"
)

// Backoff spaces out retries: Initial, then doubling up to Max, each delay
// jittered by ±20% so that many managers retrying the same superior do not
// arrive in step. The zero value is not usable; set Initial and Max.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	step    int // retries taken since the last Reset
}

// jitter is the relative spread applied to each delay.
const jitter = 0.2

// base is the un-jittered delay of retry number step.
func (b *Backoff) base(step int) time.Duration {
	d := b.Initial
	for i := 0; i < step && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// Next returns the delay before the next retry and whether it starts a new
// step (the first retry, or a delay longer than the previous one). Callers
// log only new steps, so a peer that stays away is reported once per step
// and then retried quietly at Max.
func (b *Backoff) Next(rng *rand.Rand) (time.Duration, bool) {
	base := b.base(b.step)
	newStep := b.step == 0 || base != b.base(b.step-1)
	b.step++
	d := time.Duration(float64(base) * (1 - jitter + 2*jitter*rng.Float64()))
	return max(d, time.Millisecond), newStep
}

// Reset starts again from Initial; called after a success.
func (b *Backoff) Reset() { b.step = 0 }

// Steps is the number of retries since the last Reset.
func (b *Backoff) Steps() int { return b.step }
