package raftstate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// Peer is a raft server: its ID and its raft address (its transport's
// LocalAddr).
type Peer struct {
	ID   string
	Addr string
}

func (p Peer) String() string { return p.ID + "@" + p.Addr }

// Server is one replica of csikit's state on hashicorp/raft: the FSM
// over the local store, raft with its log, stable store and snapshots,
// bootstrap by expected count, the leadership signal, and the
// state.Applier that writes through the log. See the package doc for
// the host's duties.
//
// Its methods are safe for concurrent use.
type Server struct {
	cfg  Config
	rcfg *raft.Config
	fsm  *FSM
	self Peer

	// mu guards the lifecycle and the bootstrap.
	mu      sync.Mutex
	phase   phase
	raft    *raft.Raft
	closeDB func() error
	known   map[string]string // server ID → raft address, self included
	formed  bool              // the cluster formed: bootstrapped here, or raft state found at Start
	// inflight counts goroutines waiting on a raft future (an Apply on
	// the leader, a leadership barrier); drained is closed once Shutdown
	// has begun and none is left.
	inflight int
	drained  chan struct{}

	notifyCh chan bool
	obsCh    chan raft.Observation
	observer *raft.Observer
	stopRun  chan struct{} // closed by Shutdown: the run goroutine returns
	runDone  chan struct{} // closed when the run goroutine returned
	stopped  chan struct{} // closed when Shutdown has stopped raft
	failed   chan struct{} // closed when the FSM diverged and Shutdown returned

	shutdownOnce sync.Once
	shutdownErr  error

	// leaderMu guards leaderChanged, closed and replaced when the known
	// leader changes.
	leaderMu      sync.Mutex
	leaderChanged chan struct{}

	// obsMu guards the leadership observers; they are called with it
	// held, so their calls are ordered.
	obsMu       sync.Mutex
	established bool
	observers   map[uint64]func(bool)
	nextObs     uint64

	// barrier runs the leadership barrier; tests replace it before
	// Start to make it fail.
	barrier func(*raft.Raft) error
}

type phase int

const (
	phaseNew phase = iota
	phaseRunning
	phaseStopped
)

// New validates cfg, fills its defaults and returns a Server that is not
// running yet: it opens no file and starts no goroutine. Call Start.
func New(cfg Config) (*Server, error) {
	c, rc, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	fsm, err := NewFSM(c.Store, c.Logger.Named("fsm"))
	if err != nil {
		return nil, err
	}
	fsm.keyring = c.Keyring
	self := Peer{ID: c.ID, Addr: string(c.Transport.LocalAddr())}
	if err := validateAddr(self.Addr); err != nil {
		return nil, fmt.Errorf("raftstate: the transport's local address: %w", err)
	}
	obsCh := make(chan raft.Observation, 16)
	return &Server{
		cfg:      c,
		rcfg:     rc,
		fsm:      fsm,
		self:     self,
		known:    map[string]string{self.ID: self.Addr},
		notifyCh: make(chan bool, 1),
		obsCh:    obsCh,
		observer: raft.NewObserver(obsCh, false, func(o *raft.Observation) bool {
			_, ok := o.Data.(raft.LeaderObservation)
			return ok
		}),
		stopRun:       make(chan struct{}),
		runDone:       make(chan struct{}),
		stopped:       make(chan struct{}),
		failed:        make(chan struct{}),
		drained:       make(chan struct{}),
		leaderChanged: make(chan struct{}),
		observers:     map[uint64]func(bool){},
		barrier:       func(r *raft.Raft) error { return r.Barrier(0).Error() },
	}, nil
}

// Self returns this server's ID and raft address: what the other
// servers pass to Join.
func (s *Server) Self() Peer { return s.self }

// FSM returns the state machine; its WaitApplied tells when the local
// store holds a given raft index.
func (s *Server) FSM() *FSM { return s.fsm }

// Start opens the raft state (DataDir, or memory), starts raft, and, if
// the data dir held no raft state and the expected servers are already
// known (BootstrapExpect 1, or Join called before Start), bootstraps
// the cluster. A server whose data dir holds raft state rejoins its
// cluster from it and never bootstraps. On error nothing is left
// running or open. Start may be called again after an error opening
// the data dir (a lock held by another process, say); after any other
// error, or once it succeeded, it is refused: Shutdown, and build a new
// Server.
func (s *Server) Start() error {
	started, err := s.start()
	if err != nil && started {
		s.Shutdown()
	}
	return err
}

// start does Start's work; started reports whether raft runs, so that
// an error needs a Shutdown.
func (s *Server) start() (started bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.phase {
	case phaseRunning:
		return false, fmt.Errorf("%w: raftstate: server %s is already started", csi.ErrInvalidRequest, s.self.ID)
	case phaseStopped:
		return false, fmt.Errorf("%w: raftstate: server %s was shut down; build a new Server with New (and a new, empty store)", csi.ErrInvalidRequest, s.self.ID)
	}
	logs, stable, snaps, closeDB, err := s.openStores()
	if err != nil {
		// Nothing was opened: Start may be tried again (a data dir
		// locked by a server that is stopping).
		return false, err
	}
	existing, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		closeDB()
		return false, fmt.Errorf("raftstate: read the raft state in %s: %w", s.where(), err)
	}
	if err := checkKeyring(s.cfg.Keyring, logs); err != nil {
		closeDB()
		return false, err
	}
	rc := *s.rcfg
	rc.NotifyCh = s.notifyCh
	r, err := raft.NewRaft(&rc, s.fsm, logs, stable, snaps, s.cfg.Transport)
	if err != nil {
		// raft may have restored a snapshot into the store: it is no
		// longer empty, so this Server cannot start again.
		closeDB()
		s.phase = phaseStopped
		if rerr := s.fsm.restoreError(); rerr != nil {
			err = fmt.Errorf("%w: %w", err, rerr)
		}
		return false, fmt.Errorf("raftstate: start raft on %s: %w; build a new Server with a new, empty store", s.where(), err)
	}
	r.RegisterObserver(s.observer)
	s.raft, s.closeDB, s.phase, s.formed = r, closeDB, phaseRunning, existing
	go s.run(r)
	if existing {
		s.cfg.Logger.Info("raft state found; rejoining the cluster without bootstrapping", "where", s.where())
		return true, nil
	}
	return true, s.maybeBootstrapLocked()
}

func (s *Server) where() string {
	if s.cfg.InMemory {
		return "memory"
	}
	return s.cfg.DataDir
}

// openStores opens the log, stable and snapshot stores, in memory or in
// the data dir, and returns what closes them.
func (s *Server) openStores() (raft.LogStore, raft.StableStore, raft.SnapshotStore, func() error, error) {
	if s.cfg.InMemory {
		mem := raft.NewInmemStore()
		return mem, mem, raft.NewInmemSnapshotStore(), func() error { return nil }, nil
	}
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("raftstate: create the data dir: %w", err)
	}
	path := filepath.Join(s.cfg.DataDir, "raft.db")
	db, err := raftboltdb.New(raftboltdb.Options{
		Path: path,
		// Another process holding the file would make Open wait for its
		// lock forever.
		BoltOptions: &bbolt.Options{Timeout: time.Second},
	})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, nil, nil, nil, fmt.Errorf("%w: raftstate: %s is locked by another process; is another server running on data dir %s?",
				csi.ErrUnavailable, path, s.cfg.DataDir)
		}
		return nil, nil, nil, nil, fmt.Errorf("raftstate: open %s: %w", path, err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(s.cfg.DataDir, s.cfg.SnapshotRetain, s.cfg.Logger.Named("snapshots"))
	if err != nil {
		db.Close()
		return nil, nil, nil, nil, fmt.Errorf("raftstate: open the snapshots in %s: %w", s.cfg.DataDir, err)
	}
	logs, err := raft.NewLogCache(DefaultLogCache, db)
	if err != nil {
		db.Close()
		return nil, nil, nil, nil, fmt.Errorf("raftstate: log cache: %w", err)
	}
	return logs, db, snaps, db.Close, nil
}

// begin registers a goroutine that will wait on a raft future and
// returns raft; false once Shutdown has begun (or before Start).
// Shutdown lets such goroutines finish before it stops raft, because
// raft never answers an entry it committed but had not yet handed to
// the FSM when it stopped.
func (s *Server) begin() (*raft.Raft, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase != phaseRunning {
		return nil, false
	}
	s.inflight++
	return s.raft, true
}

// end is the counterpart of a successful begin.
func (s *Server) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if s.phase == phaseStopped && s.inflight == 0 {
		close(s.drained)
	}
}

// running returns raft while the server runs, or nil.
func (s *Server) running() *raft.Raft {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase != phaseRunning {
		return nil
	}
	return s.raft
}

// Failed is closed once this replica diverged, its FSM having met a
// committed entry it cannot apply (ErrStateDiverged; Err says which
// and why), and the Server shut itself down because of it: raft is
// stopped, writes are refused, and its Reader refuses every read. A
// host watches it beside its own work, to stop serving from this
// server and report Err.
func (s *Server) Failed() <-chan struct{} { return s.failed }

// Err returns the *DivergedError once this replica diverged, else nil.
func (s *Server) Err() error { return s.fsm.Err() }

// Raft returns the running raft instance, or nil before Start and after
// Shutdown, for what this package does not wrap: raft.Snapshot, stats,
// membership changes (AddVoter, RemoveServer) on the leader. Write
// through Apply, not raft.Apply, and stop through Shutdown.
func (s *Server) Raft() *raft.Raft { return s.running() }

// Shutdown stops raft, the server's goroutine and the stores, closes the
// transport, and reports the loss of leadership to OnLeadership if this
// server led. It returns once all of it is done; later calls return the
// first call's result. The store keeps what it holds and stays
// readable.
//
// New writes are refused from the start of Shutdown (an error matching
// csi.ErrUnavailable). Writes raft has already taken are given time to
// be answered before raft stops, up to 2×(HeartbeatTimeout +
// LeaderLeaseTimeout): committed ones return their result, and a leader
// that lost its quorum steps down within its lease and answers them
// Uncertain. hashicorp/raft never answers an entry that it committed
// but had not yet handed to the FSM when it stopped; the wait keeps
// that from happening. Only if it runs out do the remaining writes
// return Uncertain at once, with a goroutine of this package left
// waiting on raft until the process ends.
func (s *Server) Shutdown() error {
	s.shutdownOnce.Do(func() { s.shutdownErr = s.shutdown() })
	return s.shutdownErr
}

func (s *Server) shutdown() error {
	s.mu.Lock()
	prev := s.phase
	s.phase = phaseStopped
	r, closeDB := s.raft, s.closeDB
	if s.inflight == 0 {
		close(s.drained)
	}
	s.mu.Unlock()
	var errs []error
	if prev == phaseRunning {
		// Let raft answer what it has taken: commits go through, and a
		// leader without quorum steps down within its lease and answers
		// "leadership lost". Real time on purpose: the bound is measured
		// against raft's own heartbeat and lease timers, which
		// hashicorp/raft runs on the real clock.
		drain := time.NewTimer(2 * (s.rcfg.HeartbeatTimeout + s.rcfg.LeaderLeaseTimeout))
		select {
		case <-s.drained:
		case <-drain.C:
			s.cfg.Logger.Warn("shutting down with writes still waiting on raft; they end as uncertain")
		}
		drain.Stop()
		if err := r.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("raftstate: stop raft: %w", err))
		}
		close(s.stopRun)
		<-s.runDone
		r.DeregisterObserver(s.observer)
	}
	close(s.stopped)
	s.setEstablished(false)
	// A network transport keeps pooled connections to the other servers,
	// whose handlers would wait on them; close them with the transport.
	if cs, ok := s.cfg.Transport.(interface{ CloseStreams() }); ok {
		cs.CloseStreams()
	}
	if c, ok := s.cfg.Transport.(io.Closer); ok {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftstate: close the transport: %w", err))
		}
	}
	if closeDB != nil {
		if err := closeDB(); err != nil {
			errs = append(errs, fmt.Errorf("raftstate: close %s: %w", s.where(), err))
		}
	}
	return errors.Join(errs...)
}

// statically check the Applier.
var _ state.Applier = (*Server)(nil)
