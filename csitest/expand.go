package csitest

import (
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// The expansion model. ControllerExpandVolume and NodeExpandVolume grow
// a volume of the model (growLocked, which never shrinks); this file
// holds the rules the two share with the capability knobs:
//
//   - Config.OfflineExpansion makes the plugin advertise OFFLINE
//     instead of ONLINE, and ControllerExpandVolume of a volume that is
//     controller published, staged or published answers
//     FailedPrecondition, as the spec has such a plugin do.
//   - The lifecycle checker records RuleNodeExpandFirst when
//     NodeExpandVolume asks for more than the model holds while this
//     plugin's controller advertises EXPAND_VOLUME: the CO called the
//     node before the controller grew the volume.

// RuleNodeExpandFirst is the Violation.Rule of a NodeExpandVolume sent
// before the ControllerExpandVolume it needed.
const RuleNodeExpandFirst = "node-expand-before-controller-expand"

// expansionType is the VolumeExpansion capability the plugin advertises.
func (p *Plugin) expansionType() csipb.PluginCapability_VolumeExpansion_Type {
	if p.offlineExpansion {
		return csipb.PluginCapability_VolumeExpansion_OFFLINE
	}
	return csipb.PluginCapability_VolumeExpansion_ONLINE
}

// checkOfflineLocked refuses to grow an in-use volume when the plugin
// expands offline only.
func (p *Plugin) checkOfflineLocked(method string, v *volume) error {
	if !p.offlineExpansion {
		return nil
	}
	if len(v.attachments)+len(v.staged)+len(v.published) > 0 {
		return errorf(codes.FailedPrecondition, method,
			"volume %q is published and the plugin expands only offline volumes; unpublish it first", v.id)
	}
	return nil
}

// checkNodeExpandLocked records RuleNodeExpandFirst.
func (p *Plugin) checkNodeExpandLocked(method string, v *volume, r *csipb.CapacityRange) {
	if p.ctrlCaps.ExpandVolume && p.typ.HasController() && r.GetRequiredBytes() > v.capacity {
		p.violateLocked(method, v.id, RuleNodeExpandFirst,
			"NodeExpandVolume asks for %d bytes but the controller has grown the volume to %d only; call ControllerExpandVolume first",
			r.GetRequiredBytes(), v.capacity)
	}
}
