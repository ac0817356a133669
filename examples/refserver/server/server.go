package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// Server is the reference server: csikit's server side (router, server
// endpoints, claim release worker) behind an HTTP+JSON API, with node
// agents registered by heartbeat and reached over csikit's gRPC
// transport. See the package doc.
type Server struct {
	cfg       Config
	live      *Liveness
	transport *rpcshim.GRPCTransport
	router    *rpcshim.Router
	api       *rpcshim.Server
	worker    *claimgc.Worker
	health    *healthRunner
	handler   http.Handler
	// routeTable is every route of handler with what it asks.
	routeTable []Route

	// stopping is closed when Run stops, and ends blocking queries so
	// that the graceful stop does not wait for them.
	stopping chan struct{}
	ran      atomic.Bool
}

var (
	_ rpcshim.NodeStatuses = (*Server)(nil)
	_ claimgc.NodeStatuses = (*Server)(nil)
)

// New validates cfg and builds the server. It starts no goroutine and
// opens no socket: Run does.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, live: NewLiveness(cfg.HeartbeatTTL), stopping: make(chan struct{})}
	s.transport, err = rpcshim.NewGRPCTransport(rpcshim.GRPCTransportConfig{
		Resolve:      func(_ context.Context, nodeID string) (string, error) { return s.live.Address(nodeID) },
		Logger:       cfg.Logger.Named("transport"),
		ClusterToken: cfg.ClusterToken,
		TLS:          cfg.NodeTLS,
		Insecure:     cfg.ClusterToken == "" && cfg.NodeTLS == nil,
	})
	if err != nil {
		return nil, err
	}
	s.router, err = rpcshim.NewRouter(rpcshim.RouterConfig{
		Store: cfg.Store, Transport: s.transport, NodeStatuses: s, Logger: cfg.Logger.Named("router"),
	})
	if err != nil {
		return nil, err
	}
	s.api, err = rpcshim.NewServer(rpcshim.ServerConfig{
		Store: cfg.Store, Applier: cfg.Applier, Router: s.router, Logger: cfg.Logger.Named("endpoints"),
		MetricSink: cfg.Metrics.Sink(),
		Authorizer: cfg.authorizer(),
	})
	if err != nil {
		return nil, err
	}
	s.worker, err = claimgc.New(claimgc.Config{
		Store: cfg.Store, Applier: cfg.Applier, Nodes: s.router, Controllers: s.router, NodeStatuses: s,
		Logger:   cfg.Logger.Named("claimgc"),
		Observer: observers{workerEvents{log: cfg.Events}, claimgc.MetricsObserver(cfg.Metrics.Sink())},
	})
	if err != nil {
		return nil, err
	}
	if _, err := s.newMonitor(); err != nil { // check the config once
		return nil, err
	}
	s.health = &healthRunner{newMonitor: s.newMonitor, resume: s.resumeVolumeChanges, logger: cfg.Logger, leading: !cfg.Follower}
	s.handler = s.routes()
	if cfg.ACL != nil {
		s.handler = cfg.ACL.withPrincipal(s.handler)
	}
	return s, nil
}

// Handler returns the HTTP API. Run serves it; a host with an HTTP
// server of its own may mount it instead (then it runs the rest with
// Run on a listener it never uses, or not at all: without Run the claim
// release worker does not run).
func (s *Server) Handler() http.Handler { return s.handler }

// Liveness returns the node liveness table the server answers
// NodeStatus from.
func (s *Server) Liveness() *Liveness { return s.live }

// NodeStatus implements rpcshim.NodeStatuses and claimgc.NodeStatuses
// from the heartbeats, at Config.Now.
func (s *Server) NodeStatus(_ context.Context, nodeID string) (csi.NodeStatus, error) {
	return s.live.Status(nodeID, s.cfg.Now()), nil
}

// SetLeader turns the claim release worker and the leader's term work
// (resuming pending volume changes, then the health monitor) on (this
// server leads) or off (it follows). It is the one switch a replicated host flips on
// leadership changes; a single server is its own leader unless
// Config.Follower is set.
func (s *Server) SetLeader(leader bool) {
	s.worker.SetEnabled(leader)
	s.health.setLeader(leader)
	if leader {
		s.cfg.Events.Printf("server", "leading: the claim release worker is on")
	} else {
		s.cfg.Events.Printf("server", "following: the claim release worker is off")
	}
}

// WorkerStats returns the claim release worker's counters.
func (s *Server) WorkerStats() claimgc.Stats { return s.worker.Stats() }

// Settle waits until the claim release worker has nothing left to do
// right now (see claimgc.Worker.Settle).
func (s *Server) Settle(ctx context.Context) error { return s.worker.Settle(ctx) }

// Run serves the API on lis and runs the claim release worker until ctx
// ends. It then stops gracefully: blocking queries answer at once,
// writes in flight get Config.ShutdownTimeout, the worker stops, and the
// node connections close. Run closes lis and returns nil after a stop
// caused by ctx. A Server runs once.
func (s *Server) Run(ctx context.Context, lis net.Listener) error {
	if !s.ran.CompareAndSwap(false, true) {
		_ = lis.Close()
		return fmt.Errorf("%w: the server has already run; build a new one", csi.ErrInvalidRequest)
	}
	defer s.transport.Close()

	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() { workerDone <- s.worker.Run(wctx) }()
	if !s.cfg.Follower {
		s.worker.SetEnabled(true)
	}
	s.health.open()

	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          s.cfg.Logger.StandardLogger(nil),
	}
	closeFresh := trackFreshConns(srv)
	srv.RegisterOnShutdown(closeFresh)
	served := make(chan error, 1)
	scheme := "http"
	if s.cfg.TLS != nil {
		lis, scheme = tls.NewListener(lis, s.cfg.TLS), "https"
	}
	go func() { served <- srv.Serve(lis) }()
	s.cfg.Events.Printf("server", "API listening on %s://%s", scheme, lis.Addr())

	var err error
	select {
	case <-ctx.Done():
	case err = <-served:
		err = fmt.Errorf("serve the API on %s: %w", lis.Addr(), err)
	}
	close(s.stopping)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	if serr := srv.Shutdown(sctx); serr != nil && err == nil && !errors.Is(serr, context.DeadlineExceeded) {
		err = serr
	}
	cancel()
	if err == nil {
		if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
			err = serr
		}
	}
	stopWorker()
	if werr := <-workerDone; werr != nil && err == nil {
		err = werr
	}
	s.health.close()
	return err
}

// trackFreshConns tracks the connections that have not sent a request
// yet, and returns a function that closes them. Shutdown waits up to
// five seconds for such a connection (an HTTP client often dials one
// ahead and leaves it unused); closing them once the listener is closed
// lets the stop wait only for requests in flight.
func trackFreshConns(srv *http.Server) func() {
	var mu sync.Mutex
	fresh := map[net.Conn]struct{}{}
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		if st == http.StateNew {
			fresh[c] = struct{}{}
		} else {
			delete(fresh, c)
		}
	}
	return func() {
		mu.Lock()
		defer mu.Unlock()
		for c := range fresh {
			_ = c.Close()
		}
	}
}

// now is the server's time.
func (s *Server) now() time.Time { return s.cfg.Now() }

// store and applier, named for readability.
func (s *Server) store() state.Reader    { return s.cfg.Store }
func (s *Server) applier() state.Applier { return s.cfg.Applier }
