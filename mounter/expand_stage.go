package mounter

import (
	"context"

	"github.com/csikit/csikit/csi/plugin"
)

// NodeExpansion is an expansion that a node owes a volume expanded while
// it was not staged there, for a plugin that needs NodeExpandVolume on
// every node. NewMountRequest sets it from the volume's csi.Expansion; a
// mount that stages the volume then runs NodeExpandVolume with this
// range after NodeStageVolume and NodePublishVolume.
type NodeExpansion struct {
	RequiredBytes int64
	LimitBytes    int64 `json:",omitempty"`
}

// expandAtStage runs the request's NodeExpansion once the mount staged
// and published the volume, when the node plugin advertises
// EXPAND_VOLUME, and returns the capacity it reported. A failure is
// logged and not the mount's: the volume is mounted, and the host's
// CompleteNodeExpansions runs the step again.
func (m *Mounter) expandAtStage(ctx context.Context, op *mountOp) int64 {
	req, x := op.req, op.req.NodeExpansion
	if x == nil || op.info == nil || op.info.NodeInfo == nil || !op.info.NodeInfo.Capabilities.ExpandVolume {
		return 0
	}
	capab := req.Capability
	r := &plugin.NodeExpandRequest{
		ExternalID: req.ExternalID, VolumePath: op.target, StagingPath: op.staging, CapacityMin: x.RequiredBytes,
		CapacityMax: x.LimitBytes, Capability: &capab, MountOptions: req.MountOptions, Secrets: req.Secrets,
	}
	m.calls.Add(1)
	size, err := op.client.NodeExpandVolume(ctx, r)
	if err != nil {
		m.logger.Warn("node expansion at stage time failed; it stays pending", "namespace", req.Namespace, "volume", req.VolumeID, "error", err)
		return 0
	}
	if size == 0 {
		size = x.RequiredBytes
	}
	return size
}
