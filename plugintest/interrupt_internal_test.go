package plugintest

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestInterruption tells the end of the caller's ctx from a step's or a
// cleanup's own timeout.
func TestInterruption(t *testing.T) {
	l := &run{cfg: Config{Timeout: time.Nanosecond}}
	parent, cancel := context.WithCancel(t.Context())
	defer cancel()

	step, stopStep := l.stepCtx(parent)
	defer stopStep()
	<-step.Done() // its own timeout
	if err := interruption(step); err != nil {
		t.Errorf("a step past its own timeout: interruption = %v, want nil", err)
	}
	if err := interruption(parent); err != nil {
		t.Errorf("a live run: interruption = %v, want nil", err)
	}

	cancel()
	if err := interruption(parent); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled run: interruption = %v, want context.Canceled", err)
	}
	late, stopLate := l.stepCtx(parent)
	defer stopLate()
	if err := interruption(late); !errors.Is(err, context.Canceled) {
		t.Errorf("a step of a cancelled run: interruption = %v, want context.Canceled", err)
	}
	cleanup, stopCleanup := l.cleanupCtx(parent)
	defer stopCleanup()
	<-cleanup.Done() // its own timeout; the run's end does not reach it
	if err := interruption(cleanup); err != nil {
		t.Errorf("a cleanup of a cancelled run: interruption = %v, want nil", err)
	}
}
