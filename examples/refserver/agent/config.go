package agent

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/events"
)

// DefaultHeartbeatInterval is the time between two heartbeats: a third
// of the server's default TTL, so one lost heartbeat does not mark the
// node down.
const DefaultHeartbeatInterval = 2 * time.Second

// LeaveTimeout bounds the calls that tell the servers the agent stops.
const LeaveTimeout = 2 * time.Second

// DefaultHostpathPluginID is the plugin ID of the in-process hostpath
// plugin.
const DefaultHostpathPluginID = "hostpath"

// Plugin is a CSI plugin instance already running on the node, on a
// unix socket.
type Plugin struct {
	// ID is the plugin ID the server knows it by (csi.ValidatePluginID).
	ID string
	// Type is the services it serves: controller, node or monolith.
	Type csi.PluginType
	// Endpoint is its unix socket: a path or unix:///path.
	Endpoint string
}

// ParsePlugin parses the agent's -plugin flag: "ID=ENDPOINT[:TYPE]",
// for example "hostpath=unix:///run/csi/hostpath.sock:node". TYPE is
// controller, node or monolith (the default). Text after the last colon
// that is a plain word (letters only) is a TYPE, and one that is none
// of the three is refused rather than taken as part of the socket path;
// other text (/run/a:b.sock) is part of the path.
func ParsePlugin(s string) (Plugin, error) {
	id, rest, ok := strings.Cut(s, "=")
	if !ok || rest == "" {
		return Plugin{}, fmt.Errorf("%w: plugin %q: want ID=ENDPOINT[:TYPE], for example hostpath=unix:///run/csi.sock:monolith", csi.ErrInvalidRequest, s)
	}
	p := Plugin{ID: id, Type: csi.PluginTypeMonolith, Endpoint: rest}
	if i := strings.LastIndex(rest, ":"); i >= 0 && isWord(rest[i+1:]) {
		t := csi.PluginType(rest[i+1:])
		if !t.Valid() {
			return Plugin{}, fmt.Errorf("%w: plugin %s: type %q is not controller, node or monolith", csi.ErrInvalidRequest, id, rest[i+1:])
		}
		p.Type, p.Endpoint = t, rest[:i]
	}
	return p, p.validate()
}

// isWord reports whether s is letters only, as a plugin TYPE is.
func isWord(s string) bool {
	return s != "" && strings.IndexFunc(s, func(r rune) bool { return r < 'a' || r > 'z' }) < 0
}

func (p Plugin) validate() error {
	if err := csi.ValidatePluginID(p.ID); err != nil {
		return fmt.Errorf("plugin %q: %w", p.ID, err)
	}
	if !p.Type.Valid() {
		return fmt.Errorf("%w: plugin %s: type %q is not controller, node or monolith", csi.ErrInvalidRequest, p.ID, p.Type)
	}
	if _, err := hostpath.SocketPath(p.Endpoint); err != nil {
		return fmt.Errorf("%w: plugin %s: %v", csi.ErrInvalidRequest, p.ID, err)
	}
	return nil
}

// Config configures an Agent.
type Config struct {
	// NodeID is the host's ID of this node (csi.ValidateNodeID).
	// Required.
	NodeID string
	// Server is the client of the server's API. Required, unless
	// Servers is given.
	Server *api.Client
	// Servers are clients of every server of a cluster (package
	// cluster), after Server if both are given. Each server keeps its
	// own node liveness and addresses, so the agent registers and
	// heartbeats with every one of them; a plugin report is a replicated
	// write, so it goes to the first server that takes it.
	Servers []*api.Client
	// DataDir holds the mounter's mount root (DataDir/mnt) and state
	// (DataDir/state), and the in-process hostpath plugin's socket.
	// Required; it must survive a restart of the agent, which then
	// resumes what is mounted.
	DataDir string

	// Plugins are plugin instances already running on the node.
	Plugins []Plugin
	// Hostpath, if set, runs the hostpath plugin in-process for the
	// agent's lifetime and registers it as HostpathPluginID. Its NodeID
	// defaults to the agent's and its Endpoint to DataDir/hostpath.sock.
	Hostpath *hostpath.Config
	// HostpathPluginID is the in-process hostpath plugin's ID; empty
	// means DefaultHostpathPluginID.
	HostpathPluginID string

	// Advertise is the gRPC target the server dials to reach this
	// agent; empty means the listener's address.
	Advertise string
	// HeartbeatInterval is the time between heartbeats; 0 means
	// DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// FingerprintInterval is the time between two fingerprints of a
	// healthy plugin; 0 means fingerprint.DefaultInterval.
	FingerprintInterval time.Duration
	// ClusterToken is the per-cluster secret the servers send with
	// every call to this agent's node service; a call without it is
	// refused before it reaches the mounter or a plugin. Empty accepts
	// any caller that reaches the listener (tests): a real deployment
	// sets it on servers and agents alike.
	ClusterToken string
	// TLS, if set, serves the node service over mutual TLS with this
	// configuration (tlsconf's MutualServer): only callers with a
	// client certificate its ClientCAs signed (the servers) get in. It
	// may be combined with ClusterToken.
	TLS *tls.Config
	// NoSync skips fsync of the mounter's state (tests, throwaway nodes).
	NoSync bool
	// MetricSink receives the plugin clients' call latencies
	// (metrics.PluginRPCLatency) and the mounter's counts; nil emits
	// nothing.
	MetricSink metrics.Sink
	// Clock times the heartbeats, the registration retries and the
	// plugin registry's intervals; nil means the real clock. Tests pass
	// a *clock.Fake.
	Clock clock.Clock

	// Events receives the lifecycle lines ("[node-1] …"); nil prints
	// nothing.
	Events *events.Log
	// Logger receives diagnostics; nil means no logging.
	Logger hclog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if err := csi.ValidateNodeID(c.NodeID); err != nil {
		return c, fmt.Errorf("agent config: %w", err)
	}
	if c.Server == nil && len(c.Servers) == 0 {
		return c, fmt.Errorf("%w: agent config: Server (the API client) is required", csi.ErrInvalidRequest)
	}
	if slices.Contains(c.Servers, nil) {
		return c, fmt.Errorf("%w: agent config: Servers holds a nil client", csi.ErrInvalidRequest)
	}
	if c.DataDir == "" {
		return c, fmt.Errorf("%w: agent %s: DataDir is required: give a directory that survives restarts", csi.ErrInvalidRequest, c.NodeID)
	}
	dir, err := filepath.Abs(c.DataDir)
	if err != nil {
		return c, fmt.Errorf("%w: agent %s: DataDir %q: %v", csi.ErrInvalidRequest, c.NodeID, c.DataDir, err)
	}
	c.DataDir = dir
	if c.HeartbeatInterval < 0 || c.FingerprintInterval < 0 {
		return c, fmt.Errorf("%w: agent %s: intervals must not be negative", csi.ErrInvalidRequest, c.NodeID)
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.HostpathPluginID == "" {
		c.HostpathPluginID = DefaultHostpathPluginID
	}
	seen := map[string]bool{}
	for _, p := range c.Plugins {
		if err := p.validate(); err != nil {
			return c, fmt.Errorf("agent %s: %w", c.NodeID, err)
		}
		seen[p.ID] = true
	}
	if c.Hostpath != nil {
		if seen[c.HostpathPluginID] {
			return c, fmt.Errorf("%w: agent %s: plugin %s is given twice (in Plugins and as the in-process hostpath plugin)", csi.ErrInvalidRequest, c.NodeID, c.HostpathPluginID)
		}
		if err := csi.ValidatePluginID(c.HostpathPluginID); err != nil {
			return c, fmt.Errorf("agent %s: hostpath plugin: %w", c.NodeID, err)
		}
		hp := *c.Hostpath
		if hp.NodeID == "" {
			hp.NodeID = c.NodeID
		}
		if hp.Endpoint == "" {
			hp.Endpoint = filepath.Join(c.DataDir, "hostpath.sock")
		}
		c.Hostpath = &hp
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	c.Clock = clock.Or(c.Clock)
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return c, fmt.Errorf("agent %s: create DataDir: %w", c.NodeID, err)
	}
	return c, nil
}

// servers lists the clients of every server: Server, then Servers,
// each address once.
func (c Config) servers() []*api.Client {
	var out []*api.Client
	seen := map[string]bool{}
	for _, s := range append([]*api.Client{c.Server}, c.Servers...) {
		if s != nil && !seen[s.Address()] {
			seen[s.Address()] = true
			out = append(out, s)
		}
	}
	return out
}
