package raftstate

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/sealed"
)

// Defaults filled in by New for zero Config fields.
const (
	// DefaultSnapshotRetain is how many file snapshots are kept in the
	// data dir: the newest, and one to fall back on if it is damaged.
	DefaultSnapshotRetain = 2
	// DefaultLogCache is how many recent log entries are cached in
	// memory in front of the boltdb log, so that replication to a
	// follower a little behind does not read the disk.
	DefaultLogCache = 512
)

// ForwardFunc sends an encoded command (state.EncodeCommand's bytes) to
// the leader, whose host hands it to (*Server).ApplyForwarded, and
// brings back the leader's Result or error. leaderAddr and leaderID are
// the leader's raft address and server ID; the host maps them to the
// leader's RPC endpoint. The error should keep its csi sentinel and
// class across the wire (as rpcshim's WireError does), so callers can
// still tell a refused command (csi.ErrMaxClaims) from a lost one. The
// bytes hold volume secrets in clear (Config.Keyring seals only what
// is written to disk): send them only over the host's authenticated
// server-to-server channel.
type ForwardFunc func(ctx context.Context, leaderAddr, leaderID string, cmd []byte) (state.Result, error)

// Config configures a Server. ID, Store, Transport, BootstrapExpect and
// one of DataDir or InMemory are required.
type Config struct {
	// ID is this server's raft server ID: unique in the cluster and
	// stable across restarts (it is stored in the raft configuration).
	// 1 to 128 bytes of [A-Za-z0-9._-].
	ID string
	// Store is the local replica of csikit's state: the FSM applies
	// every committed command to it, and the host serves reads from it
	// (the router, the claim worker, status APIs). It must be empty and
	// a state.Snapshotter: a new *state.MemStore.
	Store state.Store
	// Transport carries raft's RPCs between servers:
	// raftstate.NewTCPTransport (or raft.NewTCPTransportWithLogger) for
	// a real cluster, raft.NewInmemTransport for tests. Once New
	// succeeds the Server owns it: Shutdown closes it, even if Start
	// never ran. Its LocalAddr is this server's raft address, the one
	// other servers Join.
	Transport raft.Transport

	// DataDir holds the durable raft state: raft.db (the log and the
	// stable store, in boltdb) and snapshots/ (file snapshots). A server
	// started on a DataDir that holds raft state rejoins its cluster
	// from it and never bootstraps again. Created (0700) if missing.
	DataDir string
	// InMemory keeps the log, stable store and snapshots in memory
	// instead: state is lost when the process ends. For tests and
	// throwaway clusters; exactly one of DataDir and InMemory is set.
	InMemory bool

	// BootstrapExpect is the number of servers in the cluster. A server
	// with no raft state does not bootstrap until it knows this many
	// servers (itself and the peers given to Join), and then bootstraps
	// with exactly those; every server must be given the same number
	// and the same servers. 1 makes a one-server cluster that
	// bootstraps at Start; use 3 or 5 for a cluster that survives the
	// loss of one or two servers.
	BootstrapExpect int

	// Forward, if set, sends writes made on a follower to the leader;
	// nil makes them fail with a *NotLeaderError naming the leader. See
	// Server.Apply.
	Forward ForwardFunc

	// Raft is the base raft configuration (timeouts, snapshot
	// thresholds, trailing logs); nil means raft.DefaultConfig(). It is
	// copied: LocalID is set to ID, Logger to Logger, and NotifyCh is
	// the Server's own, so both must be left unset (LocalID may equal
	// ID).
	Raft *raft.Config
	// SnapshotRetain is how many file snapshots to keep in DataDir; 0
	// means DefaultSnapshotRetain.
	SnapshotRetain int

	// Keyring, if set, seals every command entry before it is appended
	// to the raft log and the store's state in every snapshot, so the
	// log store and snapshot files hold no secret in clear; the FSM
	// opens them before it applies or restores, and the store holds
	// clear values. Every server of the cluster needs the same keys
	// (see package sealed for creating, copying and rotating them).
	// Entries and snapshots written before the keyring was set are
	// still read. Nil keeps commands in clear.
	Keyring *sealed.Keyring

	// Logger receives the server's and raft's logs; nil means no
	// logging.
	Logger hclog.Logger

	// Clock times the server's own retries (a leadership barrier that
	// failed while the server still leads is retried with backoff);
	// nil means the wall clock. Raft's timers are its own and always
	// run on the wall clock.
	Clock clock.Clock
}

// withDefaults validates c, fills its defaults and returns the raft
// configuration the server will run with (a copy).
func (c Config) withDefaults() (Config, *raft.Config, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: raftstate: "+format, append([]any{csi.ErrInvalidRequest}, args...)...)
	}
	if err := validateServerID(c.ID); err != nil {
		return c, nil, fmt.Errorf("raftstate: Config.ID: %w", err)
	}
	switch {
	case c.Store == nil:
		return c, nil, bad("Config.Store is nil; pass a new *state.MemStore")
	case c.Transport == nil:
		return c, nil, bad("Config.Transport is nil; pass raftstate.NewTCPTransport(...) or, in tests, raft.NewInmemTransport")
	case c.DataDir == "" && !c.InMemory:
		return c, nil, bad("neither Config.DataDir nor Config.InMemory is set; give the server a data dir for durable state")
	case c.DataDir != "" && c.InMemory:
		return c, nil, bad("Config.DataDir (%s) and Config.InMemory are both set; choose one", c.DataDir)
	case c.BootstrapExpect < 1:
		return c, nil, bad("Config.BootstrapExpect is %d; set it to the number of servers in the cluster (3 or 5; 1 for a single server)", c.BootstrapExpect)
	case c.SnapshotRetain < 0:
		return c, nil, bad("Config.SnapshotRetain is %d; use a positive number, or 0 for the default (%d)", c.SnapshotRetain, DefaultSnapshotRetain)
	}
	if _, ok := c.Store.(state.Snapshotter); !ok {
		return c, nil, bad("Config.Store %T is not a state.Snapshotter; raft needs snapshots to compact its log, use *state.MemStore", c.Store)
	}
	if c.SnapshotRetain == 0 {
		c.SnapshotRetain = DefaultSnapshotRetain
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	c.Clock = clock.Or(c.Clock)

	var rc raft.Config
	if c.Raft != nil {
		rc = *c.Raft
	} else {
		rc = *raft.DefaultConfig()
	}
	switch {
	case rc.NotifyCh != nil:
		return c, nil, bad("Config.Raft.NotifyCh is set; the Server owns it, use Server.OnLeadership instead")
	case rc.LocalID != "" && string(rc.LocalID) != c.ID:
		return c, nil, bad("Config.Raft.LocalID (%s) differs from Config.ID (%s); leave LocalID empty", rc.LocalID, c.ID)
	}
	rc.LocalID = raft.ServerID(c.ID)
	rc.Logger = c.Logger.Named("raft")
	if err := raft.ValidateConfig(&rc); err != nil {
		return c, nil, bad("Config.Raft: %v", err)
	}
	return c, &rc, nil
}

// validateServerID checks a raft server ID: the rules of csi.ValidateID,
// since hosts use it in paths and keys.
func validateServerID(id string) error {
	return csi.ValidateID("raft server ID", id)
}

// validateAddr checks a raft server address.
func validateAddr(addr string) error {
	switch {
	case addr == "":
		return fmt.Errorf("%w: empty raft address", csi.ErrInvalidRequest)
	case len(addr) > 255:
		return fmt.Errorf("%w: raft address is %d bytes long, the limit is 255", csi.ErrInvalidRequest, len(addr))
	case strings.ContainsFunc(addr, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Errorf("%w: raft address %q holds a space or control character", csi.ErrInvalidRequest, addr)
	}
	return nil
}
