package rpcshim

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/mounter"
)

// ControllerPlugins finds the controller plugin of a plugin ID on this
// node. fingerprint.Manager satisfies it.
//
// ControllerPlugin is called by the node endpoint from one goroutine per
// call. When no controller (or monolith) instance of the plugin runs on
// the node, the error wraps csi.ErrPluginNotFound, which the router reads
// as "try another node". The info is the instance's latest fingerprint
// (nil before the first); the endpoint refuses an instance known to be
// unhealthy. The client stays owned by the implementation.
type ControllerPlugins interface {
	ControllerPlugin(pluginID string) (plugin.ControllerClient, *csi.PluginInfo, error)
}

// Unmounter undoes a volume's mounts for one allocation on this node.
// mounter.Mounter satisfies it (see mounter.VolumeMounter for the
// contract: idempotent, safe for concurrent use, errors classified).
type Unmounter interface {
	UnmountVolume(ctx context.Context, req *mounter.UnmountRequest) error
}

// NodeEndpointConfig configures a NodeEndpoint.
type NodeEndpointConfig struct {
	// NodeID is this node's host node ID. Required. Calls the router
	// meant for another node are refused, so a stale address in the
	// host's records cannot make this node act for another.
	NodeID string
	// Plugins finds the node's controller plugins (the fingerprint
	// manager). Required.
	Plugins ControllerPlugins
	// Mounter serves node detach (the node's mounter.Mounter). Required.
	Mounter Unmounter
	// Logger gets a debug line per failed call. Nil means no logging.
	// Requests are never logged.
	Logger hclog.Logger
}

// NodeEndpoint is a node agent's answer to the router: it serves the
// Method… calls, sending controller calls to the node's local controller
// plugin and node detach to its mounter. It is a Handler: serve it with
// GRPCNodeServer, register it on an InmemTransport, or hand it to the
// host's own transport. Safe for concurrent use.
//
// Errors keep their meaning for the router: a plugin that does not run
// here wraps csi.ErrPluginNotFound (Retryable, the router tries another
// node), an instance whose last fingerprint is unhealthy wraps
// csi.ErrPluginUnhealthy (Retryable), a plugin's failure is its
// *csi.RPCError with its gRPC code, and a malformed request is
// csi.ErrInvalidRequest (Final).
type NodeEndpoint struct {
	nodeID  string
	plugins ControllerPlugins
	mounter Unmounter
	logger  hclog.Logger
	mux     *Mux
}

var (
	_ Handler       = (*NodeEndpoint)(nil)
	_ inlineHandler = (*NodeEndpoint)(nil)
)

// NewNodeEndpoint validates cfg and returns the endpoint with its methods
// registered on a new Mux. It starts no goroutine.
func NewNodeEndpoint(cfg NodeEndpointConfig) (*NodeEndpoint, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	e := &NodeEndpoint{nodeID: cfg.NodeID, plugins: cfg.Plugins, mounter: cfg.Mounter, logger: logger, mux: NewMux()}
	e.handleControllerCalls()
	e.handleExpandCalls()
	handle(e.mux, MethodNodeDetach, e.nodeDetach, true)
	return e, nil
}

// validate checks the required fields.
func (cfg *NodeEndpointConfig) validate() error {
	if err := csi.ValidateNodeID(cfg.NodeID); err != nil {
		return fmt.Errorf("rpcshim: NodeEndpointConfig.NodeID: %w", err)
	}
	switch {
	case cfg.Plugins == nil:
		return fmt.Errorf("%w: rpcshim: NodeEndpointConfig.Plugins is nil; pass the node's plugin registry (fingerprint.Manager)", csi.ErrInvalidRequest)
	case cfg.Mounter == nil:
		return fmt.Errorf("%w: rpcshim: NodeEndpointConfig.Mounter is nil; pass the node's mounter (mounter.Mounter)", csi.ErrInvalidRequest)
	}
	return nil
}

// ServeCall implements Handler.
func (e *NodeEndpoint) ServeCall(ctx context.Context, method string, body []byte) ([]byte, error) {
	return e.mux.ServeCall(ctx, method, body)
}

// servesInline implements inlineHandler: the endpoint's own methods make
// only calls that end with ctx (the controller plugin's gRPC calls, the
// Unmounter); methods a node agent added to Mux do not qualify.
func (e *NodeEndpoint) servesInline(method string) bool { return e.mux.servesInline(method) }

// Mux returns the Mux the endpoint's methods are registered on. A node
// agent may Handle methods of its own on it, to serve them on the same
// transport; the Method… names are taken.
func (e *NodeEndpoint) Mux() *Mux { return e.mux }

// nodeDetach serves MethodNodeDetach with the node's Unmounter.
func (e *NodeEndpoint) nodeDetach(ctx context.Context, req *NodeDetachRequest) (*NodeDetachResponse, error) {
	if req.NodeID != "" && req.NodeID != e.nodeID {
		return nil, e.misrouted("node detach", req.NodeID)
	}
	ur := &mounter.UnmountRequest{
		Namespace:    req.Namespace,
		VolumeID:     req.VolumeID,
		AllocationID: req.AllocationID,
	}
	if req.Usage != nil {
		ur.Usage = *req.Usage
	}
	if err := e.mounter.UnmountVolume(ctx, ur); err != nil {
		e.logger.Debug("node detach failed", "namespace", req.Namespace, "volume_id", req.VolumeID,
			"allocation_id", req.AllocationID, "plugin_id", req.PluginID, "class", csi.Classify(err), "error", err)
		return nil, fmt.Errorf("on node %s: %w", e.nodeID, err)
	}
	return &NodeDetachResponse{}, nil
}

// misrouted is the error for a call the router meant for another node.
func (e *NodeEndpoint) misrouted(op, want string) error {
	return fmt.Errorf("%w: %s was meant for node %s but reached node %s; the host's address for node %s is stale, retry once it is updated",
		csi.ErrUnavailable, op, want, e.nodeID, want)
}
