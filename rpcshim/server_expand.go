package rpcshim

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/backoff"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// Expansion and modify follow the claim's pattern: the intent is written
// through the applier before any plugin call (state.RequestExpansion,
// state.RequestModify), each step's outcome after it, so a new leader
// resumes a pending one with ResumeVolumeChanges and a repeated call
// never expands or modifies twice. Plugin calls that fail with a
// Retryable error are tried again on the Server's clock with
// changeBackoff, at most changeAttempts times in one call; what is left
// stays pending in the state.

// changeAttempts bounds the tries of one plugin step in one call.
const changeAttempts = 5

// changeBackoff spaces those tries.
var changeBackoff = backoff.Policy{Base: 200 * 1e6, Max: 5 * 1e9}

// VolumeExpandRequest grows a volume to at least RequiredBytes (and at
// most LimitBytes; 0 for no limit).
type VolumeExpandRequest struct {
	Namespace     string
	VolumeID      string
	RequiredBytes int64
	LimitBytes    int64 `json:",omitempty"`
}

// VolumeModifyRequest changes a volume's CSI mutable parameters.
type VolumeModifyRequest struct {
	Namespace         string
	VolumeID          string
	MutableParameters map[string]string
}

// VolumeChangeResponse is a volume after an expansion or a modify,
// secrets removed. PendingNodes are the nodes whose NodeExpandVolume is
// still to run (down, or failing): each completes it when the host
// calls CompleteNodeExpansions for it.
type VolumeChangeResponse struct {
	Volume           *csi.Volume
	ControllerNodeID string   `json:",omitempty"`
	PendingNodes     []string `json:",omitempty"`
}

// ExpandVolume grows a volume. It refuses a shrink (csi.ErrShrinkRefused),
// a plugin that advertises EXPAND_VOLUME on neither its controller nor
// its nodes (csi.ErrExpansionUnsupported), and a published volume when
// the plugin expands OFFLINE only (csi.ErrExpansionOffline, Retryable
// once its claims are released). Then it writes the intent, calls
// ControllerExpandVolume through the router when the controller
// advertises EXPAND_VOLUME, records the new capacity, and runs
// NodeExpandVolume on every node where the volume is staged or
// published when the controller answers node_expansion_required or the
// plugin expands on nodes only. A node that is not ready keeps its node
// step pending (see CompleteNodeExpansions) and the call succeeds.
func (s *Server) ExpandVolume(ctx context.Context, req *VolumeExpandRequest) (*VolumeChangeResponse, error) {
	const op = "expand volume"
	if req == nil {
		return nil, fmt.Errorf("%w: %s: nil request", csi.ErrInvalidRequest, op)
	}
	v, p, unlock, err := s.beginChange(ctx, op, req.Namespace, req.VolumeID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	name := req.Namespace + "/" + req.VolumeID
	mode := p.ExpansionMode()
	switch {
	case !mode.Supported():
		return nil, fmt.Errorf("%w: %s %s: plugin %s advertises EXPAND_VOLUME on neither its controller nor its nodes",
			csi.ErrExpansionUnsupported, op, name, v.PluginID)
	case mode.Controller && mode.OfflineOnly() && v.Published():
		return nil, fmt.Errorf("%w: %s %s: plugin %s expands OFFLINE only and the volume is claimed or attached (%s); release it first",
			csi.ErrExpansionOffline, op, name, v.PluginID, claimHolders(v))
	}
	if _, err := s.applier.Apply(ctx, state.RequestExpansion{
		Namespace: req.Namespace, VolumeID: req.VolumeID, RequiredBytes: req.RequiredBytes,
		LimitBytes: req.LimitBytes, Controller: mode.Controller, RequestedAt: s.clock.Now(),
	}); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, name, err)
	}
	return s.driveExpansion(ctx, req.Namespace, req.VolumeID)
}

// driveExpansion runs what is left of a volume's expansion, with the
// volume locked.
func (s *Server) driveExpansion(ctx context.Context, ns, id string) (*VolumeChangeResponse, error) {
	name := ns + "/" + id
	v, err := s.store.Volume(ns, id)
	if err != nil {
		return nil, fmt.Errorf("expand volume %s: %w", name, err)
	}
	resp := &VolumeChangeResponse{}
	if e := v.Expansion; e != nil && e.State == csi.ExpansionController {
		if resp.ControllerNodeID, err = s.controllerExpand(ctx, v); err != nil {
			return nil, err
		}
		if v, err = s.store.Volume(ns, id); err != nil {
			return nil, fmt.Errorf("expand volume %s: %w", name, err)
		}
	}
	if e := v.Expansion; e != nil && e.State == csi.ExpansionNode {
		for _, node := range e.PendingNodes {
			if err := s.nodeExpand(ctx, v, node); err != nil {
				return nil, err
			}
		}
		if v, err = s.store.Volume(ns, id); err != nil {
			return nil, fmt.Errorf("expand volume %s: %w", name, err)
		}
	}
	resp.Volume = withoutSecrets(v)
	if v.Expansion != nil {
		resp.PendingNodes = slices.Clone(v.Expansion.PendingNodes)
	}
	return resp, nil
}

// controllerExpand calls ControllerExpandVolume and records its answer.
// A Final refusal drops the intent; a Retryable failure that outlasts
// the attempts leaves it pending, with the error recorded.
func (s *Server) controllerExpand(ctx context.Context, v *csi.Volume) (string, error) {
	e := v.Expansion
	capab := singleCapability(v)
	var mo *csi.MountOptions
	if capab != nil && capab.AttachmentMode == csi.AttachmentModeFileSystem {
		mo = v.MountOptions
	}
	req := &ExpandVolumeRequest{
		CSIControllerQuery: CSIControllerQuery{PluginID: v.PluginID},
		ControllerExpandRequest: plugin.ControllerExpandRequest{
			ExternalID: v.ExternalID, CapacityMin: e.RequiredBytes, CapacityMax: e.LimitBytes,
			Capability: capab, MountOptions: mo, Secrets: v.Secrets,
		},
	}
	var resp *ExpandVolumeResponse
	err := s.retry(ctx, func() (err error) {
		resp, err = s.router.ExpandVolume(ctx, req)
		return err
	})
	if err != nil {
		s.recordExpansionError(ctx, v, err, csi.Classify(err) == csi.ClassFinal)
		return "", fmt.Errorf("expand volume %s/%s: %w", v.Namespace, v.ID, err)
	}
	if _, err := s.applier.Apply(ctx, state.RecordControllerExpansion{
		Namespace: v.Namespace, VolumeID: v.ID, Capacity: resp.Capacity, NodeExpansionRequired: resp.NodeExpansionRequired,
	}); err != nil {
		return "", fmt.Errorf("expand volume %s/%s: ControllerExpandVolume succeeded but recording it failed (a retry repeats the call, which is idempotent): %w",
			v.Namespace, v.ID, err)
	}
	return resp.ControllerNodeID, nil
}

// nodeExpand runs the node step on one node and records it. A node that
// is not ready, or keeps failing with a Retryable error, stays pending
// without failing the call; a Final error fails it.
func (s *Server) nodeExpand(ctx context.Context, v *csi.Volume, node string) error {
	e := v.Expansion
	req := &NodeExpandRequest{
		NodeID: node, Namespace: v.Namespace, VolumeID: v.ID, PluginID: v.PluginID,
		RequiredBytes: e.RequiredBytes, LimitBytes: e.LimitBytes, Secrets: v.Secrets,
	}
	var resp *NodeExpandResponse
	err := s.retry(ctx, func() (err error) {
		resp, err = s.router.NodeExpand(ctx, req)
		return err
	})
	rec := state.RecordNodeExpansion{Namespace: v.Namespace, VolumeID: v.ID, NodeID: node}
	switch {
	case err == nil:
		rec.Capacity, rec.NotMounted = resp.Capacity, !resp.Mounted
	case errors.Is(err, csi.ErrNodeNotFound):
		rec.NotMounted = true // the node left the cluster with its mounts
	default:
		s.recordExpansionError(ctx, v, err, false)
		if csi.IsRetryable(err) {
			s.logger.Debug("node expansion left pending", "namespace", v.Namespace, "volume_id", v.ID, "node_id", node, "error", err)
			return nil
		}
		return fmt.Errorf("expand volume %s/%s: %w", v.Namespace, v.ID, err)
	}
	if _, err := s.applier.Apply(ctx, rec); err != nil {
		return fmt.Errorf("expand volume %s/%s: NodeExpandVolume on node %s succeeded but recording it failed: %w", v.Namespace, v.ID, node, err)
	}
	return nil
}

// recordExpansionError notes err on the volume's expansion; a failure
// to record is only logged, the caller returns err itself.
func (s *Server) recordExpansionError(ctx context.Context, v *csi.Volume, err error, final bool) {
	if _, aerr := s.applier.Apply(ctx, state.RecordExpansionError{Namespace: v.Namespace, VolumeID: v.ID, Error: err.Error(), Final: final}); aerr != nil {
		s.logger.Warn("cannot record an expansion error", "namespace", v.Namespace, "volume_id", v.ID, "error", aerr)
	}
}

// retry runs call until it succeeds, fails with an error that is not
// Retryable, or has run changeAttempts times, waiting on the Server's
// clock between tries. A node that is not ready is not waited for: it
// completes its step when it comes back.
func (s *Server) retry(ctx context.Context, call func() error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = call()
		if err == nil || !csi.IsRetryable(err) || errors.Is(err, csi.ErrNodeNotReady) || attempt >= changeAttempts {
			return err
		}
		if serr := clock.Sleep(ctx, s.clock, changeBackoff.Delay(attempt)); serr != nil {
			return err
		}
	}
}

// singleCapability is the volume's capability when it has exactly one,
// which the expansion RPCs may carry; nil otherwise.
func singleCapability(v *csi.Volume) *csi.Capability {
	if len(v.Capabilities) != 1 {
		return nil
	}
	c := v.Capabilities[0]
	return &c
}
