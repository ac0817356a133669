package cluster

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/events"
	"github.com/csikit/csikit/examples/refserver/internal/atomicfile"
)

// Files and directories in Config.DataDir.
const (
	// IDFile holds the server's ID, written at its first start, so that
	// it keeps its ID (which the raft configuration names) across
	// restarts.
	IDFile = "server-id"
	// RaftDir holds the raft log, stable store (raft.db) and snapshots
	// (raftstate.Config.DataDir).
	RaftDir = "raft"
	// KeyringDir holds a single server's keyring (Config.KeyringDir).
	KeyringDir = "keyring"
)

// Config configures a Server. BootstrapExpect is required, and DataDir
// unless Dev is set; RaftAddr is required for more than one server.
type Config struct {
	// ID is the server's raft server ID (csi.ValidateID rules). Empty
	// means the ID kept in DataDir/IDFile, or a new random one written
	// there at the first start. A given ID must match the one kept
	// there: a data dir belongs to one server.
	ID string
	// DataDir holds the server's ID and its raft state (DataDir/RaftDir).
	// A server started on a data dir that holds raft state rejoins its
	// cluster from it and never bootstraps again. Created (0700) if
	// missing.
	DataDir string
	// Dev keeps the raft log, stable store and snapshots in memory
	// (raftstate.Config.InMemory) and writes nothing: the state is lost
	// when the server stops. For tests and throwaway runs; it needs
	// BootstrapExpect 1 (or 0, meaning 1), no DataDir and no Join. The
	// ID is Config.ID, or "dev".
	Dev bool
	// BootstrapExpect is the number of servers in the cluster: the
	// cluster forms once this many servers know each other (through
	// Join), never before. Give every server the same number; 3 or 5
	// survive the loss of one or two.
	BootstrapExpect int

	// RaftAddr is where the raft transport listens (host:port; port 0
	// picks a free one). Empty, for a single server (BootstrapExpect 1),
	// means raft's in-memory transport: a one-voter cluster sends
	// nothing over its transport, so it needs no port. Its address is what the other servers dial, so
	// it must be a concrete IP unless RaftAdvertise is set, and it must
	// stay the same across restarts: the raft configuration records it.
	RaftAddr string
	// RaftAdvertise is the raft address the other servers dial, when it
	// differs from RaftAddr (a bind on 0.0.0.0).
	RaftAdvertise string
	// Join lists the HTTP API addresses of the other servers
	// ("host:port" or "http://host:port"; this server's own may be
	// listed too). Each gets a status call, retried until it answers,
	// giving its ID and raft address for raftstate's Join and the API
	// address this server forwards writes to when it leads.
	Join []string
	// Advertise is this server's HTTP API address as the other servers
	// reach it, reported in its status; empty means the listener's
	// address (127.0.0.1 for a listener on every interface).
	Advertise string

	// Raft is the base raft configuration (timeouts); nil means
	// raft.DefaultConfig(), with the timeouts of SingleRaftConfig for a
	// single server. Tests shorten its timeouts.
	Raft *raft.Config

	// HeartbeatTTL and Now configure node liveness, as in
	// server.Config. Each server keeps its own: agents heartbeat every
	// server (see the package doc).
	HeartbeatTTL time.Duration
	Now          func() time.Time
	// ShutdownTimeout bounds the graceful stop of the HTTP API; 0 means
	// server.DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// ClusterToken is the secret every server of the cluster shares:
	// the internal endpoints (status, forwarded writes) refuse a
	// request without it (403), so only another server can apply a
	// state command. Empty leaves them open, for a dev cluster on
	// loopback.
	ClusterToken string
	// ACLFile, if set, turns ACLs on: API requests need a token
	// (server.ACL). A missing file is bootstrapped with one management
	// token, printed once to Events; the file keeps its hash only.
	ACLFile string
	// ACL turns ACLs on with the tokens kept in the replicated state
	// (state.UpsertACLToken, by hash): a token made through any server
	// works on every server, and none is in a file. The first token is
	// the management token of POST /v1/acl/bootstrap (api
	// BootstrapACL), made once per cluster. Not with ACLFile.
	ACL bool
	// TLS, PeerTLS and ClientTLS turn TLS on (all three, or none; the
	// tlsconf package makes them from -tls-* files): TLS serves the
	// API, PeerTLS the raft transport (it must require a client
	// certificate: mutual TLS between servers), and ClientTLS dials the
	// other servers' API and raft, and the agents (mutual TLS, the
	// server's certificate as client certificate).
	TLS, PeerTLS, ClientTLS *tls.Config

	// KeyringDir holds the keys that seal the raft log and snapshots,
	// so volume secrets are never on disk in clear (see package
	// state/sealed). Empty means DataDir/KeyringDir for a single
	// server, created with its first key at the first start; a cluster
	// of more servers seals only when it is set, since every server
	// needs the same keys: create them on one server and copy the
	// directory (0600 files) to the others before their first start.
	// Unused in Dev mode, which writes nothing.
	KeyringDir string

	// Events receives the lifecycle lines ("[server] …"); nil prints
	// nothing.
	Events *events.Log
	// Logger receives diagnostics, raft's included; nil means none.
	Logger hclog.Logger
}

// DefaultJoinRetryMax bounds the time between two status calls to a
// server listed in Config.Join that does not answer yet.
const DefaultJoinRetryMax = 5 * time.Second

func (c Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: cluster config: "+format, append([]any{csi.ErrInvalidRequest}, args...)...)
	}
	if c.Dev {
		switch {
		case c.DataDir != "":
			return c, bad("Dev keeps the state in memory; it takes no DataDir (%s)", c.DataDir)
		case c.BootstrapExpect > 1 || len(c.Join) > 0:
			return c, bad("Dev runs a single server; it takes no BootstrapExpect above 1 and no Join")
		}
		c.BootstrapExpect = 1
		if c.ID == "" {
			c.ID = DevID
		}
	}
	switch {
	case c.DataDir == "" && !c.Dev:
		return c, bad("DataDir is required: the server keeps its ID and its raft state there")
	case c.BootstrapExpect < 1:
		return c, bad("BootstrapExpect is %d; set it to the number of servers in the cluster (3 or 5)", c.BootstrapExpect)
	case c.RaftAddr == "" && c.BootstrapExpect > 1:
		return c, bad("RaftAddr is required for a cluster of %d servers: the raft transport's listen address, for example 127.0.0.1:7648", c.BootstrapExpect)
	case c.HeartbeatTTL < 0:
		return c, bad("HeartbeatTTL %s is negative; use 0 for the default", c.HeartbeatTTL)
	case c.ShutdownTimeout < 0:
		return c, bad("ShutdownTimeout %s is negative; use 0 for the default", c.ShutdownTimeout)
	case c.ACL && c.ACLFile != "":
		return c, bad("ACL (tokens in the replicated state) and ACLFile (%s) are both set; choose one", c.ACLFile)
	}
	if c.RaftAddr != "" {
		if _, _, err := net.SplitHostPort(c.RaftAddr); err != nil {
			return c, bad("RaftAddr %q is not host:port: %v", c.RaftAddr, err)
		}
	}
	if c.RaftAdvertise != "" {
		if _, err := net.ResolveTCPAddr("tcp", c.RaftAdvertise); err != nil {
			return c, bad("RaftAdvertise %q is not host:port: %v", c.RaftAdvertise, err)
		}
	}
	if c.Advertise != "" {
		cl, err := api.NewClient(c.Advertise, nil)
		if err != nil {
			return c, fmt.Errorf("cluster config: Advertise: %w", err)
		}
		cl.Close()
	}
	if c.ID != "" {
		if err := csi.ValidateID("server ID", c.ID); err != nil {
			return c, fmt.Errorf("cluster config: %w", err)
		}
	}
	join, err := cleanJoin(c.Join)
	if err != nil {
		return c, err
	}
	c.Join = join
	if len(c.Join) == 0 && c.BootstrapExpect > 1 {
		return c, bad("BootstrapExpect is %d but Join lists no server; list the other servers' API addresses", c.BootstrapExpect)
	}
	if c.Raft == nil && c.BootstrapExpect == 1 {
		c.Raft = SingleRaftConfig()
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c, nil
}

// cleanJoin checks the Join addresses and drops blanks around them and
// repeats.
func cleanJoin(addrs []string) ([]string, error) {
	var join []string
	seen := map[string]bool{}
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, fmt.Errorf("%w: cluster config: Join holds an empty address; list the other servers' API addresses, host:port", csi.ErrInvalidRequest)
		}
		cl, err := api.NewClient(a, nil)
		if err != nil {
			return nil, fmt.Errorf("cluster config: Join: %w", err)
		}
		cl.Close()
		if !seen[a] {
			seen[a] = true
			join = append(join, a)
		}
	}
	return join, nil
}

// DevID is the server ID of a Dev server given none.
const DevID = "dev"

// SingleRaftConfig is the raft configuration of a single server: raft's
// defaults with short timeouts. A lone voter has no peer to wait for or
// to lose touch with, so its timeouts only delay the election at start.
func SingleRaftConfig() *raft.Config {
	c := raft.DefaultConfig()
	c.HeartbeatTimeout = 100 * time.Millisecond
	c.ElectionTimeout = 100 * time.Millisecond
	c.LeaderLeaseTimeout = 100 * time.Millisecond
	return c
}

// loadID returns the server's ID: the one kept in dir, or want (or a
// new random ID) written there. dir is created if missing.
func loadID(dir, want string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("cluster: create the data dir: %w", err)
	}
	path := filepath.Join(dir, IDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		kept := strings.TrimSpace(string(b))
		if err := csi.ValidateID("server ID", kept); err != nil {
			return "", fmt.Errorf("cluster: %s holds a bad server ID (fix or remove it, and the raft state next to it): %w", path, err)
		}
		if want != "" && want != kept {
			return "", fmt.Errorf("%w: cluster: data dir %s belongs to server %s, not %s; give the server its own data dir, or its ID",
				csi.ErrInvalidRequest, dir, kept, want)
		}
		return kept, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("cluster: read the server ID: %w", err)
	}
	id := want
	if id == "" {
		var r [4]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", fmt.Errorf("cluster: generate a server ID: %w", err)
		}
		id = "server-" + hex.EncodeToString(r[:])
	}
	if err := atomicfile.WriteBytes(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("cluster: keep the server ID in %s: %w", path, err)
	}
	return id, nil
}
