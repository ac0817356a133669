package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// Cluster mode's server-to-server endpoints. A server in cluster mode
// (package cluster) serves them under InternalPrefix; a single server
// answers them as unknown endpoints.
const (
	// InternalPrefix is the path prefix of the server-to-server
	// endpoints.
	InternalPrefix = "/v1/internal/"
	// StatusPath answers a ServerStatus: who this server is, where its
	// raft transport listens, and who leads. With ?wait-leader=D it
	// first waits up to D (at most MaxWait) for a leader to be known.
	StatusPath = InternalPrefix + "status"
	// ApplyPath takes a state command encoded with state.EncodeCommand
	// and applies it through the leader's raft log (raftstate's
	// ApplyForwarded); a follower forwards its writes here. A server
	// that is not the leader refuses with a retryable error and never
	// forwards again.
	ApplyPath = InternalPrefix + "apply"
)

// ServerStatus is a cluster-mode server's view of itself and of the
// cluster.
type ServerStatus struct {
	// ID is the server's raft server ID; RaftAddress the address its
	// raft transport is dialed at; APIAddress the HTTP API address it
	// advertises.
	ID          string
	RaftAddress string
	APIAddress  string
	// Leader is true once this server leads and its store holds every
	// earlier write: its claim release worker is on.
	Leader bool
	// LeaderID and LeaderRaftAddress name the leader this server knows
	// of; empty while none is known (an election, or the cluster has
	// not formed yet).
	LeaderID          string `json:",omitempty"`
	LeaderRaftAddress string `json:",omitempty"`
	// UnreachableLeaderID is set, and LeaderID left empty, when raft
	// still names a leader whose API does not answer this server: it
	// died, and an election will follow within raft's heartbeat
	// timeout. A status never names a leader known to be dead.
	UnreachableLeaderID string `json:",omitempty"`
	// BootstrapExpect is the number of servers the cluster forms with.
	BootstrapExpect int
	// Servers are the servers of the raft configuration, sorted by ID;
	// empty until the cluster has formed.
	Servers []ClusterServer `json:",omitempty"`
	// AppliedIndex is the raft index this server's store has applied.
	AppliedIndex uint64
}

// ClusterServer is one server of the raft configuration as another
// server sees it.
type ClusterServer struct {
	ID          string
	RaftAddress string
	// APIAddress is the server's HTTP API as this server reaches it (from
	// its -join list), empty when it does not know it.
	APIAddress string `json:",omitempty"`
}

// ApplyResponse is the result of a command applied through ApplyPath.
type ApplyResponse struct {
	Result state.Result
}

// Status reads the server's cluster status. A server not in cluster
// mode answers with an error matching csi.ErrInvalidRequest.
func (c *Client) Status(ctx context.Context) (*ServerStatus, error) {
	var out ServerStatus
	if _, err := c.do(ctx, http.MethodGet, StatusPath, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WaitLeader reads the server's cluster status once the server knows a
// leader (itself or another), waiting for one on the server's side (no
// polling) up to MaxWait, or until ctx ends. It answers with whatever
// the server knows when that wait runs out.
func (c *Client) WaitLeader(ctx context.Context) (*ServerStatus, error) {
	var out ServerStatus
	v := url.Values{"wait-leader": {MaxWait.String()}}
	if d, ok := ctx.Deadline(); ok {
		v.Set("wait-leader", max(0, time.Until(d)).String())
	}
	if _, err := c.do(ctx, http.MethodGet, StatusPath, v, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Apply sends a state command encoded with state.EncodeCommand to the
// server, which applies it through its raft log if it leads; it is the
// forwarding of a follower's write to the leader. The Result or the
// leader's error comes back with its csi sentinel and class. A refusal
// because the server does not lead is Retryable: nothing was written.
// A failure to reach the server is Retryable when the connection was
// never made, and Uncertain otherwise (the leader may have applied
// the command). cmd holds volume secrets in clear.
func (c *Client) Apply(ctx context.Context, cmd []byte) (state.Result, error) {
	if !json.Valid(cmd) {
		return state.Result{}, fmt.Errorf("%w: the command to apply is not an encoded state command (state.EncodeCommand)", csi.ErrInvalidRequest)
	}
	var out ApplyResponse
	_, err := c.do(ctx, http.MethodPost, ApplyPath, nil, json.RawMessage(cmd), &out)
	if err != nil {
		var ae *Error
		if !errors.As(err, &ae) && ctx.Err() == nil && !neverConnected(err) {
			return state.Result{}, &uncertainError{err: err}
		}
		return state.Result{}, err
	}
	return out.Result, nil
}

// neverConnected reports whether a request failed before a connection
// was made, so the server cannot have seen it.
func neverConnected(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// uncertainError is a write whose request may have reached the server.
type uncertainError struct{ err error }

var _ csi.Classed = (*uncertainError)(nil)

func (e *uncertainError) Error() string {
	return e.err.Error() + " (the write may or may not have been applied)"
}
func (e *uncertainError) Unwrap() error         { return e.err }
func (e *uncertainError) ErrorClass() csi.Class { return csi.ClassUncertain }
