package health_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/health"
)

func TestMonitor_Run_PassesOnTheInterval(t *testing.T) {
	h := newHarness(t, options{ctrl: getVolume})
	h.volume("v1")
	h.fake.SetVolumeCondition("ext-v1", true, "first")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.m.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(wait):
			t.Error("Run did not return after its ctx ended")
		}
	}()
	next := func() health.Event {
		t.Helper()
		select {
		case e := <-h.events:
			return e
		case <-time.After(wait):
			t.Fatal("no event")
		}
		return health.Event{}
	}
	if e := next(); e.Kind != health.EventAbnormal {
		t.Fatalf("first pass: %v", e.Kind)
	}
	bctx, bcancel := context.WithTimeout(ctx, wait)
	defer bcancel()
	if err := h.clock.BlockUntil(bctx, 1); err != nil {
		t.Fatal(err)
	}
	h.fake.SetVolumeCondition("ext-v1", false, "")
	h.clock.Advance(time.Minute)
	if e := next(); e.Kind != health.EventRecovered {
		t.Fatalf("second pass: %v", e.Kind)
	}
	if err := h.m.Run(ctx); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("a second Run = %v, want ErrInvalidRequest", err)
	}
}
