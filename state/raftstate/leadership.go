package raftstate

import (
	"context"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi/clock"
)

// IsLeader reports whether this server is the raft leader now. A write
// made on the leader is appended here; the leader's store may still be
// applying entries of the previous term, which OnLeadership waits for.
func (s *Server) IsLeader() bool {
	r := s.running()
	return r != nil && r.State() == raft.Leader
}

// Leader returns the raft address and server ID of the leader this
// server knows of, or empty strings while none is known.
func (s *Server) Leader() (addr, id string) {
	r := s.running()
	if r == nil {
		return "", ""
	}
	a, i := r.LeaderWithID()
	return string(a), string(i)
}

// WaitLeader blocks until this server knows a leader (itself or
// another) and returns it. It watches raft's leader observations, so it
// does not poll. It returns ctx.Err() when ctx ends first, and an error
// matching csi.ErrUnavailable when the server is not running.
func (s *Server) WaitLeader(ctx context.Context) (addr, id string, err error) {
	for {
		s.leaderMu.Lock()
		changed := s.leaderChanged
		s.leaderMu.Unlock()
		r := s.running()
		if r == nil {
			return "", "", errNotRunning("wait for a leader")
		}
		if a, i := r.LeaderWithID(); a != "" {
			return string(a), string(i), nil
		}
		select {
		case <-changed:
		case <-s.stopped:
		case <-ctx.Done():
			return "", "", ctx.Err()
		}
	}
}

// OnLeadership registers fn to learn this server's leadership: fn(true)
// once it is the leader and its store has applied every entry committed
// before (a raft barrier), so a leader-only worker starting then sees
// the whole state; fn(false) when it stops being the leader, including
// at Shutdown. If the server already leads, fn(true) is called before
// OnLeadership returns. The usual fn is a worker's switch:
//
//	srv.OnLeadership(worker.SetEnabled) // claimgc.Worker
//
// Calls are ordered and never concurrent. fn must return quickly and
// must not call OnLeadership or the returned cancel: raft waits for
// leadership to be taken in. cancel unregisters fn; it is not called
// again (not even with false) once cancel returns.
func (s *Server) OnLeadership(fn func(leader bool)) (cancel func()) {
	s.obsMu.Lock()
	defer s.obsMu.Unlock()
	id := s.nextObs
	s.nextObs++
	s.observers[id] = fn
	if s.established {
		fn(true)
	}
	return func() {
		s.obsMu.Lock()
		defer s.obsMu.Unlock()
		delete(s.observers, id)
	}
}

func (s *Server) setEstablished(leader bool) {
	s.obsMu.Lock()
	defer s.obsMu.Unlock()
	if s.established == leader {
		return
	}
	s.established = leader
	s.cfg.Logger.Info("leadership changed", "leader", leader)
	ids := make([]uint64, 0, len(s.observers))
	for id := range s.observers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s.observers[id](leader)
	}
}

// Bounds of the backoff between leadership barriers that failed while
// this server still led.
const (
	barrierRetryBase = 50 * time.Millisecond
	barrierRetryMax  = 2 * time.Second
)

// run takes in raft's leadership notifications and leader observations
// until Shutdown. Gaining leadership is reported once a barrier has
// gone through, and the barrier runs on its own goroutine so that this
// loop keeps reading raft's notifications, which raft waits for.
//
// A barrier can fail while the server still leads (a leadership
// transfer that was in progress and then failed refuses it, as can a
// full apply queue). Raft sends no new notification then, so giving up
// would leave the cluster with a leader whose workers never start for
// the whole term; the barrier is retried instead, with a backoff on
// Config.Clock bounded by barrierRetryMax, until it goes through or
// leadership is lost.
func (s *Server) run(r *raft.Raft) {
	defer close(s.runDone)
	var (
		barrier  chan error
		retry    clock.Timer
		retryC   <-chan time.Time
		failures int
	)
	stopRetry := func() {
		if retry != nil {
			retry.Stop()
		}
		retry, retryC = nil, nil
	}
	defer stopRetry()
	failed := s.fsm.Failed()
	for {
		select {
		case <-s.stopRun:
			return
		case <-failed:
			failed = nil
			s.cfg.Logger.Error("the replica diverged; shutting raft down", "error", s.fsm.Err())
			// Shutdown waits for this goroutine to return.
			go func() {
				s.Shutdown()
				close(s.failed)
			}()
		case leader := <-s.notifyCh:
			barrier, failures = nil, 0
			stopRetry()
			if !leader {
				s.setEstablished(false)
				continue
			}
			barrier = s.startBarrier(r)
		case <-retryC:
			retry, retryC = nil, nil
			if r.State() == raft.Leader {
				barrier = s.startBarrier(r)
			}
		case err := <-barrier:
			barrier = nil
			switch {
			case err == nil:
				failures = 0
				if r.State() == raft.Leader {
					s.setEstablished(true)
				}
			case r.State() != raft.Leader:
				s.cfg.Logger.Warn("leadership barrier failed and leadership is lost; not taking leadership", "error", err)
			default:
				failures++
				d := barrierBackoff(failures)
				s.cfg.Logger.Warn("leadership barrier failed while still leading; retrying", "error", err, "retry_in", d)
				retry = s.cfg.Clock.NewTimer(d)
				retryC = retry.C()
			}
		case <-s.obsCh:
			s.leaderMu.Lock()
			close(s.leaderChanged)
			s.leaderChanged = make(chan struct{})
			s.leaderMu.Unlock()
		}
	}
}

// startBarrier issues a leadership barrier on its own goroutine and
// returns the channel its result arrives on, or nil when the server is
// shutting down.
func (s *Server) startBarrier(r *raft.Raft) chan error {
	if _, ok := s.begin(); !ok {
		return nil
	}
	ch := make(chan error, 1)
	go func() {
		defer s.end()
		ch <- s.barrier(r)
	}()
	return ch
}

// barrierBackoff is the wait after the n-th barrier failure in a row
// (n ≥ 1): doubling from barrierRetryBase, at most barrierRetryMax.
func barrierBackoff(n int) time.Duration {
	d := barrierRetryBase
	for i := 1; i < n && d < barrierRetryMax; i++ {
		d *= 2
	}
	return min(d, barrierRetryMax)
}
