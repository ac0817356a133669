package backoff_test

import (
	"testing"
	"time"

	"github.com/csikit/csikit/csi/backoff"
)

func TestPolicy_Delay(t *testing.T) {
	p := backoff.Policy{Base: time.Second, Max: 10 * time.Second, Jitter: -1}
	for attempt, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 100: 10 * time.Second} {
		if got := p.Delay(attempt); got != want {
			t.Errorf("Delay(%d) = %v, want %v", attempt, got, want)
		}
	}
}

func TestPolicy_DelayJitterBounds(t *testing.T) {
	p := backoff.Policy{Base: time.Second, Max: time.Minute, Jitter: 0.5}
	for i := 0; i < 1000; i++ {
		d := p.Delay(3)
		if d < 2*time.Second || d > 4*time.Second {
			t.Fatalf("Delay(3) = %v outside [2s, 4s]", d)
		}
	}
}
