package csitest

import (
	"fmt"
	"path"

	"github.com/csikit/csikit/csi"
)

// The CSI RPC names the fake serves. Fault knobs (FailNext, SetHook, …),
// the call log and violations use these bare names.
const (
	MethodGetPluginInfo         = "GetPluginInfo"
	MethodGetPluginCapabilities = "GetPluginCapabilities"
	MethodProbe                 = "Probe"

	MethodCreateVolume               = "CreateVolume"
	MethodDeleteVolume               = "DeleteVolume"
	MethodControllerPublishVolume    = "ControllerPublishVolume"
	MethodControllerUnpublishVolume  = "ControllerUnpublishVolume"
	MethodValidateVolumeCapabilities = "ValidateVolumeCapabilities"
	MethodListVolumes                = "ListVolumes"
	MethodGetCapacity                = "GetCapacity"
	MethodControllerGetCapabilities  = "ControllerGetCapabilities"
	MethodCreateSnapshot             = "CreateSnapshot"
	MethodDeleteSnapshot             = "DeleteSnapshot"
	MethodListSnapshots              = "ListSnapshots"
	MethodGetSnapshot                = "GetSnapshot"
	MethodControllerExpandVolume     = "ControllerExpandVolume"
	MethodControllerGetVolume        = "ControllerGetVolume"
	MethodControllerModifyVolume     = "ControllerModifyVolume"
	// The health RPCs are new in CSI 1.13; the fake always answers them
	// Unimplemented, but they can still be faulted and are logged.
	MethodControllerListVolumeHealth = "ControllerListVolumeHealth"
	MethodControllerGetVolumeHealth  = "ControllerGetVolumeHealth"

	MethodNodeStageVolume      = "NodeStageVolume"
	MethodNodeUnstageVolume    = "NodeUnstageVolume"
	MethodNodePublishVolume    = "NodePublishVolume"
	MethodNodeUnpublishVolume  = "NodeUnpublishVolume"
	MethodNodeGetVolumeStats   = "NodeGetVolumeStats"
	MethodNodeExpandVolume     = "NodeExpandVolume"
	MethodNodeGetCapabilities  = "NodeGetCapabilities"
	MethodNodeGetInfo          = "NodeGetInfo"
	MethodNodeGetVolumeHealth  = "NodeGetVolumeHealth"
	MethodNodeGetStorageHealth = "NodeGetStorageHealth"
)

type service int

const (
	serviceNone service = iota
	serviceIdentity
	serviceController
	serviceNode
)

// serviceOf tells which CSI service a bare method name belongs to, or
// serviceNone for a name the fake does not know.
func serviceOf(method string) service {
	switch method {
	case MethodGetPluginInfo, MethodGetPluginCapabilities, MethodProbe:
		return serviceIdentity
	case MethodCreateVolume, MethodDeleteVolume, MethodControllerPublishVolume,
		MethodControllerUnpublishVolume, MethodValidateVolumeCapabilities,
		MethodListVolumes, MethodGetCapacity, MethodControllerGetCapabilities,
		MethodCreateSnapshot, MethodDeleteSnapshot, MethodListSnapshots,
		MethodGetSnapshot, MethodControllerExpandVolume, MethodControllerGetVolume,
		MethodControllerModifyVolume, MethodControllerListVolumeHealth,
		MethodControllerGetVolumeHealth:
		return serviceController
	case MethodNodeStageVolume, MethodNodeUnstageVolume, MethodNodePublishVolume,
		MethodNodeUnpublishVolume, MethodNodeGetVolumeStats, MethodNodeExpandVolume,
		MethodNodeGetCapabilities, MethodNodeGetInfo, MethodNodeGetVolumeHealth,
		MethodNodeGetStorageHealth:
		return serviceNode
	}
	return serviceNone
}

// advertised reports whether the capabilities allow the method. Methods
// every instance of a service must answer (ControllerGetCapabilities,
// NodePublishVolume, …) are always allowed. The fake does not implement
// the health RPCs, so it refuses them even when Config advertises their
// capability (GetVolumeHealth, ListVolumeHealth, GetStorageHealth).
func advertised(method string, c csi.ControllerCapabilities, n csi.NodeCapabilities) bool {
	switch method {
	case MethodCreateVolume, MethodDeleteVolume:
		return c.CreateDeleteVolume
	case MethodControllerPublishVolume, MethodControllerUnpublishVolume:
		return c.PublishUnpublishVolume
	case MethodListVolumes:
		return c.ListVolumes
	case MethodGetCapacity:
		return c.GetCapacity
	case MethodCreateSnapshot, MethodDeleteSnapshot:
		return c.CreateDeleteSnapshot
	case MethodListSnapshots:
		return c.ListSnapshots
	case MethodGetSnapshot:
		return c.GetSnapshot
	case MethodControllerExpandVolume:
		return c.ExpandVolume
	case MethodControllerGetVolume:
		return c.GetVolume
	case MethodControllerModifyVolume:
		return c.ModifyVolume
	case MethodNodeStageVolume, MethodNodeUnstageVolume:
		return n.StageUnstageVolume
	case MethodNodeGetVolumeStats:
		return n.GetVolumeStats
	case MethodNodeExpandVolume:
		return n.ExpandVolume
	case MethodControllerListVolumeHealth, MethodControllerGetVolumeHealth,
		MethodNodeGetVolumeHealth, MethodNodeGetStorageHealth:
		return false
	}
	return true
}

// methodName accepts a bare RPC name or a full gRPC method
// ("/csi.v1.Node/NodePublishVolume") and returns the bare name. An
// unknown name is a bug in the test that passed it, so it panics: a
// misspelt fault knob would otherwise never fire and the test would pass
// for the wrong reason.
func methodName(m string) string {
	b := path.Base(m)
	if serviceOf(b) == serviceNone {
		panic(fmt.Sprintf("csitest: unknown CSI method %q; use one of the csitest.Method… constants", m))
	}
	return b
}
