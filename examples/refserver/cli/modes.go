package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/agent"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cluster"
	"github.com/csikit/csikit/examples/refserver/demo"
	"github.com/csikit/csikit/examples/refserver/events"
	"github.com/csikit/csikit/examples/refserver/server"
)

func (e *env) modeFlags(name, help, example string) *flag.FlagSet {
	fs := flag.NewFlagSet("refserver "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: refserver %s [flags]\n\n%s\n\nExample:\n  %s\n\nFlags:\n", name, help, example)
		fs.PrintDefaults()
	}
	return fs
}

// parseMode parses a run mode's flags; it returns false with the exit
// code when the mode should not run.
func (e *env) parseMode(fs *flag.FlagSet, args []string, code *int) bool {
	if wantsHelp(args) {
		printHelp(fs, e.stdout)
		*code = ExitOK
		return false
	}
	if err := parseFlags(fs, args); err != nil {
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

func (e *env) demo(ctx context.Context, args []string) int {
	fs := e.modeFlags("demo", "Runs a server and two node agents in this process, each with the hostpath plugin, and a volume's whole life: create, claim, mount, write, release, free. Then serves until interrupted. Its server runs in dev mode: the state is in memory and is lost at exit. "+
		"ACLs are on: the demo bootstraps a management token into management.token in its directory (mode 0600); client commands need it (-token or $"+TokenEnv+").",
		"refserver demo -exit-after-demo\n  refserver demo -placement\n  refserver demo -volume-ops")
	dataDir := fs.String("data-dir", "", "directory for sockets and state (default: a temporary directory, removed at exit)")
	exitAfter := fs.Bool("exit-after-demo", false, "exit once the demo is done instead of serving")
	placement := fs.Bool("placement", false, "run the placement demo instead: three nodes in two zones (hostpath -topology), a zonal volume refused on the other zone's node and claimed in its own; exits when done")
	volumeOps := fs.Bool("volume-ops", false, "run the volume operations demo instead: create, write through a mount, snapshot, expand online, restore into a new volume and read the file back; exits when done")
	mount := fs.String("mount", string(hostpath.MountAuto), "hostpath mount method: auto, bind (needs root) or symlink")
	addr := fs.String("addr", DefaultServerAddress, "the server API's listen address")
	level := fs.String("log-level", "warn", "log level of diagnostics on stderr: trace, debug, info, warn, error")
	logJSON := fs.Bool("log-json", false, "log diagnostics on stderr as JSON lines")
	code := ExitOK
	if !e.parseMode(fs, args, &code) {
		return code
	}
	logger, err := newLogger("refserver", *level, *logJSON, e.stderr)
	if err != nil {
		return e.modeFail("demo", err)
	}
	cfg := demo.Config{
		DataDir: *dataDir, Out: e.stdout, ExitAfterDemo: *exitAfter, Mount: hostpath.MountMethod(*mount), Addr: *addr, Logger: logger,
	}
	switch {
	case *placement && *volumeOps:
		return e.modeFail("demo", fmt.Errorf("%w: -placement and -volume-ops are two demos; choose one", csi.ErrInvalidRequest))
	case *placement:
		_, err = demo.RunPlacement(ctx, cfg)
	case *volumeOps:
		_, err = demo.RunVolumeOps(ctx, cfg)
	default:
		_, err = demo.Run(ctx, cfg)
	}
	if err != nil {
		return e.modeFail("demo", err)
	}
	return ExitOK
}

func (e *env) server(ctx context.Context, args []string) int {
	fs := e.modeFlags("server", "Runs the server: the HTTP API, csikit's router and server endpoints, and the claim release worker. Node agents register with it.\n"+
		"By default its state is durable: a one-voter raft cluster on boltdb in -data-dir, so every acknowledged write survives a crash. "+
		"-dev keeps the state in memory instead. With -bootstrap-expect N it is one server of an N-server raft cluster (cluster mode).",
		"refserver server -data-dir /var/lib/refserver\n  refserver server -dev\n  refserver server -data-dir /var/lib/refserver -bootstrap-expect 3 -raft-addr 10.0.0.1:7648 -join 10.0.0.2:7646,10.0.0.3:7646")
	addr := fs.String("addr", DefaultServerAddress, "the API's listen address")
	dataDir := fs.String("data-dir", "", "directory for the server's ID and its raft state (default "+defaultDataDir()+")")
	dev := fs.Bool("dev", false, "keep the state in memory only and write nothing: for tests and throwaway runs")
	ttl := fs.Duration("heartbeat-ttl", server.DefaultHeartbeatTTL, "a node is down after this long without a heartbeat")
	level := fs.String("log-level", "warn", "log level of diagnostics on stderr: trace, debug, info, warn, error")
	logJSON := fs.Bool("log-json", false, "log diagnostics on stderr as JSON lines")
	expect := fs.Int("bootstrap-expect", 1, "the number of servers; above 1, cluster mode: the cluster forms once they all know each other")
	raftAddr := fs.String("raft-addr", "", "cluster mode: the raft transport's listen address (default "+DefaultRaftAddress+"; a single server needs none)")
	raftAdvertise := fs.String("raft-advertise", "", "cluster mode: the raft address other servers dial (default: -raft-addr)")
	advertise := fs.String("advertise", "", "cluster mode: the API address other servers reach this one at (default: -addr)")
	nodeID := fs.String("node-id", "", "this server's ID (default: kept in -data-dir, generated at the first start)")
	var join listFlag
	fs.Var(&join, "join", "cluster mode: the API address of another server, host:port; repeatable or comma-separated")
	keyringDir := keyringDirFlag(fs)
	acl := fs.Bool("acl", false, "turn ACLs on with the tokens kept (by hash) in the replicated state, the same on every server: "+
		"make the first with \"refserver acl bootstrap\"; not with -acl-file")
	token, aclFile, tf := clusterTokenFlag(fs), fs.String("acl-file", "", "turn ACLs on with this file of token policies; a missing one is bootstrapped with a management token, printed once"),
		addTLSFlags(fs, "server", "the API, raft (mutual TLS between servers) and its calls to the agents (mutual TLS)")
	code := ExitOK
	if !e.parseMode(fs, args, &code) {
		return code
	}
	logger, err := newLogger("refserver", *level, *logJSON, e.stderr)
	if err != nil {
		return e.modeFail("server", err)
	}
	if *ttl <= 0 {
		return e.modeFail("server", fmt.Errorf("%w: -heartbeat-ttl %s: give a positive duration such as 6s", csi.ErrInvalidRequest, *ttl))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cfg := cluster.Config{
		ID: *nodeID, DataDir: *dataDir, Dev: *dev, BootstrapExpect: *expect, RaftAddr: *raftAddr, RaftAdvertise: *raftAdvertise,
		Join: join, Advertise: *advertise, HeartbeatTTL: *ttl, Events: events.New(e.stdout), Logger: logger, ClusterToken: clusterToken(*token),
		ACLFile: *aclFile, ACL: *acl, KeyringDir: *keyringDir,
	}
	if err := checkServerFlags(&cfg, set); err != nil {
		return e.modeFail("server", err)
	}
	if err := checkAddresses(cfg); err != nil {
		return e.modeFail("server", err)
	}
	if !*dev && cfg.DataDir == "" {
		cfg.DataDir = defaultDataDir()
	}
	warnOldState(cfg)
	if err := tf.server(&cfg); err != nil {
		return e.modeFail("server", err)
	}
	srv, err := cluster.New(cfg)
	if err != nil {
		return e.modeFail("server", err)
	}
	lis, err := listen("tcp", *addr, "-addr")
	if err != nil {
		return e.modeFail("server", err)
	}
	if err := srv.Run(ctx, lis); err != nil {
		return e.modeFail("server", err)
	}
	return ExitOK
}

// checkServerFlags checks the server flags that go together, set
// naming those given, and fills in the cluster mode's raft address.
func checkServerFlags(cfg *cluster.Config, set map[string]bool) error {
	switch {
	case cfg.BootstrapExpect < 1:
		return fmt.Errorf("%w: -bootstrap-expect %d: give the number of servers (1, or 3 or 5 for a cluster)", csi.ErrInvalidRequest, cfg.BootstrapExpect)
	case cfg.Dev && set["data-dir"]:
		return fmt.Errorf("%w: -dev keeps the state in memory; it takes no -data-dir", csi.ErrInvalidRequest)
	case cfg.Dev && set["keyring-dir"]:
		return fmt.Errorf("%w: -dev writes nothing, so it seals nothing; it takes no -keyring-dir", csi.ErrInvalidRequest)
	case cfg.Dev && cfg.BootstrapExpect > 1:
		return fmt.Errorf("%w: -dev runs a single server; it takes no -bootstrap-expect", csi.ErrInvalidRequest)
	case cfg.BootstrapExpect == 1:
		for _, f := range []string{"join", "advertise", "raft-addr", "raft-advertise"} {
			if set[f] {
				return fmt.Errorf("%w: -%s is a cluster mode flag; give -bootstrap-expect 3 (or 5) too", csi.ErrInvalidRequest, f)
			}
		}
	case !set["data-dir"]:
		return fmt.Errorf("%w: cluster mode needs -data-dir: each server keeps its ID and raft state in a directory of its own", csi.ErrInvalidRequest)
	case cfg.RaftAddr == "":
		cfg.RaftAddr = DefaultRaftAddress
	}
	return nil
}

// warnOldState tells of a state file of an older refserver in the
// data dir of a durable server.
func warnOldState(cfg cluster.Config) {
	if cfg.Dev {
		return
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, oldStateFile)); err == nil {
		cfg.Events.Printf("server", "%s is the state file of an older refserver, saved only at exit; it is not read: the state now lives in the raft log in %s",
			filepath.Join(cfg.DataDir, oldStateFile), filepath.Join(cfg.DataDir, cluster.RaftDir))
	}
}

// Default listen addresses: ports 7646 to 7648, clear of Nomad's
// 4646-4648 and Consul's 8300-8600, which share this audience's
// machines.
const (
	DefaultServerAddress = "127.0.0.1:7646"
	DefaultAgentAddress  = "127.0.0.1:7647"
	DefaultRaftAddress   = "127.0.0.1:7648"
)

// oldStateFile is where refserver kept its state before the raft log:
// a snapshot written only at a clean exit.
const oldStateFile = "state.snap"

// defaultDataDir is the server's -data-dir when none is given:
// $XDG_STATE_HOME/refserver, or ~/.local/state/refserver.
func defaultDataDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "refserver")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "refserver")
	}
	return filepath.Join(os.TempDir(), "refserver-state")
}

// checkAddresses checks the address flags, so that a bad one is named
// by its flag rather than by the cluster.Config field it fills.
func checkAddresses(cfg cluster.Config) error {
	for _, f := range []struct{ flag, value string }{{"-raft-addr", cfg.RaftAddr}, {"-raft-advertise", cfg.RaftAdvertise}} {
		if f.value == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(f.value); err != nil {
			return fmt.Errorf("%w: %s %q is not HOST:PORT, for example 10.0.0.1:7648", csi.ErrInvalidRequest, f.flag, f.value)
		}
	}
	for _, f := range append([]struct{ flag, value string }{{"-advertise", cfg.Advertise}}, joinFlags(cfg.Join)...) {
		if f.value == "" {
			continue
		}
		cl, err := api.NewClient(f.value, nil)
		if err != nil {
			return fmt.Errorf("%w: %s %q is not a server API address: give HOST:PORT or http://HOST:PORT", csi.ErrInvalidRequest, f.flag, f.value)
		}
		cl.Close()
	}
	return nil
}

func joinFlags(join []string) []struct{ flag, value string } {
	out := make([]struct{ flag, value string }, len(join))
	for i, j := range join {
		out[i].flag, out[i].value = "-join", j
	}
	return out
}

// listenNode listens on the agent's -addr: host:port or unix:///path.
func listenNode(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		return listen("unix", path, "-addr")
	}
	return listen("tcp", addr, "-addr")
}

// listen listens on address, and on "address already in use" says
// which flag moves it.
func listen(network, address, flagName string) (net.Listener, error) {
	lis, err := net.Listen(network, address)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s is in use by another process: pass %s HOST:PORT to listen elsewhere (%w)", address, flagName, err)
	}
	return lis, err
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

func (e *env) agent(ctx context.Context, args []string) int {
	fs := e.modeFlags("agent", "Runs a node agent: it registers with the server, fingerprints its plugins, mounts claimed volumes and serves the server's calls over gRPC.",
		"refserver agent -server 127.0.0.1:7646 -node-id node-1 -hostpath-data-dir /var/lib/refserver-plugin")
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
	metricsAddr := fs.String("metrics-addr", "", "serve the agent's metrics at http://HOST:PORT/v1/metrics (Prometheus text, plain HTTP: bind it where only the scraper reaches); empty: none")
	heartbeat := fs.Duration("heartbeat", agent.DefaultHeartbeatInterval, "time between heartbeats (keep it well under the server's -heartbeat-ttl)")
	level := fs.String("log-level", "warn", "log level of diagnostics on stderr: trace, debug, info, warn, error")
	logJSON := fs.Bool("log-json", false, "log diagnostics on stderr as JSON lines")
	token, tf := clusterTokenFlag(fs), addTLSFlags(fs, "agent", "the node service (mutual TLS: only the servers' certificates get in); the agent then calls the servers over https")
	code := ExitOK
	if !e.parseMode(fs, args, &code) {
		return code
	}
	if *nodeID == "" {
		return e.modeFail("agent", fmt.Errorf("%w: -node-id is required", csi.ErrInvalidRequest))
	}
	if err := validateIDs(idNode("-node-id", *nodeID)); err != nil {
		return e.modeFail("agent", err)
	}
	if *heartbeat <= 0 {
		return e.modeFail("agent", fmt.Errorf("%w: -heartbeat %s: give a positive duration such as 2s", csi.ErrInvalidRequest, *heartbeat))
	}
	if len(plugins) == 0 && *hpDir == "" {
		return e.modeFail("agent", fmt.Errorf("%w: give at least one -plugin, or -hostpath-data-dir to run the hostpath plugin in-process", csi.ErrInvalidRequest))
	}
	logger, err := newLogger("refserver-agent", *level, *logJSON, e.stderr)
	if err != nil {
		return e.modeFail("agent", err)
	}
	clients, b, err := dialServers(servers, tf)
	defer closeClients(clients)
	if err != nil {
		return e.modeFail("agent", err)
	}
	if *dataDir == "" {
		*dataDir = filepath.Join(os.TempDir(), "refserver-"+*nodeID)
	}
	cfg := agent.Config{
		NodeID: *nodeID, Servers: clients, DataDir: *dataDir, Plugins: plugins, Advertise: *advertise,
		HeartbeatInterval: *heartbeat, Events: events.New(e.stdout), Logger: logger, ClusterToken: clusterToken(*token), TLS: b.agent(),
	}
	if *hpDir != "" {
		cfg.Hostpath = &hostpath.Config{
			DataDir: *hpDir, Mode: hostpath.Mode(*hpMode), Mount: hostpath.MountMethod(*hpMount),
			ControllerPublish: *hpPub, Staging: *hpStage,
		}
	}
	am, err := newAgentMetrics(*metricsAddr, &cfg)
	if err != nil {
		return e.modeFail("agent", err)
	}
	a, err := agent.New(cfg)
	if err != nil {
		return e.modeFail("agent", err)
	}
	err = am.run(ctx, *nodeID, cfg.Events, func(ctx context.Context) error {
		lis, err := listenNode(*addr)
		if err != nil {
			return err
		}
		return a.Run(ctx, lis)
	})
	if err != nil {
		return e.modeFail("agent", err)
	}
	return ExitOK
}

// dialServers returns a client of each server address (the default
// address when none is given), over https with the agent's
// certificate when tf sets TLS, and the agent's TLS files. On error it
// returns the clients made so far, for closeClients.
func dialServers(servers []string, tf *tlsFlags) ([]*api.Client, agentTLS, error) {
	b, err := tf.load()
	if err != nil {
		return nil, agentTLS{}, err
	}
	var conf *tls.Config
	if b != nil {
		conf = b.Client()
	}
	if len(servers) == 0 {
		servers = []string{api.DefaultAddress}
	}
	var clients []*api.Client
	for _, addr := range servers {
		client, err := api.NewTLSClient(addr, conf)
		if err != nil {
			return clients, agentTLS{}, err
		}
		clients = append(clients, client)
	}
	return clients, agentTLS{b}, nil
}

func closeClients(clients []*api.Client) {
	for _, c := range clients {
		c.Close()
	}
}
