package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/agent"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cluster"
	"github.com/csikit/csikit/examples/refserver/demo"
	"github.com/csikit/csikit/examples/refserver/events"
	"github.com/csikit/csikit/examples/refserver/internal/atomicfile"
	"github.com/csikit/csikit/examples/refserver/server"
	"github.com/csikit/csikit/state"
)

// DefaultAgentAddress is where an agent's node service listens unless
// told otherwise.
const DefaultAgentAddress = "127.0.0.1:4747"

// stateFile is the server's state snapshot in its -data-dir.
const stateFile = "state.snap"

func (e *env) modeFlags(name, help string) *flag.FlagSet {
	fs := flag.NewFlagSet("refserver "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: refserver %s [flags]\n\n%s\n\nFlags:\n", name, help)
		fs.PrintDefaults()
	}
	return fs
}

// parseMode parses a run mode's flags; it returns false with the exit
// code when the mode should not run.
func (e *env) parseMode(fs *flag.FlagSet, args []string, code *int) bool {
	if err := fs.Parse(args); err != nil {
		*code = ExitUsage
		if errors.Is(err, flag.ErrHelp) {
			*code = ExitOK
		}
		return false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "%s: unexpected arguments %q; all settings are flags\n", fs.Name(), fs.Args())
		*code = ExitUsage
		return false
	}
	return true
}

func (e *env) modeFail(name string, err error) int {
	fmt.Fprintf(e.stderr, "refserver %s: %v\n", name, err)
	if errors.Is(err, csi.ErrInvalidRequest) || errors.Is(err, csi.ErrInvalidID) || errors.Is(err, hostpath.ErrInvalidConfig) {
		return ExitUsage
	}
	return ExitError
}

func (e *env) demo(args []string) int {
	fs := e.modeFlags("demo", "Runs a server and two node agents in this process, each with the hostpath plugin, and a volume's whole life: create, claim, mount, write, release, free. Then serves until interrupted.")
	dataDir := fs.String("data-dir", "", "directory for sockets and state (default: a temporary directory, removed at exit)")
	exitAfter := fs.Bool("exit-after-demo", false, "exit once the demo is done instead of serving")
	mount := fs.String("mount", string(hostpath.MountAuto), "hostpath mount method: auto, bind (needs root) or symlink")
	addr := fs.String("addr", "127.0.0.1:4646", "the server API's listen address")
	level := fs.String("log-level", "warn", "log level of diagnostics on stderr: trace, debug, info, warn, error")
	code := ExitOK
	if !e.parseMode(fs, args, &code) {
		return code
	}
	logger, err := newLogger("refserver", *level, e.stderr)
	if err != nil {
		return e.modeFail("demo", err)
	}
	_, err = demo.Run(e.ctx, demo.Config{
		DataDir: *dataDir, Out: e.stdout, ExitAfterDemo: *exitAfter, Mount: hostpath.MountMethod(*mount), Addr: *addr, Logger: logger,
	})
	if err != nil {
		return e.modeFail("demo", err)
	}
	return ExitOK
}

func (e *env) server(args []string) int {
	fs := e.modeFlags("server", "Runs the server: the HTTP API, csikit's router and server endpoints, and the claim release worker. Node agents register with it.\n"+
		"With -bootstrap-expect it is one server of a cluster replicating the state on raft (cluster mode).")
	addr := fs.String("addr", "127.0.0.1:4646", "the API's listen address")
	dataDir := fs.String("data-dir", "", "directory for the state snapshot, restored at start and written at exit (default: state in memory only); in cluster mode, the server's ID and raft state (required)")
	ttl := fs.Duration("heartbeat-ttl", server.DefaultHeartbeatTTL, "a node is down after this long without a heartbeat")
	level := fs.String("log-level", "warn", "log level of diagnostics on stderr: trace, debug, info, warn, error")
	expect := fs.Int("bootstrap-expect", 0, "cluster mode: the number of servers; the cluster forms once they all know each other")
	raftAddr := fs.String("raft-addr", "127.0.0.1:4800", "cluster mode: the raft transport's listen address")
	raftAdvertise := fs.String("raft-advertise", "", "cluster mode: the raft address other servers dial (default: -raft-addr)")
	advertise := fs.String("advertise", "", "cluster mode: the API address other servers reach this one at (default: -addr)")
	nodeID := fs.String("node-id", "", "cluster mode: this server's ID (default: kept in -data-dir, generated at the first start)")
	var join listFlag
	fs.Var(&join, "join", "cluster mode: the API address of another server, host:port; repeatable or comma-separated")
	code := ExitOK
	if !e.parseMode(fs, args, &code) {
		return code
	}
	logger, err := newLogger("refserver", *level, e.stderr)
	if err != nil {
		return e.modeFail("server", err)
	}
	log := events.New(e.stdout)
	if *expect != 0 {
		return e.clusterServer(cluster.Config{
			ID: *nodeID, DataDir: *dataDir, BootstrapExpect: *expect, RaftAddr: *raftAddr, RaftAdvertise: *raftAdvertise,
			Join: join, Advertise: *advertise, HeartbeatTTL: *ttl, Events: log, Logger: logger,
		}, *addr)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"join", len(join) > 0}, {"node-id", *nodeID != ""}, {"advertise", *advertise != ""}, {"raft-advertise", *raftAdvertise != ""}} {
		if f.set {
			return e.modeFail("server", fmt.Errorf("%w: -%s is a cluster mode flag; give -bootstrap-expect too", csi.ErrInvalidRequest, f.name))
		}
	}
	store, err := state.NewMemStore(state.Config{Logger: logger.Named("state")})
	if err != nil {
		return e.modeFail("server", err)
	}
	snap := ""
	if *dataDir != "" {
		snap = filepath.Join(*dataDir, stateFile)
		restored, err := restoreState(e.ctx, store, snap)
		if err != nil {
			return e.modeFail("server", err)
		}
		if restored {
			log.Printf("server", "state restored from %s", snap)
		}
	}
	srv, err := server.New(server.Config{
		Store: store, Applier: state.NewLocalApplier(store), HeartbeatTTL: *ttl, Events: log, Logger: logger,
	})
	if err != nil {
		return e.modeFail("server", err)
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return e.modeFail("server", err)
	}
	runErr := srv.Run(e.ctx, lis)
	if snap != "" {
		if err := saveState(store, snap); err != nil {
			runErr = errors.Join(runErr, err)
		} else {
			log.Printf("server", "state saved to %s", snap)
		}
	}
	if runErr != nil {
		return e.modeFail("server", runErr)
	}
	return ExitOK
}

// clusterServer runs the server in cluster mode.
func (e *env) clusterServer(cfg cluster.Config, addr string) int {
	if cfg.BootstrapExpect < 0 {
		return e.modeFail("server", fmt.Errorf("%w: -bootstrap-expect %d: give the number of servers (3 or 5)", csi.ErrInvalidRequest, cfg.BootstrapExpect))
	}
	if cfg.DataDir == "" {
		return e.modeFail("server", fmt.Errorf("%w: cluster mode needs -data-dir: the server keeps its ID and raft state there", csi.ErrInvalidRequest))
	}
	srv, err := cluster.New(cfg)
	if err != nil {
		return e.modeFail("server", err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return e.modeFail("server", err)
	}
	if err := srv.Run(e.ctx, lis); err != nil {
		return e.modeFail("server", err)
	}
	return ExitOK
}

// listFlag collects a repeatable flag whose values may also be
// comma-separated.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(s string) error {
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*f = append(*f, v)
		}
	}
	return nil
}

// restoreState loads the snapshot at path into store, if there is one.
func restoreState(ctx context.Context, store *state.MemStore, path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := store.Restore(ctx, f); err != nil {
		return false, fmt.Errorf("restore the state from %s (move it away to start empty): %w", path, err)
	}
	return true, nil
}

// saveState writes store's snapshot to path atomically. The snapshot
// holds volume secrets, so only the owner may read it.
func saveState(store *state.MemStore, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The temporary file is created owner-only (os.CreateTemp), and the
	// rename keeps its mode.
	return atomicfile.Write(path, func(w io.Writer) error {
		if err := store.Snapshot(ctx, w); err != nil {
			return fmt.Errorf("write the state snapshot: %w", err)
		}
		return nil
	})
}

// pluginsFlag collects repeated -plugin flags.
type pluginsFlag []agent.Plugin

func (f *pluginsFlag) String() string { return fmt.Sprint(len(*f)) }

func (f *pluginsFlag) Set(s string) error {
	p, err := agent.ParsePlugin(s)
	if err != nil {
		return err
	}
	*f = append(*f, p)
	return nil
}

func (e *env) agent(args []string) int {
	fs := e.modeFlags("agent", "Runs a node agent: it registers with the server, fingerprints its plugins, mounts claimed volumes and serves the server's calls over gRPC.")
	var servers listFlag
	fs.Var(&servers, "server", "the server's API address (default "+api.DefaultAddress+"); for a cluster, every server's, repeatable or comma-separated")
	nodeID := fs.String("node-id", "", "this node's ID (required)")
	addr := fs.String("addr", DefaultAgentAddress, "the node service's listen address: host:port or unix:///path")
	advertise := fs.String("advertise", "", "the node service's address as the server dials it (default: the listen address)")
	dataDir := fs.String("data-dir", "", "directory for the mounter's mounts and state, kept across restarts (default: $TMPDIR/refserver-NODE)")
	var plugins pluginsFlag
	fs.Var(&plugins, "plugin", "ID=ENDPOINT[:TYPE] a CSI plugin running on this node, repeatable; TYPE is controller, node or monolith (default)")
	hpDir := fs.String("hostpath-data-dir", "", "run the hostpath plugin in-process with this data dir (shared by the controller and the node plugins of one host)")
	hpMode := fs.String("hostpath-mode", string(hostpath.ModeMonolith), "the in-process hostpath plugin's mode: monolith, controller or node")
	hpMount := fs.String("hostpath-mount", string(hostpath.MountAuto), "the in-process hostpath plugin's mount method: auto, bind or symlink")
	hpPub := fs.Bool("hostpath-controller-publish", true, "the in-process hostpath plugin advertises PUBLISH_UNPUBLISH_VOLUME")
	hpStage := fs.Bool("hostpath-staging", true, "the in-process hostpath plugin advertises STAGE_UNSTAGE_VOLUME")
	heartbeat := fs.Duration("heartbeat", agent.DefaultHeartbeatInterval, "time between heartbeats (keep it well under the server's -heartbeat-ttl)")
	level := fs.String("log-level", "warn", "log level of diagnostics on stderr: trace, debug, info, warn, error")
	code := ExitOK
	if !e.parseMode(fs, args, &code) {
		return code
	}
	if *nodeID == "" {
		return e.modeFail("agent", fmt.Errorf("%w: -node-id is required", csi.ErrInvalidRequest))
	}
	if len(plugins) == 0 && *hpDir == "" {
		return e.modeFail("agent", fmt.Errorf("%w: give at least one -plugin, or -hostpath-data-dir to run the hostpath plugin in-process", csi.ErrInvalidRequest))
	}
	logger, err := newLogger("refserver-agent", *level, e.stderr)
	if err != nil {
		return e.modeFail("agent", err)
	}
	if len(servers) == 0 {
		servers = listFlag{api.DefaultAddress}
	}
	var clients []*api.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for _, addr := range servers {
		client, err := api.NewClient(addr, nil)
		if err != nil {
			return e.modeFail("agent", err)
		}
		clients = append(clients, client)
	}
	if *dataDir == "" {
		*dataDir = filepath.Join(os.TempDir(), "refserver-"+*nodeID)
	}
	cfg := agent.Config{
		NodeID: *nodeID, Servers: clients, DataDir: *dataDir, Plugins: plugins, Advertise: *advertise,
		HeartbeatInterval: *heartbeat, Events: events.New(e.stdout), Logger: logger,
	}
	if *hpDir != "" {
		cfg.Hostpath = &hostpath.Config{
			DataDir: *hpDir, Mode: hostpath.Mode(*hpMode), Mount: hostpath.MountMethod(*hpMount),
			ControllerPublish: *hpPub, Staging: *hpStage,
		}
	}
	a, err := agent.New(cfg)
	if err != nil {
		return e.modeFail("agent", err)
	}
	network, address := "tcp", *addr
	if strings.HasPrefix(address, "unix://") {
		network, address = "unix", strings.TrimPrefix(address, "unix://")
	}
	lis, err := net.Listen(network, address)
	if err != nil {
		return e.modeFail("agent", err)
	}
	if err := a.Run(e.ctx, lis); err != nil {
		return e.modeFail("agent", err)
	}
	return ExitOK
}
