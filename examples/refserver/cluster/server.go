package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/internal/quietlog"
	"github.com/csikit/csikit/examples/refserver/server"
	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/raftstate"
)

// Server is one server of a cluster: the reference server (package
// server) over a replica of csikit's state kept by raftstate. See the
// package doc.
type Server struct {
	cfg Config
	id  string

	ran    atomic.Bool
	ready  chan struct{} // closed once Run has started everything, or failed to
	joined chan struct{} // closed once every Config.Join server answered and was joined

	mu      sync.Mutex
	raft    *raftstate.Server
	srv     *server.Server
	store   *state.MemStore
	apiAddr string
	peers   map[string]*peer // by server ID, learned by status calls

	leading atomic.Bool
	// restarted is set when Run found raft state in the data dir.
	restarted bool
}

// peer is another server as this one reaches it.
type peer struct {
	address string
	client  *api.Client
}

// New validates cfg, fills its defaults and settles the server's ID:
// Config.ID, or the one kept in the data dir, or a new one kept there
// for the next start. It creates the data dir, and starts no goroutine
// and opens no socket: Run does.
func New(cfg Config) (*Server, error) {
	if err := cfg.checkTLS(); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	id := cfg.ID
	if !cfg.Dev {
		if id, err = loadID(cfg.DataDir, cfg.ID); err != nil {
			return nil, err
		}
	}
	return &Server{cfg: cfg, id: id, ready: make(chan struct{}), joined: make(chan struct{}), peers: map[string]*peer{}}, nil
}

// ID returns the server's raft server ID.
func (s *Server) ID() string { return s.id }

// Ready is closed once Run has started raft and built the reference
// server (Raft, Server and Store return them from then on), or once Run
// failed before that (they return nil).
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Joined is closed once every server in Config.Join has answered its
// status call and been joined: from then on this server can forward
// writes to whichever of them leads. It stays open if Run stops first.
func (s *Server) Joined() <-chan struct{} { return s.joined }

// Raft returns the raftstate server (for WaitLeader, OnLeadership, the
// FSM's applied index), or nil before Ready and after a failed start.
func (s *Server) Raft() *raftstate.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raft
}

// Server returns the reference server, or nil before Ready and after a
// failed start.
func (s *Server) Server() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

// Store returns this server's replica of the state, or nil before Ready
// and after a failed start. It is read-only for the host: every write
// goes through the raft log.
func (s *Server) Store() *state.MemStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.store
}

// Leading reports whether this server leads and its claim release
// worker is on.
func (s *Server) Leading() bool { return s.leading.Load() }

// Run runs the server until ctx ends: it starts the raft transport on
// Config.RaftAddr and raft on Config.DataDir, calls the status of each
// server in Config.Join (retrying until it answers) and joins it,
// switches the claim release worker on while this server leads, and
// serves the HTTP API, with the cluster's internal endpoints, on lis.
// It then stops the API and the worker, then raft, and returns nil
// after a stop caused by ctx. A join refused for good (the servers were
// given different IDs or counts) stops it with that error. Run closes
// lis; a Server runs once.
func (s *Server) Run(ctx context.Context, lis net.Listener) (err error) {
	if !s.ran.CompareAndSwap(false, true) {
		_ = lis.Close()
		return fmt.Errorf("%w: cluster server %s has already run; build a new one", csi.ErrInvalidRequest, s.id)
	}
	started := false
	defer func() {
		if !started {
			close(s.ready)
		}
	}()
	rs, srv, err := s.startRaft(lis)
	if err != nil {
		return err
	}
	led, stopLeading := s.followLeadership(rs, srv)
	s.printStart(rs)
	started = true
	close(s.ready)

	sctx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	waitJoins := s.joinAll(sctx, rs, stopServer)
	diverged := s.watchDiverged(sctx, rs, stopServer)
	if s.cfg.BootstrapExpect == 1 {
		// A single server elects itself at once; serving only then
		// means the API takes writes from its first request.
		select {
		case <-led:
		case <-sctx.Done():
		}
	}
	err = srv.Run(sctx, lis)
	stopServer()
	joinErr := waitJoins()
	stopLeading()
	s.leading.Store(false)
	return s.stopRaft(rs, errors.Join(err, joinErr, diverged()))
}

// watchDiverged stops the server when its replica diverges
// (raftstate.ErrStateDiverged: a committed entry it cannot apply,
// such as one sealed with a key its keyring lacks), so that it does
// not serve a state that stopped short. wait returns that error, or
// nil when ctx ended first.
func (s *Server) watchDiverged(ctx context.Context, rs *raftstate.Server, stopServer func()) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		select {
		case <-rs.Failed():
			s.cfg.Events.Printf("server", "server %s stops: %v", s.id, rs.Err())
			stopServer()
			done <- fmt.Errorf("cluster server %s: %w", s.id, rs.Err())
		case <-ctx.Done():
			done <- nil
		}
	}()
	return func() error { return <-done }
}

// startRaft builds the raft server and the HTTP server on lis and
// starts raft. On error it closes lis and leaves nothing running.
func (s *Server) startRaft(lis net.Listener) (*raftstate.Server, *server.Server, error) {
	// Whether raft state was there before raft opens (and a single
	// server bootstraps) it.
	_, statErr := os.Stat(filepath.Join(s.cfg.DataDir, RaftDir, "raft.db"))
	s.restarted = !s.cfg.Dev && statErr == nil
	rs, srv, err := s.build(lis)
	if err != nil {
		_ = lis.Close()
		return nil, nil, err
	}
	if err := rs.Start(); err != nil {
		_ = lis.Close()
		s.mu.Lock()
		s.raft, s.srv, s.store = nil, nil, nil
		s.mu.Unlock()
		return nil, nil, errors.Join(fmt.Errorf("cluster server %s: %w", s.id, err), rs.Shutdown())
	}
	return rs, srv, nil
}

// followLeadership keeps Leading and the HTTP server's leader flag in
// step with raft's leadership. led is closed the first time this server
// leads; stop unregisters the callback.
func (s *Server) followLeadership(rs *raftstate.Server, srv *server.Server) (led <-chan struct{}, stop func()) {
	ledCh := make(chan struct{})
	var ledOnce sync.Once
	stop = rs.OnLeadership(func(leader bool) {
		s.leading.Store(leader)
		srv.SetLeader(leader)
		if leader {
			ledOnce.Do(func() { close(ledCh) })
		}
	})
	return ledCh, stop
}

// joinAll joins every server of Config.Join, each on its own goroutine,
// and closes s.joined once all have joined. A join refused for good
// calls stopServer. wait waits for the goroutines and returns the first
// such error.
func (s *Server) joinAll(ctx context.Context, rs *raftstate.Server, stopServer func()) (wait func() error) {
	var wg sync.WaitGroup
	var joinErr error
	var joinMu sync.Mutex
	joinedCount := 0
	if len(s.cfg.Join) == 0 {
		close(s.joined)
	}
	for _, addr := range s.cfg.Join {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := s.join(ctx, rs, addr)
			joinMu.Lock()
			defer joinMu.Unlock()
			if err != nil && joinErr == nil {
				joinErr = err
				stopServer()
			}
			if ok {
				if joinedCount++; joinedCount == len(s.cfg.Join) {
					close(s.joined)
				}
			}
		}()
	}
	return func() error {
		wg.Wait()
		return joinErr
	}
}

// stopRaft shuts raft down and closes the peers' clients, and returns
// err joined with any shutdown error.
func (s *Server) stopRaft(rs *raftstate.Server, err error) error {
	if serr := rs.Shutdown(); serr != nil {
		err = errors.Join(err, fmt.Errorf("cluster server %s: %w", s.id, serr))
	}
	s.mu.Lock()
	for _, p := range s.peers {
		p.client.Close()
	}
	s.mu.Unlock()
	return err
}

// printStart says which engine runs: in memory, a single durable
// server, or one server of a cluster (new, or rejoining from its data).
func (s *Server) printStart(rs *raftstate.Server) {
	peers, _ := rs.Servers()
	found := s.restarted
	switch {
	case s.cfg.Dev:
		s.cfg.Events.Printf("server", "dev mode: server %s keeps its state in memory only; nothing is written, and the state is lost when it stops", s.id)
	case s.cfg.BootstrapExpect == 1 && found:
		s.cfg.Events.Printf("server", "durable mode: server %s restores its state from %s (raft log and snapshots on boltdb, one voter)", s.id, s.cfg.DataDir)
	case s.cfg.BootstrapExpect == 1:
		s.cfg.Events.Printf("server", "durable mode: server %s keeps its state in %s (raft log and snapshots on boltdb, one voter); every acknowledged write is on disk", s.id, s.cfg.DataDir)
	case found:
		s.cfg.Events.Printf("server", "server %s: raft state found in %s; rejoining its cluster of %d servers (raft on %s), no bootstrap",
			s.id, s.cfg.DataDir, len(peers), rs.Self().Addr)
	default:
		s.cfg.Events.Printf("server", "server %s: raft on %s, data in %s; the cluster forms once %d servers know each other",
			s.id, rs.Self().Addr, s.cfg.DataDir, s.cfg.BootstrapExpect)
	}
}

// raftTransporter is the raft transport of a server, closed by raft.
type raftTransporter interface {
	raft.Transport
	raft.WithClose
}

// transport returns the raft transport: in memory for a single server,
// which sends nothing, else TCP (TLS with PeerTLS) on RaftAddr.
func (s *Server) transport() (raftTransporter, error) {
	var adv net.Addr
	if s.cfg.RaftAdvertise != "" {
		a, err := net.ResolveTCPAddr("tcp", s.cfg.RaftAdvertise)
		if err != nil {
			return nil, fmt.Errorf("%w: cluster server %s: RaftAdvertise %q: %v", csi.ErrInvalidRequest, s.id, s.cfg.RaftAdvertise, err)
		}
		adv = a
	}
	if s.cfg.RaftAddr == "" {
		// A single server: nothing is ever sent over it.
		_, tr := raft.NewInmemTransport(raft.ServerAddress("inmem:" + s.id))
		return tr, nil
	}
	tcp, err := s.raftTransport(adv)
	if err != nil {
		return nil, fmt.Errorf("cluster server %s: %w", s.id, err)
	}
	return tcp, nil
}

// build makes the raftstate server over a new store, with the raft
// transport, and the reference server writing through it.
func (s *Server) build(lis net.Listener) (*raftstate.Server, *server.Server, error) {
	acl, err := s.loadACL()
	if err != nil {
		return nil, nil, err
	}
	tr, err := s.transport()
	if err != nil {
		return nil, nil, err
	}
	store, err := state.NewMemStore(state.Config{Logger: s.cfg.Logger.Named("state")})
	if err != nil {
		_ = tr.Close()
		return nil, nil, err
	}
	raftDir := ""
	if !s.cfg.Dev {
		raftDir = filepath.Join(s.cfg.DataDir, RaftDir)
	}
	logger := s.cfg.Logger
	if s.cfg.BootstrapExpect == 1 {
		// A lone voter's election at every start is expected.
		logger = quietlog.New(logger, quietlog.Config{Demote: []string{"heartbeat timeout reached, starting election"}})
	}
	keyring, err := s.loadKeyring()
	if err != nil {
		_ = tr.Close()
		return nil, nil, err
	}
	rs, err := raftstate.New(raftstate.Config{
		ID: s.id, Store: store, Transport: tr, DataDir: raftDir, InMemory: s.cfg.Dev,
		BootstrapExpect: s.cfg.BootstrapExpect, Forward: s.forward, Raft: s.cfg.Raft, Logger: logger, Keyring: keyring,
	})
	if err != nil {
		_ = tr.Close()
		return nil, nil, fmt.Errorf("cluster server %s: %w", s.id, err)
	}
	m, err := server.NewMetrics()
	if err != nil {
		return nil, nil, errors.Join(err, rs.Shutdown())
	}
	if s.cfg.ACL {
		acl = server.NewStateACL(rs.Reader())
	}
	srv, err := server.New(server.Config{
		Store: rs.Reader(), Applier: timedApplier{rs, m.Sink()}, Follower: true, Internal: s.internal(), Metrics: m,
		HeartbeatTTL: s.cfg.HeartbeatTTL, Now: s.cfg.Now, ShutdownTimeout: s.cfg.ShutdownTimeout,
		Events: s.cfg.Events, Logger: s.cfg.Logger, ClusterToken: s.cfg.ClusterToken, ACL: acl, TLS: s.cfg.TLS, NodeTLS: s.cfg.ClientTLS,
	})
	if err != nil {
		return nil, nil, errors.Join(err, rs.Shutdown())
	}
	apiAddr := s.cfg.Advertise
	if apiAddr == "" {
		apiAddr = advertised(lis.Addr())
	}
	if cl, err := s.newClient(apiAddr); err == nil {
		apiAddr = cl.Address() // as the other servers list it: http://host:port
		cl.Close()
	}
	s.mu.Lock()
	s.raft, s.srv, s.store, s.apiAddr = rs, srv, store, apiAddr
	s.mu.Unlock()
	return rs, srv, nil
}

// join calls the status of the server at addr until it answers, then
// joins it (raftstate's Join) and keeps its API address for forwarding.
// It reports whether it joined; it returns false and no error when ctx
// ends first, and an error for a join refused for good.
func (s *Server) join(ctx context.Context, rs *raftstate.Server, addr string) (bool, error) {
	client, err := s.newClient(addr)
	if err != nil {
		return false, err // checked by New
	}
	delay := 100 * time.Millisecond
	for {
		st, err := client.Status(ctx)
		if err == nil {
			if err = s.joinPeer(rs, client, st); err == nil {
				return true, nil // the client is kept for forwarding
			}
		} else if !csi.IsRetryable(err) {
			err = fmt.Errorf("cluster server %s: the status of %s: %w; is it a refserver server in cluster mode (-bootstrap-expect)?", s.id, addr, err)
		}
		if ctx.Err() != nil {
			client.Close()
			return false, nil
		}
		if !csi.IsRetryable(err) {
			client.Close()
			return false, err
		}
		s.cfg.Logger.Info("server to join does not answer yet; retrying", "address", addr, "error", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			client.Close()
			return false, nil
		case <-t.C:
		}
		delay = min(2*delay, DefaultJoinRetryMax)
	}
}

// joinPeer joins the server whose status st was read through client.
func (s *Server) joinPeer(rs *raftstate.Server, client *api.Client, st *api.ServerStatus) error {
	if err := rs.Join(raftstate.Peer{ID: st.ID, Addr: st.RaftAddress}); err != nil {
		return fmt.Errorf("cluster server %s: join %s (server %s, raft %s): %w", s.id, client.Address(), st.ID, st.RaftAddress, err)
	}
	if st.ID == s.id {
		client.Close()
		return nil
	}
	s.mu.Lock()
	old := s.peers[st.ID]
	if old != nil && old.address == client.Address() {
		// Found already, by a forwarded write.
		s.mu.Unlock()
		client.Close()
		return nil
	}
	s.peers[st.ID] = &peer{address: client.Address(), client: client}
	s.mu.Unlock()
	if old != nil {
		// Two -join addresses reach the same server.
		old.client.Close()
	}
	s.cfg.Events.Printf("server", "joined server %s: raft %s, API %s", st.ID, st.RaftAddress, client.Address())
	return nil
}

// peerAPI returns the client of a server learned by a status call.
func (s *Server) peerAPI(id string) *peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peers[id]
}

// forward is raftstate's Forward hook: it sends a follower's write to
// the leader's internal apply endpoint.
func (s *Server) forward(ctx context.Context, leaderAddr, leaderID string, cmd []byte) (state.Result, error) {
	p := s.peerAPI(leaderID)
	if p == nil {
		p = s.findPeer(ctx, leaderID)
	}
	if p == nil {
		return state.Result{}, fmt.Errorf("%w: the API address of leader %s (raft %s) is not known to server %s yet; list every other server in its -join",
			csi.ErrUnavailable, leaderID, leaderAddr, s.id)
	}
	res, err := p.client.Apply(ctx, cmd)
	var ae *api.Error
	if err != nil && ctx.Err() == nil && !errors.As(err, &ae) {
		// The leader did not answer: say so in a person's words,
		// keeping the error (and its class) underneath.
		err = &leaderUnreachable{leader: leaderID, api: p.address, err: err}
	}
	return res, err
}

// leaderUnreachable is a forwarded write the leader did not answer. It
// unwraps to the client's error, so its sentinel and class (Retryable
// when the connection was never made, Uncertain otherwise) stay.
type leaderUnreachable struct {
	leader, api string
	err         error
}

func (e *leaderUnreachable) Error() string {
	cause := e.err.Error()
	var op *net.OpError
	if errors.As(e.err, &op) && op.Err != nil {
		cause = op.Err.Error()
	}
	msg := fmt.Sprintf("the leader, server %s (API %s), does not answer: %s", e.leader, e.api, cause)
	if csi.Classify(e.err) == csi.ClassUncertain {
		msg += " (the write may or may not have been applied)"
	}
	return msg
}

func (e *leaderUnreachable) Unwrap() error { return e.err }

// findPeer looks for server id among the Join addresses not joined
// yet, with one status call each, and joins it if found. It serves a
// write forwarded while the join to the leader still waits for its next
// retry.
func (s *Server) findPeer(ctx context.Context, id string) *peer {
	s.mu.Lock()
	rs := s.raft
	known := map[string]bool{}
	for _, p := range s.peers {
		known[p.address] = true
	}
	s.mu.Unlock()
	for _, addr := range s.cfg.Join {
		client, err := s.newClient(addr)
		if err != nil || known[client.Address()] {
			continue
		}
		st, err := client.Status(ctx)
		if err != nil || st.ID != id || s.joinPeer(rs, client, st) != nil {
			client.Close()
			continue
		}
		return s.peerAPI(id)
	}
	return nil
}

// advertised is the address a listener is reached at: 127.0.0.1 for a
// listener on every interface.
func advertised(addr net.Addr) string {
	if a, ok := addr.(*net.TCPAddr); ok && (a.IP == nil || a.IP.IsUnspecified()) {
		return net.JoinHostPort("127.0.0.1", fmt.Sprint(a.Port))
	}
	return addr.String()
}
