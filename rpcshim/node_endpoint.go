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
	if err := csi.ValidateNodeID(cfg.NodeID); err != nil {
		return nil, fmt.Errorf("rpcshim: NodeEndpointConfig.NodeID: %w", err)
	}
	switch {
	case cfg.Plugins == nil:
		return nil, fmt.Errorf("%w: rpcshim: NodeEndpointConfig.Plugins is nil; pass the node's plugin registry (fingerprint.Manager)", csi.ErrInvalidRequest)
	case cfg.Mounter == nil:
		return nil, fmt.Errorf("%w: rpcshim: NodeEndpointConfig.Mounter is nil; pass the node's mounter (mounter.Mounter)", csi.ErrInvalidRequest)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	m := NewMux()
	e := &NodeEndpoint{nodeID: cfg.NodeID, plugins: cfg.Plugins, mounter: cfg.Mounter, logger: cfg.Logger, mux: m}
	handleDirect[ControllerPublishRequest, ControllerPublishResponse](m, MethodControllerPublish, func(ctx context.Context, req *ControllerPublishRequest) (*ControllerPublishResponse, error) {
		c, err := e.controller(req.query(), "ControllerPublishVolume")
		if err != nil {
			return nil, err
		}
		pc, err := c.ControllerPublishVolume(ctx, &req.ControllerPublishRequest)
		if err != nil {
			return nil, e.pluginErr(req.query(), "ControllerPublishVolume", err)
		}
		return &ControllerPublishResponse{PublishContext: pc}, nil
	})
	handleDirect[ControllerUnpublishRequest, ControllerUnpublishResponse](m, MethodControllerUnpublish, func(ctx context.Context, req *ControllerUnpublishRequest) (*ControllerUnpublishResponse, error) {
		c, err := e.controller(req.query(), "ControllerUnpublishVolume")
		if err != nil {
			return nil, err
		}
		if err := c.ControllerUnpublishVolume(ctx, &req.ControllerUnpublishRequest); err != nil {
			return nil, e.pluginErr(req.query(), "ControllerUnpublishVolume", err)
		}
		return &ControllerUnpublishResponse{}, nil
	})
	handleDirect[ValidateCapabilitiesRequest, ValidateCapabilitiesResponse](m, MethodControllerValidateCapabilities, func(ctx context.Context, req *ValidateCapabilitiesRequest) (*ValidateCapabilitiesResponse, error) {
		c, err := e.controller(req.query(), "ValidateVolumeCapabilities")
		if err != nil {
			return nil, err
		}
		r, err := c.ValidateVolumeCapabilities(ctx, &req.ValidateCapabilitiesRequest)
		if err != nil {
			return nil, e.pluginErr(req.query(), "ValidateVolumeCapabilities", err)
		}
		return &ValidateCapabilitiesResponse{ValidateCapabilitiesResponse: *r}, nil
	})
	handleDirect[CreateVolumeRequest, CreateVolumeResponse](m, MethodControllerCreateVolume, func(ctx context.Context, req *CreateVolumeRequest) (*CreateVolumeResponse, error) {
		c, err := e.controller(req.query(), "CreateVolume")
		if err != nil {
			return nil, err
		}
		v, err := c.CreateVolume(ctx, &req.CreateVolumeRequest)
		if err != nil {
			return nil, e.pluginErr(req.query(), "CreateVolume", err)
		}
		return &CreateVolumeResponse{Volume: *v}, nil
	})
	handleDirect[DeleteVolumeRequest, DeleteVolumeResponse](m, MethodControllerDeleteVolume, func(ctx context.Context, req *DeleteVolumeRequest) (*DeleteVolumeResponse, error) {
		c, err := e.controller(req.query(), "DeleteVolume")
		if err != nil {
			return nil, err
		}
		if err := c.DeleteVolume(ctx, &req.DeleteVolumeRequest); err != nil {
			return nil, e.pluginErr(req.query(), "DeleteVolume", err)
		}
		return &DeleteVolumeResponse{}, nil
	})
	handle(m, MethodControllerListVolumes, func(ctx context.Context, req *ListVolumesRequest) (*ListVolumesResponse, error) {
		c, err := e.controller(req.query(), "ListVolumes")
		if err != nil {
			return nil, err
		}
		r, err := c.ListVolumes(ctx, &req.ListVolumesRequest)
		if err != nil {
			return nil, e.pluginErr(req.query(), "ListVolumes", err)
		}
		return &ListVolumesResponse{ListVolumesResponse: *r}, nil
	}, true)
	handle(m, MethodControllerExpandVolume, func(ctx context.Context, req *ExpandVolumeRequest) (*ExpandVolumeResponse, error) {
		c, err := e.controller(req.query(), "ControllerExpandVolume")
		if err != nil {
			return nil, err
		}
		r, err := c.ControllerExpandVolume(ctx, &req.ControllerExpandRequest)
		if err != nil {
			return nil, e.pluginErr(req.query(), "ControllerExpandVolume", err)
		}
		return &ExpandVolumeResponse{ControllerExpandResponse: *r}, nil
	}, true)
	handle(m, MethodControllerCreateSnapshot, func(ctx context.Context, req *CreateSnapshotRequest) (*CreateSnapshotResponse, error) {
		c, err := e.controller(req.query(), "CreateSnapshot")
		if err != nil {
			return nil, err
		}
		s, err := c.CreateSnapshot(ctx, &req.CreateSnapshotRequest)
		if err != nil {
			return nil, e.pluginErr(req.query(), "CreateSnapshot", err)
		}
		return &CreateSnapshotResponse{Snapshot: *s}, nil
	}, true)
	handle(m, MethodControllerDeleteSnapshot, func(ctx context.Context, req *DeleteSnapshotRequest) (*DeleteSnapshotResponse, error) {
		c, err := e.controller(req.query(), "DeleteSnapshot")
		if err != nil {
			return nil, err
		}
		if err := c.DeleteSnapshot(ctx, &req.DeleteSnapshotRequest); err != nil {
			return nil, e.pluginErr(req.query(), "DeleteSnapshot", err)
		}
		return &DeleteSnapshotResponse{}, nil
	}, true)
	handle(m, MethodControllerListSnapshots, func(ctx context.Context, req *ListSnapshotsRequest) (*ListSnapshotsResponse, error) {
		c, err := e.controller(req.query(), "ListSnapshots")
		if err != nil {
			return nil, err
		}
		r, err := c.ListSnapshots(ctx, &req.ListSnapshotsRequest)
		if err != nil {
			return nil, e.pluginErr(req.query(), "ListSnapshots", err)
		}
		return &ListSnapshotsResponse{ListSnapshotsResponse: *r}, nil
	}, true)
	handleDirect[NodeDetachRequest, NodeDetachResponse](m, MethodNodeDetach, e.nodeDetach)
	return e, nil
}

// ServeCall implements Handler.
func (e *NodeEndpoint) ServeCall(ctx context.Context, method string, body []byte) ([]byte, error) {
	return e.mux.ServeCall(ctx, method, body)
}

// servesInline implements inlineHandler: the endpoint's own methods make
// only calls that end with ctx (the controller plugin's gRPC calls, the
// Unmounter); methods a node agent added to Mux do not qualify.
func (e *NodeEndpoint) servesInline(method string) bool { return e.mux.servesInline(method) }

// serveDirect implements inlineHandler.
func (e *NodeEndpoint) serveDirect(ctx context.Context, method string, req, resp any) (bool, []byte, error) {
	return e.mux.serveDirect(ctx, method, req, resp)
}

// Mux returns the Mux the endpoint's methods are registered on. A node
// agent may Handle methods of its own on it, to serve them on the same
// transport; the Method… names are taken.
func (e *NodeEndpoint) Mux() *Mux { return e.mux }

// controller returns the local controller plugin a request names.
func (e *NodeEndpoint) controller(q *CSIControllerQuery, op string) (plugin.ControllerClient, error) {
	if err := csi.ValidatePluginID(q.PluginID); err != nil {
		return nil, fmt.Errorf("%s on node %s: %w", op, e.nodeID, err)
	}
	if q.ControllerNodeID != "" && q.ControllerNodeID != e.nodeID {
		return nil, e.misrouted(op, q.ControllerNodeID)
	}
	c, info, err := e.plugins.ControllerPlugin(q.PluginID)
	if err != nil {
		e.logger.Debug("controller call for a plugin not running here", "method", op, "plugin_id", q.PluginID, "error", err)
		return nil, fmt.Errorf("%s on node %s: %w", op, e.nodeID, err)
	}
	if info != nil && !info.Healthy {
		return nil, fmt.Errorf("%w: %s on node %s: the controller of plugin %s is unhealthy here (%s); the router should use another node",
			csi.ErrPluginUnhealthy, op, e.nodeID, q.PluginID, info.HealthDescription)
	}
	return c, nil
}

func (e *NodeEndpoint) misrouted(op, want string) error {
	return fmt.Errorf("%w: %s was meant for node %s but reached node %s; the host's address for node %s is stale, retry once it is updated",
		csi.ErrUnavailable, op, want, e.nodeID, want)
}

func (e *NodeEndpoint) pluginErr(q *CSIControllerQuery, op string, err error) error {
	e.logger.Debug("controller plugin call failed", "method", op, "plugin_id", q.PluginID, "class", csi.Classify(err), "error", err)
	return fmt.Errorf("plugin %s on node %s: %w", q.PluginID, e.nodeID, err)
}

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
