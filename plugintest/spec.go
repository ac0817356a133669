package plugintest

import (
	"fmt"

	"github.com/csikit/csikit/csi"
)

// This file holds what the spec expects of each call the lifecycle
// makes, as the sentences failures end with. They name the facts the
// harness knows (what the plugin advertised, what it returned earlier)
// so that a plugin author sees why the answer was wrong, not only that
// it was.

// publishes reports whether the CO must ControllerPublish: the plugin
// has a controller that advertises PUBLISH_UNPUBLISH_VOLUME.
func (l *run) publishes() bool { return l.hasController && l.ctrlCaps.PublishUnpublishVolume }

// stages reports whether the node plugin advertises
// STAGE_UNSTAGE_VOLUME.
func (l *run) stages() bool { return l.nodeCaps.StageUnstageVolume }

// expectOK says why the spec requires OK from call, which answered code
// to a request the lifecycle made in the spec's order.
func (l *run) expectOK(call string, code csi.Code) string {
	const base = "the spec requires OK"
	if code == csi.CodeFailedPrecondition {
		switch call {
		case methodNodePublish:
			if !l.stages() {
				return base + ": the plugin does not advertise STAGE_UNSTAGE_VOLUME, so the CO publishes without NodeStageVolume; a plugin that reports staging unnecessary must not require it"
			}
			if l.publishes() {
				return base + ": NodeStageVolume returned OK at the staging_target_path passed, and ControllerPublishVolume returned OK for this node with the publish_context passed"
			}
			return base + ": NodeStageVolume returned OK at the staging_target_path passed"
		case methodNodeStage:
			if l.publishes() {
				return base + ": ControllerPublishVolume returned OK for this node and its publish_context is passed on"
			}
			return base + ": the plugin does not advertise PUBLISH_UNPUBLISH_VOLUME, so the CO stages without ControllerPublishVolume"
		case methodNodeUnstage:
			return base + ": every NodeUnpublishVolume of the volume on this node returned OK, which is all the spec asks before NodeUnstageVolume"
		case methodControllerUnpublish:
			return base + ": every NodeUnpublishVolume and NodeUnstageVolume on the node returned OK, which is all the spec asks before ControllerUnpublishVolume"
		case methodDeleteVolume:
			return base + ": the volume is unpublished from every node and target, so nothing uses it"
		}
	}
	if code == csi.CodeNotFound {
		switch call {
		case methodControllerPublish:
			return fmt.Sprintf("%s: the spec reserves NotFound for a volume or node that does not exist, and volume_id %q %s while node_id %q is what NodeGetInfo reported",
				base, l.externalID, l.volumeOrigin(), l.csiNode)
		case methodNodeStage, methodNodePublish, methodValidate:
			return fmt.Sprintf("%s: the spec reserves NotFound for a volume that does not exist, and volume_id %q %s",
				base, l.externalID, l.volumeOrigin())
		}
	}
	if code == csi.CodeUnimplemented {
		return base + ": the plugin advertised the capability this call belongs to"
	}
	return base + " for a valid request made in the lifecycle's order"
}

// volumeOrigin says why the harness knows the volume exists.
func (l *run) volumeOrigin() string {
	if l.cfg.VolumeID != "" {
		return "is the pre-provisioned volume given in Config.VolumeID"
	}
	return "was returned by CreateVolume and not deleted"
}

// Expectations of the repeated calls.
const (
	expectCreateRepeat = "the spec requires OK and the same volume when CreateVolume is repeated with the same name and arguments"
	expectPublishCtx   = "the spec requires OK and the same publish_context when ControllerPublishVolume is repeated with identical arguments"
	expectStageRepeat  = "the spec requires OK when the volume is already staged at staging_target_path with identical arguments"
	expectPubRepeat    = "the spec requires OK when the volume is already published at target_path with identical arguments"
	expectTeardown     = "a repeated teardown must succeed: the spec requires OK, or NotFound where it allows it for something already gone"
	expectTargetGone   = "the spec requires the SP to delete the file or directory it created at target_path"
	expectTargetMade   = "the spec makes the SP create the file or directory at target_path"
	expectUnknownVol   = "the spec requires NotFound when volume_id does not exist"
	expectMissingField = "the spec requires InvalidArgument when a required field is missing"
)
