package mounter

import (
	"cmp"
	"context"
	"fmt"

	"github.com/csikit/csikit/csi"
)

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
