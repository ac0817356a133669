package clock_test

import (
	"context"
	"sync"
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

// TestFake_Advance_Concurrent: concurrent Advance calls add up; none is
// lost between reading the time and moving it.
func TestFake_Advance_Concurrent(t *testing.T) {
	f := clock.NewFake(epoch)
	const goroutines, steps = 8, 200
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range steps {
				f.Advance(time.Second)
			}
		})
	}
	wg.Wait()
	if got, want := f.Now(), epoch.Add(goroutines*steps*time.Second); !got.Equal(want) {
		t.Fatalf("Now = %v, want %v", got, want)
	}
}
