// health.go lets a test make the fake's storage go wrong on demand, the
// way a real backend does behind the CO's back: a volume whose node side
// turns abnormal, a volume filling up, an attachment made out of band (a
// leak) or one the backend lost (vanished). The controller side's
// condition is SetVolumeCondition's (model.go).

package csitest

import (
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// volumeHealth is what the node side reports for a volume; p.mu guards
// it.
type volumeHealth struct {
	nodeAbnormal bool
	nodeMessage  string
	usage        *Usage // nil: the volume's capacity, all of it free
}

// Usage is what NodeGetVolumeStats reports for a volume
// (SetVolumeUsage): bytes used of the volume's capacity, and inodes
// used of InodesTotal (no inode entry when InodesTotal is 0).
type Usage struct {
	UsedBytes   int64
	UsedInodes  int64
	InodesTotal int64
}

// SetNodeVolumeCondition sets the condition NodeGetVolumeStats reports
// for a volume, abnormal with a message or, with abnormal false, normal
// again. The fake sends it only while it advertises the node's
// GetVolumeHealth (which csikit reads from VOLUME_CONDITION too), in
// field 2 of the response, the way a plugin built on CSI 1.3 to 1.12
// does. It reports whether the volume exists.
func (p *Plugin) SetNodeVolumeCondition(id string, abnormal bool, message string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.volumes[id]
	if v == nil {
		return false
	}
	v.health.nodeAbnormal, v.health.nodeMessage = abnormal, message
	return true
}

// SetVolumeUsage sets the usage NodeGetVolumeStats reports for a volume.
// It reports whether the volume exists.
func (p *Plugin) SetVolumeUsage(id string, u Usage) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.volumes[id]
	if v == nil {
		return false
	}
	v.health.usage = &u
	return true
}

// AttachOutOfBand attaches a volume to a CSI node behind the CO's back,
// as a leaked attachment (an earlier CO, an operator, a crashed attach
// the CO forgot) looks to it: ListVolumes and ControllerGetVolume list
// the node, and ControllerUnpublishVolume detaches it. The lifecycle
// checker counts it like any attachment. It reports whether the volume
// exists.
func (p *Plugin) AttachOutOfBand(id, nodeID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.volumes[id]
	if v == nil {
		return false
	}
	if v.attachments[nodeID] == nil {
		v.attachments[nodeID] = &attachment{}
	}
	return true
}

// DropAttachment makes the backend lose the attachment of a volume to a
// CSI node, as a storage array that detached it on its own does: the
// node is no longer listed and the CO's record is left without its
// attachment. It reports whether there was one.
func (p *Plugin) DropAttachment(id, nodeID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.volumes[id]
	if v == nil || v.attachments[nodeID] == nil {
		return false
	}
	delete(v.attachments, nodeID)
	return true
}

// volumeStatsLocked is NodeGetVolumeStats' answer for v; p.mu is held.
func (p *Plugin) volumeStatsLocked(v *volume) *csipb.NodeGetVolumeStatsResponse {
	u := v.health.usage
	if u == nil {
		u = &Usage{}
	}
	resp := &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{{
		Unit:      csipb.VolumeUsage_BYTES,
		Total:     v.capacity,
		Used:      u.UsedBytes,
		Available: max(v.capacity-u.UsedBytes, 0),
	}}}
	if u.InodesTotal > 0 {
		resp.Usage = append(resp.Usage, &csipb.VolumeUsage{Unit: csipb.VolumeUsage_INODES,
			Total: u.InodesTotal, Used: u.UsedInodes, Available: max(u.InodesTotal-u.UsedInodes, 0)})
	}
	if p.nodeCaps.GetVolumeHealth {
		setLegacyCondition(resp, v.health.nodeAbnormal, v.health.nodeMessage)
	}
	return resp
}

// setLegacyCondition adds a volume condition to msg (a volume status or
// NodeGetVolumeStats' response) as a plugin of CSI 1.3 to 1.12 encodes
// it: field 2, a VolumeCondition message of abnormal (field 1, bool) and
// message (field 2, string). The spec types of 1.13 have no such field,
// so it travels as an unknown field, which protobuf marshals as it is.
func setLegacyCondition(msg proto.Message, abnormal bool, message string) {
	var cond []byte
	if abnormal {
		cond = protowire.AppendTag(cond, 1, protowire.VarintType)
		cond = protowire.AppendVarint(cond, 1)
	}
	if message != "" {
		cond = protowire.AppendTag(cond, 2, protowire.BytesType)
		cond = protowire.AppendString(cond, message)
	}
	b := protowire.AppendTag(nil, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, cond)
	msg.ProtoReflect().SetUnknown(b)
}
