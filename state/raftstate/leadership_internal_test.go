package raftstate

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/state"
)

// TestServer_Run_RetriesBarrierWhileLeading fails the leadership
// barrier twice while the server still leads (as a leadership transfer
// in progress does) and checks that leadership is taken in after the
// retries, each one armed on the injected clock with a doubling wait.
func TestServer_Run_RetriesBarrierWhileLeading(t *testing.T) {
	store, err := state.NewMemStore(state.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, tr := raft.NewInmemTransport("")
	rc := raft.DefaultConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	rc.LogLevel = "off"
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	srv, err := New(Config{ID: "solo", Store: store, Transport: tr, InMemory: true, BootstrapExpect: 1, Raft: rc, Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	srv.barrier = func(r *raft.Raft) error {
		if calls.Add(1) <= 2 {
			return raft.ErrLeadershipTransferInProgress
		}
		return r.Barrier(0).Error()
	}
	led := make(chan bool, 4)
	srv.OnLeadership(func(leader bool) { led <- leader })
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Shutdown() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for i, want := range []time.Duration{barrierRetryBase, 2 * barrierRetryBase} {
		if err := fake.BlockUntil(ctx, 1); err != nil {
			t.Fatalf("failure %d: no retry was armed on the clock: %v", i+1, err)
		}
		if next, _ := fake.Next(); next.Sub(fake.Now()) != want {
			t.Fatalf("failure %d: retry armed in %s, want %s", i+1, next.Sub(fake.Now()), want)
		}
		select {
		case l := <-led:
			t.Fatalf("failure %d: leadership reported (%v) before the barrier went through", i+1, l)
		default:
		}
		fake.AdvanceToNext()
	}
	select {
	case l := <-led:
		if !l {
			t.Fatal("leadership reported lost, want taken in after the retried barrier")
		}
	case <-ctx.Done():
		t.Fatalf("leadership never taken in after %d barrier calls", calls.Load())
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("barrier called %d times, want 3", n)
	}
}

func TestBarrierBackoff_Bounded(t *testing.T) {
	for n, want := range map[int]time.Duration{1: barrierRetryBase, 2: 2 * barrierRetryBase, 3: 4 * barrierRetryBase, 100: barrierRetryMax} {
		if got := barrierBackoff(n); got != want {
			t.Errorf("barrierBackoff(%d) = %s, want %s", n, got, want)
		}
	}
}
