package raftstate

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/state"
)

// Apply implements state.Applier: it writes cmd through the raft log.
//
// On the leader, cmd is encoded (state.EncodeCommand), appended, and
// once committed applied by every replica's FSM at the same raft index.
// Apply returns what the leader's store answered at that index: the
// Result, or the command's refusal exactly as the store returned it,
// so errors.Is(err, csi.ErrMaxClaims) and csi.Classify work as with
// state.LocalApplier. The leader's store holds the write when Apply
// returns.
//
// On a follower, with Config.Forward set, the encoded command goes to
// the leader through Forward, and Apply returns the leader's answer once
// this server's own store has applied the write (so a read here sees
// it). Without Forward, or while no leader is known, Apply returns a
// *NotLeaderError (errors.Is ErrNotLeader, Retryable) naming the leader,
// and nothing is written.
//
// Other errors are raft's, classified for csi.Classify: the write not
// appended (Retryable), or leadership lost, the server shut down, or ctx
// ended while waiting (Uncertain: the write may still be committed).
func (s *Server) Apply(ctx context.Context, cmd state.Command) (state.Result, error) {
	if err := ctx.Err(); err != nil {
		return state.Result{}, err
	}
	b, err := state.EncodeCommand(cmd)
	if err != nil {
		return state.Result{}, fmt.Errorf("raftstate: %w", err)
	}
	return s.apply(ctx, string(cmd.Kind()), b, true)
}

// ApplyForwarded applies an encoded command that a follower forwarded
// (Config.Forward); the host's RPC handler on the leader calls it with
// the bytes it received (with Config.Keyring they are sealed before
// they are appended). It never forwards again: on a server that is
// no longer the leader it returns a *NotLeaderError, which the host
// sends back. Bytes that do not decode as a command are refused with an
// error matching csi.ErrInvalidRequest before anything is appended.
func (s *Server) ApplyForwarded(ctx context.Context, cmd []byte) (state.Result, error) {
	if err := ctx.Err(); err != nil {
		return state.Result{}, err
	}
	plain, err := openEntry(s.cfg.Keyring, cmd)
	if err != nil {
		return state.Result{}, fmt.Errorf("raftstate: forwarded command: %w", err)
	}
	c, err := state.DecodeCommand(plain)
	if err != nil {
		return state.Result{}, fmt.Errorf("raftstate: forwarded command: %w", err)
	}
	return s.apply(ctx, string(c.Kind()), plain, false)
}

type applied struct {
	future raft.ApplyFuture
	err    error
}

// apply appends the encoded command b (clear: a follower forwards it
// as it is, the leader seals it for its log) and waits for its result.
func (s *Server) apply(ctx context.Context, kind string, b []byte, mayForward bool) (state.Result, error) {
	entry, err := sealEntry(s.cfg.Keyring, b)
	if err != nil {
		return state.Result{}, err
	}
	r, ok := s.begin()
	if !ok {
		return state.Result{}, errNotRunning("apply " + kind)
	}
	if r.State() != raft.Leader {
		s.end()
		return s.notLeader(ctx, r, kind, b, mayForward)
	}
	// raft's futures have no channel and Apply takes no ctx; wait on
	// another goroutine so ctx and Shutdown can end the wait. raft
	// answers the future when it commits the entry or loses leadership;
	// Shutdown waits for that (begin, end) before it stops raft.
	done := make(chan applied, 1)
	go func() {
		defer s.end()
		f := r.Apply(entry, 0)
		done <- applied{future: f, err: f.Error()}
	}()
	select {
	case a := <-done:
		if errors.Is(a.err, raft.ErrNotLeader) {
			// Leadership moved before the entry was taken: nothing was
			// appended, so sending it to the new leader is safe.
			return s.notLeader(ctx, r, kind, b, mayForward)
		}
		if a.err != nil {
			return state.Result{}, applyError(kind, a.err)
		}
		resp, ok := a.future.Response().(*Response)
		if !ok {
			return state.Result{}, fmt.Errorf("raftstate: %s: the FSM answered %T; is the Server's FSM replaced?", kind, a.future.Response())
		}
		return resp.Result, resp.Err
	case <-ctx.Done():
		return state.Result{}, fmt.Errorf("raftstate: %s: gave up waiting for the log; the write may or may not be applied: %w", kind, ctx.Err())
	case <-s.stopped:
		return state.Result{}, applyError(kind, raft.ErrRaftShutdown)
	}
}

// notLeader forwards b to the leader, or says who the leader is.
func (s *Server) notLeader(ctx context.Context, r *raft.Raft, kind string, b []byte, mayForward bool) (state.Result, error) {
	addr, id := r.LeaderWithID()
	if !mayForward || s.cfg.Forward == nil || addr == "" {
		return state.Result{}, &NotLeaderError{LeaderAddr: string(addr), LeaderID: string(id)}
	}
	res, err := s.cfg.Forward(ctx, string(addr), string(id), b)
	if err != nil {
		return state.Result{}, fmt.Errorf("raftstate: %s forwarded to leader %s at %s: %w", kind, id, addr, err)
	}
	if err := s.fsm.waitApplied(ctx, res.Index, s.stopped); err != nil {
		return state.Result{}, fmt.Errorf("raftstate: %s was applied by leader %s at index %d; gave up waiting for this server's store to reach it: %w", kind, id, res.Index, err)
	}
	return res, nil
}
