package claimgc

import (
	"testing"
	"time"

	"github.com/csikit/csikit/csi/clock"
)

// jumpingClock is a fake clock that a "test" advances while the first
// timer is being armed.
type jumpingClock struct {
	*clock.Fake
	jump  time.Duration
	armed int
}

func (c *jumpingClock) NewTimer(d time.Duration) clock.Timer {
	c.armed++
	if c.armed == 1 {
		c.Advance(c.jump)
	}
	return c.Fake.NewTimer(d)
}

func TestArm(t *testing.T) {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		jump      time.Duration
		deadline  time.Duration // from start
		advance   time.Duration // after arming
		wantFired bool
	}{
		{"no jump, not due", 0, 2 * time.Second, time.Second, false},
		{"no jump, due", 0, 2 * time.Second, 2 * time.Second, true},
		{"jump past the deadline fires at once", 5 * time.Second, 2 * time.Second, 0, true},
		{"jump short of the deadline is not late", time.Second, 2 * time.Second, time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &jumpingClock{Fake: clock.NewFake(start), jump: tt.jump}
			tm := arm(c, start.Add(tt.deadline))
			c.Advance(tt.advance)
			select {
			case <-tm.C():
				if !tt.wantFired {
					t.Fatal("timer fired before its deadline")
				}
			default:
				if tt.wantFired {
					t.Fatalf("timer not fired at %v, deadline %v", c.Now(), start.Add(tt.deadline))
				}
			}
		})
	}
}
