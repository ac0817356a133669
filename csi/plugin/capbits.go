package plugin

// The capability flags: each table pairs a flag of a csikit struct with
// the spec value that advertises it, and serves both directions, so a
// flag added to a struct is converted once both ways (see convert.go).

import (
	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
)

// capBit pairs one capability flag of a csikit struct with the spec
// value that advertises it.
type capBit[T comparable] struct {
	value T
	on    *bool
}

// setBit turns on the flag advertised by v; a value no bit names (an
// unknown or newer capability) is ignored.
func setBit[T comparable](bits []capBit[T], v T) {
	for _, b := range bits {
		if b.value == v {
			*b.on = true
			return
		}
	}
}

// bitsToPB wraps the value of every flag that is on, in the table's
// order.
func bitsToPB[T comparable, M any](bits []capBit[T], wrap func(T) M) []M {
	var out []M
	for _, b := range bits {
		if *b.on {
			out = append(out, wrap(b.value))
		}
	}
	return out
}

// The …Bits functions return arrays, not slices, so that a conversion
// allocates no table.

// pluginServiceBits and pluginExpansionBits are the table behind
// pluginCapsFromPB and pluginCapsToPB, over the flags of c.
func pluginServiceBits(c *Capabilities) [5]capBit[csipb.PluginCapability_Service_Type] {
	return [...]capBit[csipb.PluginCapability_Service_Type]{
		{csipb.PluginCapability_Service_CONTROLLER_SERVICE, &c.ControllerService},
		{csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS, &c.VolumeAccessibilityConstraints},
		{csipb.PluginCapability_Service_GROUP_CONTROLLER_SERVICE, &c.GroupControllerService},
		{csipb.PluginCapability_Service_SNAPSHOT_METADATA_SERVICE, &c.SnapshotMetadataService},
		{csipb.PluginCapability_Service_SNAPSHOT_ACCESSIBILITY_CONSTRAINTS, &c.SnapshotAccessibilityConstraints},
	}
}

func pluginExpansionBits(c *Capabilities) [2]capBit[csipb.PluginCapability_VolumeExpansion_Type] {
	return [...]capBit[csipb.PluginCapability_VolumeExpansion_Type]{
		{csipb.PluginCapability_VolumeExpansion_ONLINE, &c.OnlineExpansion},
		{csipb.PluginCapability_VolumeExpansion_OFFLINE, &c.OfflineExpansion},
	}
}

// pluginCapsFromPB folds GetPluginCapabilities' list into a struct;
// unknown capabilities are ignored.
func pluginCapsFromPB(list []*csipb.PluginCapability) Capabilities {
	var c Capabilities
	svc, exp := pluginServiceBits(&c), pluginExpansionBits(&c)
	for _, x := range list {
		setBit(svc[:], x.GetService().GetType())
		setBit(exp[:], x.GetVolumeExpansion().GetType())
	}
	return c
}

// pluginCapsToPB is the inverse of pluginCapsFromPB.
func pluginCapsToPB(c Capabilities) []*csipb.PluginCapability {
	svcBits, expBits := pluginServiceBits(&c), pluginExpansionBits(&c)
	svc := bitsToPB(svcBits[:], func(t csipb.PluginCapability_Service_Type) *csipb.PluginCapability {
		return &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{
			Service: &csipb.PluginCapability_Service{Type: t}}}
	})
	exp := bitsToPB(expBits[:], func(t csipb.PluginCapability_VolumeExpansion_Type) *csipb.PluginCapability {
		return &csipb.PluginCapability{Type: &csipb.PluginCapability_VolumeExpansion_{
			VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{Type: t}}}
	})
	return append(svc, exp...)
}

// controllerBits is the table behind controllerCapsFromPB and
// ControllerCapabilitiesToPB, over the flags of c, in the spec's enum order.
func controllerBits(c *csi.ControllerCapabilities) [16]capBit[csipb.ControllerServiceCapability_RPC_Type] {
	return [...]capBit[csipb.ControllerServiceCapability_RPC_Type]{
		{csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, &c.CreateDeleteVolume},
		{csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME, &c.PublishUnpublishVolume},
		{csipb.ControllerServiceCapability_RPC_LIST_VOLUMES, &c.ListVolumes},
		{csipb.ControllerServiceCapability_RPC_GET_CAPACITY, &c.GetCapacity},
		{csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT, &c.CreateDeleteSnapshot},
		{csipb.ControllerServiceCapability_RPC_LIST_SNAPSHOTS, &c.ListSnapshots},
		{csipb.ControllerServiceCapability_RPC_CLONE_VOLUME, &c.CloneVolume},
		{csipb.ControllerServiceCapability_RPC_PUBLISH_READONLY, &c.PublishReadonly},
		{csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME, &c.ExpandVolume},
		{csipb.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES, &c.ListVolumesPublishedNodes},
		{csipb.ControllerServiceCapability_RPC_GET_VOLUME, &c.GetVolume},
		{csipb.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER, &c.SingleNodeMultiWriter},
		{csipb.ControllerServiceCapability_RPC_MODIFY_VOLUME, &c.ModifyVolume},
		{csipb.ControllerServiceCapability_RPC_GET_SNAPSHOT, &c.GetSnapshot},
		{csipb.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH, &c.GetVolumeHealth},
		{csipb.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH, &c.ListVolumeHealth},
	}
}

// controllerCapsFromPB folds ControllerGetCapabilities' list into a
// struct; unknown capabilities are ignored. GetVolumeHealth is also read
// from the VOLUME_CONDITION value that plugins of older spec versions
// send.
func controllerCapsFromPB(list []*csipb.ControllerServiceCapability) csi.ControllerCapabilities {
	var c csi.ControllerCapabilities
	bits := controllerBits(&c)
	for _, x := range list {
		t := x.GetRpc().GetType()
		if t == legacyControllerVolumeCondition {
			t = csipb.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH
		}
		setBit(bits[:], t)
	}
	return c
}

// ControllerCapabilitiesToPB lists c as ControllerGetCapabilities
// answers it, in the spec's enum order: the inverse of what the client
// reads from a plugin. Like CapabilityToPB it is exported for code that
// speaks the spec directly (fake plugins), so that csikit keeps one
// table of the capability flags.
func ControllerCapabilitiesToPB(c csi.ControllerCapabilities) []*csipb.ControllerServiceCapability {
	bits := controllerBits(&c)
	return bitsToPB(bits[:], func(t csipb.ControllerServiceCapability_RPC_Type) *csipb.ControllerServiceCapability {
		return &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{
			Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}}}
	})
}

// nodeBits is the table behind nodeCapsFromPB and NodeCapabilitiesToPB, over
// the flags of c.
func nodeBits(c *csi.NodeCapabilities) [7]capBit[csipb.NodeServiceCapability_RPC_Type] {
	return [...]capBit[csipb.NodeServiceCapability_RPC_Type]{
		{csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, &c.StageUnstageVolume},
		{csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS, &c.GetVolumeStats},
		{csipb.NodeServiceCapability_RPC_EXPAND_VOLUME, &c.ExpandVolume},
		{csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER, &c.SingleNodeMultiWriter},
		{csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP, &c.VolumeMountGroup},
		{csipb.NodeServiceCapability_RPC_GET_VOLUME_HEALTH, &c.GetVolumeHealth},
		{csipb.NodeServiceCapability_RPC_GET_STORAGE_HEALTH, &c.GetStorageHealth},
	}
}

// nodeCapsFromPB folds NodeGetCapabilities' list into a struct; unknown
// capabilities are ignored. GetVolumeHealth is read as for controllers.
func nodeCapsFromPB(list []*csipb.NodeServiceCapability) csi.NodeCapabilities {
	var c csi.NodeCapabilities
	bits := nodeBits(&c)
	for _, x := range list {
		t := x.GetRpc().GetType()
		if t == legacyNodeVolumeCondition {
			t = csipb.NodeServiceCapability_RPC_GET_VOLUME_HEALTH
		}
		setBit(bits[:], t)
	}
	return c
}

// NodeCapabilitiesToPB lists c as NodeGetCapabilities answers it, in
// the spec's enum order: the inverse of what the client reads from a
// plugin. See ControllerCapabilitiesToPB.
func NodeCapabilitiesToPB(c csi.NodeCapabilities) []*csipb.NodeServiceCapability {
	bits := nodeBits(&c)
	return bitsToPB(bits[:], func(t csipb.NodeServiceCapability_RPC_Type) *csipb.NodeServiceCapability {
		return &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}}
	})
}
