package raftstate

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
)

// ErrNotLeader is matched (errors.Is) by a write refused because this
// server is not the leader and has no Forward hook: a *NotLeaderError,
// which names the leader when one is known. Nothing was written; send
// the write to the leader, or retry here once this server leads.
// Retryable.
var ErrNotLeader = errors.New("raftstate: not the leader")

// NotLeaderError is the error of a write made on a server that is not
// the leader when Config.Forward is nil. LeaderAddr and LeaderID are the
// leader this server knows of (its raft address and server ID), or
// empty while no leader is known (an election is running, or the
// cluster has not formed yet). The command was not applied, so it is
// Retryable: send it to LeaderAddr through the host's RPC, or retry.
type NotLeaderError struct {
	LeaderAddr string
	LeaderID   string
}

var _ csi.Classed = (*NotLeaderError)(nil)

func (e *NotLeaderError) Error() string {
	if e.LeaderAddr == "" {
		return "raftstate: not leader, and no leader is known yet (election running or cluster not formed); retry shortly"
	}
	return fmt.Sprintf("raftstate: not leader, leader is %s (server %s); send the write there", e.LeaderAddr, e.LeaderID)
}

// Is reports whether target is ErrNotLeader.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

// ErrorClass implements csi.Classed: Retryable, the write was not
// applied.
func (e *NotLeaderError) ErrorClass() csi.Class { return csi.ClassRetryable }

// raftError is a raft failure with the class csikit's retry loops need.
// It unwraps to raft's own error, so errors.Is(err, raft.ErrLeadershipLost)
// holds.
type raftError struct {
	msg   string
	err   error
	class csi.Class
}

func (e *raftError) Error() string         { return e.msg + ": " + e.err.Error() }
func (e *raftError) Unwrap() error         { return e.err }
func (e *raftError) ErrorClass() csi.Class { return e.class }

// applyError classifies what raft answered to an Apply on the leader.
// Only a failure to enqueue means the command surely was not appended;
// after that raft cannot tell whether it will be committed.
func applyError(kind string, err error) error {
	switch {
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return &raftError{msg: "raftstate: " + kind + " was not appended to the log; retry", err: err, class: csi.ClassRetryable}
	case errors.Is(err, raft.ErrLeadershipLost):
		return &raftError{msg: "raftstate: " + kind + ": leadership was lost before the write was committed; it may or may not be applied", err: err, class: csi.ClassUncertain}
	case errors.Is(err, raft.ErrRaftShutdown):
		return &raftError{msg: "raftstate: " + kind + ": the server shut down; the write may or may not be applied", err: err, class: csi.ClassUncertain}
	}
	return &raftError{msg: "raftstate: " + kind + ": raft did not apply the write; it may or may not be applied", err: err, class: csi.ClassUncertain}
}

// errNotRunning is returned by calls made on a Server that is not
// running.
func errNotRunning(op string) error {
	return &raftError{
		msg:   "raftstate: " + op,
		err:   fmt.Errorf("%w: the server is not running (Start it first; after Shutdown build a new one)", csi.ErrUnavailable),
		class: csi.ClassRetryable,
	}
}

// ErrStateDiverged is matched by every answer of a replica whose FSM
// met a committed entry it cannot apply: sealed with a key its keyring
// does not hold (a follower not given the rotated key), altered, or of
// a command this build does not know. Skipping the entry would leave
// the store different from the other replicas' for good, so the FSM
// applies nothing more, its Reader refuses every read, and the Server
// shuts raft down (Server.Failed). The errors are *DivergedError, which
// also match csi.ErrUnavailable and the cause (sealed.ErrUnknownKey,
// sealed.ErrWrongKey, csi.ErrInvalidRequest). Not retryable here: fix
// the cause (copy the key), and start the server again on a new store.
var ErrStateDiverged = errors.New("raftstate: the replica diverged")

// DivergedError is the error of a diverged replica (ErrStateDiverged):
// the raft index of the entry it could not apply, and why.
type DivergedError struct {
	Index uint64
	Err   error
}

func (e *DivergedError) Error() string {
	return fmt.Sprintf("raftstate: the replica stopped at log entry %d, which it cannot apply (%v); it serves nothing until it is fixed and started again", e.Index, e.Err)
}

// Is reports whether target is ErrStateDiverged.
func (e *DivergedError) Is(target error) bool { return target == ErrStateDiverged }

// Unwrap returns csi.ErrUnavailable (another replica may answer) and
// the cause.
func (e *DivergedError) Unwrap() []error { return []error{csi.ErrUnavailable, e.Err} }

// ErrorClass implements csi.Classed: final on this replica.
func (e *DivergedError) ErrorClass() csi.Class { return csi.ClassFinal }
