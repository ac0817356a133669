package csitest

import (
	"fmt"
	"maps"
	"slices"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"

	"github.com/csikit/csikit/csi"
)

// MarkerFile is the file the fake writes into a staging directory and a
// mount target to stand in for the mounted file system. It holds the
// volume ID.
const MarkerFile = "csitest-volume"

// volume is the model of one volume; p.mu guards it.
type volume struct {
	id, name          string
	capacity          int64
	context           map[string]string
	parameters        map[string]string
	mutableParameters map[string]string
	capabilities      []*csipb.VolumeCapability // nil: any (AddVolume)
	source            *csipb.VolumeContentSource
	topology          []*csipb.Topology
	pool              int // index in p.pools, or noPool
	abnormal          bool
	conditionMessage  string
	health            volumeHealth            // node-side condition and usage (health.go)
	attachments       map[string]*attachment  // by CSI node ID
	staged            map[string]*staging     // by staging path
	published         map[string]*publication // by target path
}

type attachment struct {
	readonly       bool
	capability     *csipb.VolumeCapability
	publishContext map[string]string
}

type staging struct {
	capability     *csipb.VolumeCapability
	publishContext map[string]string
	volumeContext  map[string]string
}

type publication struct {
	stagingPath    string
	readonly       bool
	capability     *csipb.VolumeCapability
	publishContext map[string]string
	volumeContext  map[string]string
}

func newVolume(id string) *volume {
	return &volume{
		id:          id,
		pool:        noPool,
		attachments: make(map[string]*attachment),
		staged:      make(map[string]*staging),
		published:   make(map[string]*publication),
	}
}

func (v *volume) inUse() bool {
	return len(v.attachments)+len(v.staged)+len(v.published) > 0
}

// toProto is the volume as the controller RPCs report it; with
// unknownCapacity its capacity_bytes is 0, "unknown" in the spec.
func (v *volume) toProto(unknownCapacity bool) *csipb.Volume {
	out := &csipb.Volume{
		VolumeId:      v.id,
		CapacityBytes: v.capacity,
		VolumeContext: maps.Clone(v.context),
	}
	if unknownCapacity {
		out.CapacityBytes = 0
	}
	if v.source != nil {
		out.ContentSource = proto.Clone(v.source).(*csipb.VolumeContentSource)
	}
	for _, t := range v.topology {
		out.AccessibleTopology = append(out.AccessibleTopology, proto.Clone(t).(*csipb.Topology))
	}
	return out
}

func (v *volume) attachedNodes() []string {
	return slices.Sorted(maps.Keys(v.attachments))
}

type snapshot struct {
	id, name, source string
	size             int64
	created          time.Time
	// answers counts the replies that reported the snapshot; ready is
	// set once one reported it ready (snapshots.go).
	answers int
	ready   bool
}

// VolumeState is a snapshot of one volume in the fake's model. Its maps
// are copies the caller owns.
type VolumeState struct {
	ID string
	// Name is the CreateVolume name; empty for AddVolume.
	Name     string
	Capacity int64
	// Context is the volume context CreateVolume returned (or AddVolume
	// was given).
	Context map[string]string
	// Parameters are CreateVolume's parameters; MutableParameters its
	// mutable parameters as changed by ControllerModifyVolume.
	Parameters        map[string]string
	MutableParameters map[string]string
	// Topologies are the volume's accessible topologies as CreateVolume
	// reported them; nil for a volume accessible from everywhere.
	Topologies []*csi.Topology
	// Pool is the index in Config.Pools of the pool CreateVolume placed
	// the volume in, or -1 when Config.Pools is empty or the volume did
	// not come from CreateVolume.
	Pool int
	// Abnormal and ConditionMessage are the volume's condition
	// (SetVolumeCondition).
	Abnormal         bool
	ConditionMessage string
	// Attachments are the ControllerPublishVolume attachments by CSI node
	// ID.
	Attachments map[string]Attachment
	// Staged are the NodeStageVolume stagings by staging path.
	Staged map[string]Staging
	// Published are the NodePublishVolume publications by target path.
	Published map[string]Publication
}

// AttachedNodes returns the CSI node IDs the volume is attached to,
// sorted.
func (v VolumeState) AttachedNodes() []string { return slices.Sorted(maps.Keys(v.Attachments)) }

// InUse reports whether the volume is attached, staged or published.
func (v VolumeState) InUse() bool {
	return len(v.Attachments)+len(v.Staged)+len(v.Published) > 0
}

// Attachment is one ControllerPublishVolume of a volume to a node.
type Attachment struct {
	NodeID       string
	Readonly     bool
	Capability   csi.Capability
	MountOptions *csi.MountOptions // nil for a block attachment
	// PublishContext is what ControllerPublishVolume returned.
	PublishContext map[string]string
}

// Staging is one NodeStageVolume of a volume.
type Staging struct {
	Path         string
	Capability   csi.Capability
	MountOptions *csi.MountOptions
	// PublishContext and VolumeContext are what NodeStageVolume received.
	PublishContext map[string]string
	VolumeContext  map[string]string
}

// Publication is one NodePublishVolume of a volume.
type Publication struct {
	TargetPath   string
	StagingPath  string
	Readonly     bool
	Capability   csi.Capability
	MountOptions *csi.MountOptions
	// PublishContext and VolumeContext are what NodePublishVolume
	// received.
	PublishContext map[string]string
	VolumeContext  map[string]string
}

// SnapshotState is a snapshot of one CSI snapshot in the fake's model.
type SnapshotState struct {
	ID, Name       string
	SourceVolumeID string
	Size           int64
	CreatedAt      time.Time
	// ReadyToUse: a reply has reported the snapshot ready (see
	// Config.SnapshotReadyAfter).
	ReadyToUse bool
}

// state copies v; explicitPools says whether v.pool is a Config.Pools
// index.
func (v *volume) state(explicitPools bool) VolumeState {
	s := VolumeState{
		ID:                v.id,
		Name:              v.name,
		Capacity:          v.capacity,
		Context:           maps.Clone(v.context),
		Parameters:        maps.Clone(v.parameters),
		MutableParameters: maps.Clone(v.mutableParameters),
		Pool:              noPool,
		Abnormal:          v.abnormal,
		ConditionMessage:  v.conditionMessage,
		Attachments:       make(map[string]Attachment, len(v.attachments)),
		Staged:            make(map[string]Staging, len(v.staged)),
		Published:         make(map[string]Publication, len(v.published)),
	}
	if explicitPools {
		s.Pool = v.pool
	}
	for _, t := range v.topology {
		s.Topologies = append(s.Topologies, &csi.Topology{Segments: maps.Clone(t.GetSegments())})
	}
	for node, a := range v.attachments {
		c, mo := capabilityOf(a.capability)
		s.Attachments[node] = Attachment{NodeID: node, Readonly: a.readonly, Capability: c, MountOptions: mo,
			PublishContext: maps.Clone(a.publishContext)}
	}
	for path, st := range v.staged {
		c, mo := capabilityOf(st.capability)
		s.Staged[path] = Staging{Path: path, Capability: c, MountOptions: mo,
			PublishContext: maps.Clone(st.publishContext), VolumeContext: maps.Clone(st.volumeContext)}
	}
	for path, pub := range v.published {
		c, mo := capabilityOf(pub.capability)
		s.Published[path] = Publication{TargetPath: path, StagingPath: pub.stagingPath, Readonly: pub.readonly,
			Capability: c, MountOptions: mo,
			PublishContext: maps.Clone(pub.publishContext), VolumeContext: maps.Clone(pub.volumeContext)}
	}
	return s
}

// capabilityOf converts a CSI volume capability to csikit's vocabulary.
func capabilityOf(vc *csipb.VolumeCapability) (csi.Capability, *csi.MountOptions) {
	c := csi.Capability{AccessMode: csi.AccessMode(vc.GetAccessMode().GetMode())}
	if vc.GetBlock() != nil {
		c.AttachmentMode = csi.AttachmentModeBlockDevice
		return c, nil
	}
	if m := vc.GetMount(); m != nil {
		c.AttachmentMode = csi.AttachmentModeFileSystem
		return c, &csi.MountOptions{
			FSType:           m.GetFsType(),
			MountFlags:       slices.Clone(m.GetMountFlags()),
			VolumeMountGroup: m.GetVolumeMountGroup(),
		}
	}
	return c, nil
}

// AddVolume puts a pre-provisioned volume in the model, as a host
// registering an existing volume would expect to find it. When the
// volume exists its capacity and context are replaced and its
// attachments, stagings and publications kept. An empty id panics (a
// test bug).
func (p *Plugin) AddVolume(id string, capacity int64, volumeContext map[string]string) {
	if id == "" {
		panic("csitest: AddVolume with an empty volume ID")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.volumes[id]
	if v == nil {
		v = newVolume(id)
		v.pool = p.defaultPool()
		p.volumes[id] = v
	}
	v.capacity, v.context = capacity, maps.Clone(volumeContext)
}

// SetVolumeCondition sets the condition ControllerGetVolume reports for
// a volume under StatusWithCondition, abnormal with a message or, with
// abnormal false, normal again. It reports whether the volume exists.
func (p *Plugin) SetVolumeCondition(id string, abnormal bool, message string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.volumes[id]
	if v == nil {
		return false
	}
	v.abnormal, v.conditionMessage = abnormal, message
	return true
}

// RemoveVolume deletes a volume from the model behind the CO's back, as
// when it is deleted out of band. It reports whether the volume existed.
func (p *Plugin) RemoveVolume(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.volumes[id]
	delete(p.volumes, id)
	return ok
}

// Volume returns a snapshot of one volume and whether it exists.
func (p *Plugin) Volume(id string) (VolumeState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.volumes[id]
	if !ok {
		return VolumeState{}, false
	}
	return v.state(p.explicitPools), true
}

// Volumes returns snapshots of every volume, sorted by ID.
func (p *Plugin) Volumes() []VolumeState {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]VolumeState, 0, len(p.volumes))
	for _, id := range slices.Sorted(maps.Keys(p.volumes)) {
		out = append(out, p.volumes[id].state(p.explicitPools))
	}
	return out
}

// Attachments returns the controller attachments the plugin believes
// in: for every volume ControllerPublished to at least one node, the CSI
// node IDs it is published to, sorted. A volume with no attachment is
// left out, so a plugin with none returns an empty map (never nil). The
// map and slices are the caller's. An attachment is recorded whatever
// publish context ControllerPublishVolume returned (Config.PublishContext),
// so a test can compare this with a CO's attachment records under every
// shape.
func (p *Plugin) Attachments() map[string][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][]string)
	for id, v := range p.volumes {
		if len(v.attachments) > 0 {
			out[id] = v.attachedNodes()
		}
	}
	return out
}

// Snapshot returns one CSI snapshot of the model and whether it exists.
func (p *Plugin) Snapshot(id string) (SnapshotState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.snapshots[id]
	if !ok {
		return SnapshotState{}, false
	}
	return SnapshotState{ID: s.id, Name: s.name, SourceVolumeID: s.source, Size: s.size, CreatedAt: s.created, ReadyToUse: s.ready}, true
}

// attachmentsOnLocked counts the volumes attached to a node; p.mu is
// held.
func (p *Plugin) attachmentsOnLocked(node string) int64 {
	var n int64
	for _, v := range p.volumes {
		if v.attachments[node] != nil {
			n++
		}
	}
	return n
}

func seqID(prefix string, n int) string { return fmt.Sprintf("%s-%d", prefix, n) }
