package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/csikit/csikit/csi/clock"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestFake_Timer_FiresOnlyWhenDue(t *testing.T) {
	f := clock.NewFake(epoch)
	tm := f.NewTimer(10 * time.Second)
	f.Advance(9 * time.Second)
	select {
	case <-tm.C():
		t.Fatal("timer fired early")
	default:
	}
	f.Advance(time.Second)
	select {
	case got := <-tm.C():
		if !got.Equal(epoch.Add(10 * time.Second)) {
			t.Fatalf("fired at %v", got)
		}
	default:
		t.Fatal("timer did not fire when due")
	}
	if tm.Stop() {
		t.Fatal("Stop after fire reported pending")
	}
}

func TestFake_Stop(t *testing.T) {
	f := clock.NewFake(epoch)
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of pending timer returned false")
	}
	f.Advance(time.Hour)
	select {
	case <-tm.C():
		t.Fatal("stopped timer fired")
	default:
	}
	if f.Waiters() != 0 {
		t.Fatalf("waiters = %d", f.Waiters())
	}
}

func TestFake_BlockUntilAndSleep(t *testing.T) {
	f := clock.NewFake(epoch)
	done := make(chan error, 1)
	go func() { done <- clock.Sleep(context.Background(), f, time.Minute) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if d := f.AdvanceToNext(); d != time.Minute {
		t.Fatalf("advanced %v", d)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestSleep_ContextEnds(t *testing.T) {
	f := clock.NewFake(epoch)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := clock.Sleep(ctx, f, time.Hour); err != context.Canceled {
		t.Fatalf("err = %v", err)
	}
}
