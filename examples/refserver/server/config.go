package server

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/events"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// DefaultShutdownTimeout bounds the graceful stop of the HTTP API:
// writes in flight get this long to finish.
const DefaultShutdownTimeout = 10 * time.Second

// Config configures a Server.
type Config struct {
	// Store and Applier are the server's state: reads come from Store,
	// every write goes through Applier. Both nil means a new in-memory
	// store (state.NewMemStore) with a state.LocalApplier; a replicated
	// host passes its own pair (for example a Raft-backed applier and the
	// replica's store). Give both or neither.
	Store   state.Reader
	Applier state.Applier

	// HeartbeatTTL is how long a node stays ready after its last
	// heartbeat; 0 means DefaultHeartbeatTTL.
	HeartbeatTTL time.Duration

	// Now is the time source of node liveness and of the ReleasedAt
	// stamp of released allocations; nil means time.Now. Tests move it
	// forward to expire a heartbeat without waiting.
	Now func() time.Time

	// Follower starts the server with its claim release worker disabled,
	// until SetLeader(true). A single server leaves it false: it is its
	// own leader from the start.
	Follower bool

	// Internal, if set, serves the server-to-server endpoints under
	// api.InternalPrefix (/v1/internal/): cluster mode's status and
	// forwarded writes (package cluster). nil answers them as unknown
	// endpoints, as a single server does.
	Internal http.Handler

	// ShutdownTimeout bounds the graceful stop of the HTTP API; 0 means
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// Metrics is where the server emits, served at /v1/metrics; nil
	// means a new NewMetrics.
	Metrics *Metrics
	// ACL, if set, requires an ACL token (api.TokenHeader) on every
	// volume, plugin and allocation request; nil leaves the API open.
	ACL *ACL

	// ClusterToken is the per-cluster secret the server sends with
	// every call to a node agent (rpcshim.GRPCTransportConfig
	// .ClusterToken); agents refuse calls without it. Empty means
	// calls without credentials, for agents that accept any caller
	// (tests): a real deployment sets it on servers and agents alike.
	ClusterToken string
	// TLS, if set, serves the API over TLS with this configuration
	// (tlsconf's APIServer): a plain HTTP request is refused.
	TLS *tls.Config
	// NodeTLS, if set, is the client configuration of the calls to the
	// node agents: mutual TLS, the server's certificate presented as a
	// client certificate and the agents' verified against its RootCAs.
	// It may be combined with ClusterToken.
	NodeTLS *tls.Config

	// Events receives the lifecycle lines ("[server] …"); nil prints
	// nothing.
	Events *events.Log
	// Logger receives diagnostics; nil means no logging.
	Logger hclog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if (c.Store == nil) != (c.Applier == nil) {
		return c, fmt.Errorf("%w: server config: give both Store and Applier, or neither for an in-memory store", csi.ErrInvalidRequest)
	}
	if c.Store == nil {
		st, err := state.NewMemStore(state.Config{})
		if err != nil {
			return c, fmt.Errorf("server config: in-memory store: %w", err)
		}
		c.Store, c.Applier = st, state.NewLocalApplier(st)
	}
	if c.HeartbeatTTL < 0 {
		return c, fmt.Errorf("%w: server config: HeartbeatTTL %s is negative; use 0 for the default", csi.ErrInvalidRequest, c.HeartbeatTTL)
	}
	if c.ShutdownTimeout < 0 {
		return c, fmt.Errorf("%w: server config: ShutdownTimeout %s is negative; use 0 for the default", csi.ErrInvalidRequest, c.ShutdownTimeout)
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Metrics == nil {
		m, err := NewMetrics()
		if err != nil {
			return c, err
		}
		c.Metrics = m
	}
	return c, nil
}

// authorizer is the ACL as an rpcshim.Authorizer, nil without one (a
// nil *ACL in the interface would not be nil).
func (c Config) authorizer() rpcshim.Authorizer {
	if c.ACL == nil {
		return nil
	}
	return c.ACL
}
