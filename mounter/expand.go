package mounter

import (
	"cmp"
	"context"
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// ExpandRequest asks the mounter to grow a volume's file system on this
// node with NodeExpandVolume.
type ExpandRequest struct {
	Namespace string
	VolumeID  string
	// RequiredBytes and LimitBytes are the expansion's capacity range
	// (LimitBytes 0: no limit).
	RequiredBytes int64
	LimitBytes    int64
	// Secrets are the volume's node expand secrets, never logged.
	Secrets csi.Secrets
}

// ExpandResult is the outcome of ExpandVolume.
type ExpandResult struct {
	// Mounted says the volume is staged or published here. When false
	// no call was made: a later stage is the place to grow it.
	Mounted bool
	// Capacity is the size NodeExpandVolume reported; 0 when unknown, no
	// call was made, or the node plugin does not advertise EXPAND_VOLUME
	// (it has nothing to do on the node).
	Capacity int64
}

// NodeExpansion is an expansion that a node owes a volume expanded while
// it was not staged there, for a plugin that needs NodeExpandVolume on
// every node. NewMountRequest sets it from the volume's csi.Expansion; a
// mount that stages the volume then runs NodeExpandVolume with this
// range after NodeStageVolume and NodePublishVolume.
type NodeExpansion struct {
	RequiredBytes int64
	LimitBytes    int64 `json:",omitempty"`
}

// Validate checks the request's IDs and range.
func (r *ExpandRequest) Validate() error {
	if r == nil {
		return fmt.Errorf("%w: nil expand request", csi.ErrInvalidRequest)
	}
	if err := cmp.Or(csi.ValidateNamespace(r.Namespace), csi.ValidateVolumeID(r.VolumeID)); err != nil {
		return err
	}
	if r.RequiredBytes <= 0 || r.LimitBytes < 0 || r.LimitBytes > 0 && r.LimitBytes < r.RequiredBytes {
		return fmt.Errorf("%w: expand volume %s/%s: range [%d, %d] is not a growth; ask for a positive size within the limit",
			csi.ErrInvalidRequest, r.Namespace, r.VolumeID, r.RequiredBytes, r.LimitBytes)
	}
	return nil
}

// ExpandVolume runs NodeExpandVolume for a volume this node has staged
// or published, with the volume locked, at the paths VolumePaths
// reports. Calls are idempotent: the plugin answers a repeated one with
// the same size. A plugin error is returned wrapped; a volume the node
// does not track is no error (Mounted false). A symbolic link on the way
// to a path fails it with ErrUnsafePath (Final) before the call.
func (m *Mounter) ExpandVolume(ctx context.Context, req *ExpandRequest) (*ExpandResult, error) {
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("expand volume: %w", err)
	}
	v, err := m.acquire(ctx, volKey{req.Namespace, req.VolumeID})
	if err != nil {
		return nil, err
	}
	defer m.release(v)
	res, err := m.expand(ctx, v, req)
	if err != nil {
		return nil, fmt.Errorf("expand volume %s/%s: %w", req.Namespace, req.VolumeID, err)
	}
	return res, nil
}

// expand runs with the volume locked.
func (m *Mounter) expand(ctx context.Context, v *volume, req *ExpandRequest) (*ExpandResult, error) {
	sk, paths, ok := v.rec.mounted()
	if !ok {
		return &ExpandResult{}, nil
	}
	client, info, err := m.nodePlugin(paths.PluginID)
	if err != nil {
		return nil, err
	}
	if info != nil && info.NodeInfo != nil && !info.NodeInfo.Capabilities.ExpandVolume {
		return &ExpandResult{Mounted: true}, nil
	}
	// The plugin would grow what a link beneath the root points at (an
	// empty staging path, not beneath the root, passes).
	for _, p := range []string{paths.VolumePath, paths.StagingPath} {
		if err := m.refuseLinks(p, false); err != nil {
			return nil, fmt.Errorf("NodeExpandVolume not sent: %w", err)
		}
	}
	done, err := m.slot(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	c := sk.Capability()
	m.calls.Add(1)
	size, err := client.NodeExpandVolume(ctx, &plugin.NodeExpandRequest{ExternalID: paths.ExternalID, VolumePath: paths.VolumePath,
		StagingPath: paths.StagingPath, CapacityMin: req.RequiredBytes, CapacityMax: req.LimitBytes, Capability: &c, Secrets: req.Secrets})
	if err != nil {
		return nil, fmt.Errorf("NodeExpandVolume: %w", err)
	}
	return &ExpandResult{Mounted: true, Capacity: size}, nil
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

// VolumePaths is where a volume is mounted on this node, as the
// mounter tracks it: the paths a NodeGetVolumeStats call names.
type VolumePaths struct {
	PluginID, ExternalID string
	// VolumePath is the first publication's target (in a stable order),
	// the staging path when the volume is only staged.
	VolumePath string
	// StagingPath is empty when the volume is not staged.
	StagingPath string
}

// VolumePaths reports where a volume is staged or published on this
// node; ok is false when it is neither. It reads the tracker's record
// with the volume locked (waiting at most until ctx ends for an
// operation on it) and changes nothing.
func (m *Mounter) VolumePaths(ctx context.Context, namespace, volumeID string) (paths VolumePaths, ok bool, err error) {
	if err := cmp.Or(csi.ValidateNamespace(namespace), csi.ValidateVolumeID(volumeID)); err != nil {
		return VolumePaths{}, false, fmt.Errorf("volume paths: %w", err)
	}
	v, err := m.acquire(ctx, volKey{namespace, volumeID})
	if err != nil {
		return VolumePaths{}, false, err
	}
	defer m.release(v)
	_, paths, ok = v.rec.mounted()
	return paths, ok, nil
}

// mounted returns where r (nil: nothing tracked) is mounted: the first
// stage usage, in a stable order, that is staged or has a publication,
// and its paths. ok is false when nothing is mounted.
func (r *volumeRecord) mounted() (sk StageUsage, paths VolumePaths, ok bool) {
	if r == nil {
		return StageUsage{}, VolumePaths{}, false
	}
	for _, sk := range r.sortedStages() {
		s := r.Stages[sk]
		paths = VolumePaths{PluginID: r.PluginID, ExternalID: r.ExternalID}
		if s.Stage == stageStaged {
			paths.StagingPath, paths.VolumePath = s.StagingPath, s.StagingPath
		}
		for _, p := range s.publications() {
			if p.rec.State == publishPublished {
				paths.VolumePath = p.rec.TargetPath
				break
			}
		}
		if paths.VolumePath != "" {
			return sk, paths, true
		}
	}
	return StageUsage{}, VolumePaths{}, false
}
