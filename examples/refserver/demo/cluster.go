package demo

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/agent"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/events"
	"github.com/csikit/csikit/examples/refserver/server"
	"github.com/csikit/csikit/state"
)

// PluginID is the ID of the hostpath plugin every node of a Cluster
// runs.
const PluginID = agent.DefaultHostpathPluginID

// ClusterConfig configures a Cluster.
type ClusterConfig struct {
	// Dir holds everything: the server's nothing (its state is in
	// memory), each agent's DataDir (Dir/<node>) with its hostpath
	// socket, and the plugin's shared data dir (Dir/plugin). Keep it
	// short: unix socket paths are limited to about 108 bytes. Required.
	Dir string
	// Nodes are the node IDs; nil means node-1 and node-2. The first
	// node runs the hostpath plugin as a monolith (controller and node),
	// the others as node plugins; all share Dir/plugin, as a hostpath
	// controller and its node plugins on one host must.
	Nodes []string
	// Mount is the hostpath plugin's mount method; "" means auto (bind
	// mounts as root, symbolic links otherwise).
	Mount hostpath.MountMethod
	// Topologies gives nodes a hostpath topology (hostpath.Config.Topology),
	// by node ID, such as {"node-3": {"zone": "b"}}; a node not listed
	// has none. The plugin then advertises
	// VOLUME_ACCESSIBILITY_CONSTRAINTS and csikit keeps each volume to
	// the nodes of its topology.
	Topologies map[string]map[string]string
	// Addr is the server API's listen address; "" means 127.0.0.1:0.
	Addr string
	// Now, HeartbeatTTL: see server.Config. HeartbeatInterval: see
	// agent.Config.
	Now               func() time.Time
	HeartbeatTTL      time.Duration
	HeartbeatInterval time.Duration
	// Events receives every component's lifecycle lines.
	Events *events.Log
	// Logger receives diagnostics; nil means none.
	Logger hclog.Logger
	// TLS writes a CA and certificates into Dir/tls and runs everything
	// over TLS: the API (https), the server's calls to the agents and
	// the agents' node services (mutual TLS). CAFile names the CA.
	TLS bool
	// ACL turns ACLs on: the server keeps its tokens in its state
	// (server.NewStateACL), a management token is bootstrapped at the
	// start and written to TokenFile (mode 0600), and Client carries
	// it. API calls without a token are refused; the agents need none,
	// they present their node secrets.
	ACL bool
}

// TokenFileName is the file in ClusterConfig.Dir that holds the
// management token of a Cluster with ACL.
const TokenFileName = "management.token"

// Cluster is a server and its node agents running in this process,
// talking over loopback TCP exactly as separate processes would: agents
// and clients call the server's HTTP API, the server calls the agents'
// node services over csikit's gRPC transport. The demo runs one; tests
// of the server and agent modes do too.
type Cluster struct {
	cfg ClusterConfig
	url string
	// client carries the management token with ACL; agentClient is the
	// same without it, for the agents.
	client, agentClient *api.Client
	server              *server.Server
	// token is the cluster token, made at random for the cluster's
	// lifetime: the agents refuse node calls that do not carry it.
	token string
	tls   clusterTLS

	stopServer context.CancelFunc
	serverDone chan error

	mu     sync.Mutex
	agents map[string]*runningAgent
	order  []string
}

type runningAgent struct {
	agent *agent.Agent
	stop  context.CancelFunc
	done  chan error
}

// StartCluster starts the server and the agents and returns once the
// hostpath plugin is healthy on every node (a blocking query on the
// server's plugins), or ctx ends. On error, whatever started is stopped.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: cluster: Dir is required", csi.ErrInvalidRequest)
	}
	if cfg.Nodes == nil {
		cfg.Nodes = []string{"node-1", "node-2"}
	}
	if len(cfg.Nodes) == 0 {
		return nil, fmt.Errorf("%w: cluster: give at least one node", csi.ErrInvalidRequest)
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	c := &Cluster{cfg: cfg, agents: make(map[string]*runningAgent), token: rand.Text()}
	var err error
	if cfg.TLS {
		if c.tls, err = initTLS(cfg.Dir); err != nil {
			return nil, err
		}
	}

	if err := c.startServer(); err != nil {
		return nil, err
	}
	if cfg.ACL {
		if err := c.bootstrapACL(ctx); err != nil {
			c.shutdown()
			return nil, err
		}
	}

	for i, id := range cfg.Nodes {
		mode := hostpath.ModeNode
		if i == 0 {
			mode = hostpath.ModeMonolith
		}
		if err := c.startAgent(id, mode); err != nil {
			c.shutdown()
			return nil, err
		}
	}
	want := len(cfg.Nodes)
	_, err = c.client.WaitPlugin(ctx, PluginID, func(p *csi.Plugin) bool {
		return p != nil && p.ControllersHealthy >= 1 && p.NodesHealthy == want
	})
	if err != nil {
		c.shutdown()
		return nil, fmt.Errorf("waiting for plugin %s to be healthy on %d nodes: %w", PluginID, want, err)
	}
	return c, nil
}

// startServer starts the server and makes the clients of its API.
func (c *Cluster) startServer() error {
	scfg := server.Config{
		Now: c.cfg.Now, HeartbeatTTL: c.cfg.HeartbeatTTL, Events: c.cfg.Events, Logger: c.cfg.Logger.Named("server"),
		ClusterToken: c.token, TLS: c.tls.api, NodeTLS: c.tls.node,
	}
	if c.cfg.ACL {
		st, err := state.NewMemStore(state.Config{})
		if err != nil {
			return err
		}
		scfg.Store, scfg.Applier, scfg.ACL = st, state.NewLocalApplier(st), server.NewStateACL(st)
	}
	srv, err := server.New(scfg)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", c.cfg.Addr)
	if err != nil {
		return fmt.Errorf("server API: %w", err)
	}
	c.server, c.url = srv, c.tls.scheme()+lis.Addr().String()
	sctx, stop := context.WithCancel(context.Background())
	c.stopServer, c.serverDone = stop, make(chan error, 1)
	go func() { c.serverDone <- srv.Run(sctx, lis) }()
	if c.agentClient, err = api.NewTLSClient(c.url, c.tls.client); err != nil {
		c.shutdown()
		return err
	}
	c.client = c.agentClient
	return nil
}

// bootstrapACL makes the management token, writes it to TokenFile and
// gives it to Client.
func (c *Cluster) bootstrapACL(ctx context.Context) error {
	tok, err := c.agentClient.BootstrapACL(ctx)
	if err != nil {
		return fmt.Errorf("ACL bootstrap: %w", err)
	}
	// A file left by an earlier run may have another mode.
	if err := os.Remove(c.TokenFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ACL bootstrap: %w", err)
	}
	if err := os.WriteFile(c.TokenFile(), []byte(tok.Token+"\n"), 0o600); err != nil {
		return fmt.Errorf("ACL bootstrap: %w", err)
	}
	c.client = c.agentClient.WithToken(tok.Token)
	c.cfg.Events.Printf("demo", "ACLs are on: a management token is in %s (mode 0600); API calls without a token are refused", c.TokenFile())
	return nil
}

// TokenFile is the file of the management token of a Cluster with ACL.
func (c *Cluster) TokenFile() string { return filepath.Join(c.cfg.Dir, TokenFileName) }

func (c *Cluster) startAgent(id string, mode hostpath.Mode) error {
	a, err := agent.New(agent.Config{
		NodeID:       id,
		Server:       c.agentClient,
		DataDir:      filepath.Join(c.cfg.Dir, id),
		ClusterToken: c.token,
		TLS:          c.tls.agent,
		Hostpath: &hostpath.Config{
			DataDir: c.PluginDataDir(), Mode: mode, ControllerPublish: true, Staging: true, Mount: c.cfg.Mount,
			Topology: c.cfg.Topologies[id],
		},
		HeartbeatInterval: c.cfg.HeartbeatInterval,
		MetricSink:        c.server.Metrics().Sink(), // one /v1/metrics for the whole demo
		Events:            c.cfg.Events,
		Logger:            c.cfg.Logger.Named(id),
	})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("agent %s: node service: %w", id, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ra := &runningAgent{agent: a, stop: stop, done: make(chan error, 1)}
	go func() { ra.done <- a.Run(ctx, lis) }()
	c.mu.Lock()
	c.agents[id] = ra
	c.order = append(c.order, id)
	c.mu.Unlock()
	return nil
}

// URL returns the server API's base URL.
func (c *Cluster) URL() string { return c.url }

// Client returns a client of the server API.
func (c *Cluster) Client() *api.Client { return c.client }

// Server returns the server.
func (c *Cluster) Server() *server.Server { return c.server }

// PluginDataDir is the hostpath plugin's data dir, shared by the nodes:
// volume V's files are in PluginDataDir()/volumes/<V's external ID>.
func (c *Cluster) PluginDataDir() string { return filepath.Join(c.cfg.Dir, "plugin") }

// Agent returns a running agent, or nil.
func (c *Cluster) Agent(id string) *agent.Agent {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ra := c.agents[id]; ra != nil {
		return ra.agent
	}
	return nil
}

// StopAgent stops one agent, as if its process ended: its heartbeats
// stop and its plugin registry reports its plugins gone. Its mounts
// stay.
func (c *Cluster) StopAgent(id string) error {
	c.mu.Lock()
	ra := c.agents[id]
	delete(c.agents, id)
	c.mu.Unlock()
	if ra == nil {
		return fmt.Errorf("%w: no running agent %s", csi.ErrNodeNotFound, id)
	}
	ra.stop()
	return <-ra.done
}

// Drain releases every allocation that holds a live claim and waits
// until no volume holds any claim: the claim worker has unmounted
// (through the node agents) and detached (through the controller) every
// volume, the normal release path. It returns when ctx ends, naming
// what is left.
func (c *Cluster) Drain(ctx context.Context) error {
	vols, _, err := c.client.Volumes(ctx, "", "", nil)
	if err != nil {
		return err
	}
	released := map[string]bool{}
	for _, v := range vols {
		for _, claims := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims} {
			for alloc := range claims {
				if released[alloc] {
					continue
				}
				released[alloc] = true
				if _, err := c.client.Release(ctx, alloc); err != nil {
					return fmt.Errorf("release allocation %s: %w", alloc, err)
				}
			}
		}
	}
	q := &api.QueryOptions{}
	var left []string
	for {
		vols, meta, err := c.client.Volumes(ctx, "", "", q)
		if err != nil && len(left) > 0 {
			return fmt.Errorf("claims still being released (%v): %s", err, strings.Join(left, "; "))
		}
		if err != nil {
			return fmt.Errorf("waiting for claims to be released: %w", err)
		}
		left = left[:0]
		for _, v := range vols {
			for alloc, cl := range v.PastClaims {
				left = append(left, fmt.Sprintf("%s/%s by %s (%s: %s)", v.Namespace, v.ID, alloc, cl.State, cl.LastError))
			}
		}
		if len(left) == 0 {
			return nil
		}
		sort.Strings(left)
		q.WaitIndex = meta.Index
	}
}

// Close drains the cluster (bounded by ctx), then stops the agents and
// the server. Mounts left by a drain that did not finish are reported,
// not forced.
func (c *Cluster) Close(ctx context.Context) error {
	var errs []error
	if err := c.Drain(ctx); err != nil {
		errs = append(errs, fmt.Errorf("drain: %w", err))
	}
	errs = append(errs, c.shutdown())
	c.client.Close()
	return errors.Join(errs...)
}

// shutdown stops the agents (last started first) and the server.
func (c *Cluster) shutdown() error {
	c.mu.Lock()
	order := c.order
	c.order = nil
	c.mu.Unlock()
	var errs []error
	for i := len(order) - 1; i >= 0; i-- {
		c.mu.Lock()
		ra := c.agents[order[i]]
		delete(c.agents, order[i])
		c.mu.Unlock()
		if ra == nil {
			continue
		}
		ra.stop()
		if err := <-ra.done; err != nil {
			errs = append(errs, err)
		}
	}
	if c.stopServer != nil {
		c.stopServer()
		if err := <-c.serverDone; err != nil {
			errs = append(errs, err)
		}
		c.stopServer = nil
	}
	return errors.Join(errs...)
}

// removeIfNoMounts removes dir unless something is still mounted under
// it: removing through a bind mount would delete a volume's files.
func removeIfNoMounts(dir string) error {
	left, err := MountsUnder(dir)
	if err != nil {
		return fmt.Errorf("check mounts under %s before removing it: %w", dir, err)
	}
	if len(left) > 0 {
		return fmt.Errorf("%d mounts are left under %s (%s); not removing it: unmount them by hand", len(left), dir, strings.Join(left, ", "))
	}
	return os.RemoveAll(dir)
}
