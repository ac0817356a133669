package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy is a capped exponential backoff. The zero value uses the defaults
// below.
type Policy struct {
	// Base is the delay before the first retry (default 100ms).
	Base time.Duration
	// Max caps every delay (default 30s).
	Max time.Duration
	// Jitter is the fraction of each delay that is randomized, in [0, 1]
	// (default 0.2): the delay is drawn from [d*(1-Jitter), d].
	// A negative value disables jitter.
	Jitter float64
}

// Delay returns the delay before retry number attempt (1 for the first
// retry). It never exceeds Max and never returns less than 0.
func (p Policy) Delay(attempt int) time.Duration {
	base, max, jitter := p.Base, p.Max, p.Jitter
	if base <= 0 {
		base = 100 * time.Millisecond
	}
	if max <= 0 {
		max = 30 * time.Second
	}
	if jitter == 0 {
		jitter = 0.2
	}
	if attempt < 1 {
		attempt = 1
	}
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max || d <= 0 {
		d = max
	}
	if jitter > 0 {
		if jitter > 1 {
			jitter = 1
		}
		d -= time.Duration(rand.Float64() * jitter * float64(d))
	}
	return d
}
