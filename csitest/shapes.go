package csitest

import "github.com/csikit/csikit/csi"

// Shape is one way a plugin may legally answer, written as a change to a
// Config, so that a test can run the same scenario over each.
type Shape struct {
	// Name is short, unique among Shapes and stable, fit for t.Run.
	Name string
	// Apply sets the knobs of this shape in cfg and leaves every other
	// field alone. It replaces pointers and maps rather than changing
	// what they point at, so a base Config copied by value before Apply
	// is not changed.
	Apply func(cfg *Config)
}

// The topology segment the "topology" shapes give a fake that has none,
// and the zone of the full pool of "capacity-by-topology".
const (
	shapeZoneKey      = "topology.csitest.csikit.io/zone"
	shapeZoneValue    = "zone-1"
	shapeFullZoneName = "zone-full"
)

// Shapes returns the answers the CSI spec allows a plugin to give a CO
// through claim, mount and release, one Shape each, in a fixed order:
//
//   - "default": the base Config unchanged;
//   - "publish-context-empty", "publish-context-absent":
//     ControllerPublishVolume returns an empty or no publish_context;
//   - "volume-context-empty", "volume-context-absent": created volumes
//     have an empty or no volume_context;
//   - "capacity-unknown": created volumes report capacity_bytes 0;
//   - "topology": the plugin advertises VOLUME_ACCESSIBILITY_CONSTRAINTS,
//     created volumes are accessible from one topology, and NodeGetInfo
//     reports the node in it (the base's Topology, or
//     topology.csitest.csikit.io/zone=zone-1 when it has none);
//   - "no-topology": no constraints, no volume, pool or node topology;
//   - "get-capacity": the controller advertises GET_CAPACITY, with one
//     pool accessible from everywhere and no volume size bounds
//     reported (maximum and minimum volume size unset);
//   - "capacity-by-topology": GET_CAPACITY and topology (as
//     "topology"), with two pools: one accessible from the node's
//     topology, with the capacity and a maximum volume size reported,
//     and one in topology.csitest.csikit.io/zone=zone-full without room,
//     so that a CreateVolume placed there fails ResourceExhausted;
//   - "get-volume": the controller advertises GET_VOLUME, whose status
//     lists the published nodes and has no condition (a CSI 1.13
//     plugin);
//   - "get-volume-condition": as "get-volume", plus the volume
//     condition a plugin of CSI 1.12 or earlier sends;
//   - "get-volume-no-status": as "get-volume", with no status at all;
//   - "no-stage": the node plugin lacks STAGE_UNSTAGE_VOLUME;
//   - "no-controller-publish": the controller lacks
//     PUBLISH_UNPUBLISH_VOLUME, so it never needs the node's ID;
//   - "node-only": no controller service at all;
//   - "sparse": every optional field a reply may leave out left out
//     (publish and volume contexts absent, capacity unknown, no
//     topology, no ControllerGetVolume status);
//   - "minimal": the least a plugin may be, a node plugin without
//     staging.
//
// Each shape takes one thing away from, or adds one to, the base, so
// start from a monolith with CreateDeleteVolume, PublishUnpublishVolume
// and StageUnstageVolume for every shape to differ from "default", and
// set its Type (csi.PluginTypeMonolith) rather than leave the default,
// so that the applied cfg.Type says what the fake serves. A plugin
// without a controller, or without CREATE_DELETE_VOLUME, cannot create
// the volume: the test then AddVolumes it, which it can tell from the
// applied Config (!cfg.Type.HasController() ||
// !cfg.Controller.CreateDeleteVolume). Timing is not a shape: slow and
// out-of-order replies come from Hold, HoldReplies and SetLatency on the
// running plugin, and combine with any shape.
//
// The slice and its shapes are new on each call and the caller's.
func Shapes() []Shape {
	noTopology := func(c *Config) {
		c.RequiresTopologies, c.Topology = false, nil
		pools := make([]Pool, len(c.Pools))
		for i, pool := range c.Pools {
			pools[i] = pool
			pools[i].Topology = nil
		}
		c.Pools = pools
	}
	topology := func(c *Config) {
		c.RequiresTopologies = true
		if c.Topology == nil {
			c.Topology = &csi.Topology{Segments: map[string]string{shapeZoneKey: shapeZoneValue}}
		}
	}
	getVolume := func(status StatusReply) func(c *Config) {
		return func(c *Config) { c.Controller.GetVolume, c.VolumeStatus = true, status }
	}
	nodeOnly := func(c *Config) {
		c.Type = csi.PluginTypeNode
		c.Controller = csi.ControllerCapabilities{}
	}
	noStage := func(c *Config) { c.Node.StageUnstageVolume = false }
	return []Shape{
		{"default", func(*Config) {}},
		{"publish-context-empty", func(c *Config) { c.PublishContext = ContextEmpty }},
		{"publish-context-absent", func(c *Config) { c.PublishContext = ContextAbsent }},
		{"volume-context-empty", func(c *Config) { c.VolumeContext = ContextEmpty }},
		{"volume-context-absent", func(c *Config) { c.VolumeContext = ContextAbsent }},
		{"capacity-unknown", func(c *Config) { c.UnknownCapacity = true }},
		{"topology", topology},
		{"no-topology", noTopology},
		{"get-capacity", func(c *Config) { c.Controller.GetCapacity = true }},
		{"capacity-by-topology", func(c *Config) {
			topology(c)
			c.Controller.GetCapacity = true
			room := c.AvailableCapacity
			if room == 0 {
				room = DefaultAvailableCapacity
			}
			c.AvailableCapacity = 0
			c.Pools = []Pool{
				{Topology: c.Topology.Copy(), Capacity: room, MaxVolumeSize: new(room)},
				{Topology: &csi.Topology{Segments: map[string]string{shapeZoneKey: shapeFullZoneName}}},
			}
		}},
		{"get-volume", getVolume(StatusPublishedNodes)},
		{"get-volume-condition", getVolume(StatusWithCondition)},
		{"get-volume-no-status", getVolume(StatusAbsent)},
		{"no-stage", noStage},
		{"no-controller-publish", func(c *Config) {
			// PUBLISH_READONLY means nothing without PUBLISH_UNPUBLISH.
			c.Controller.PublishUnpublishVolume, c.Controller.PublishReadonly = false, false
		}},
		{"node-only", nodeOnly},
		{"sparse", func(c *Config) {
			c.PublishContext, c.VolumeContext, c.UnknownCapacity = ContextAbsent, ContextAbsent, true
			c.VolumeStatus = StatusAbsent
			noTopology(c)
		}},
		{"minimal", func(c *Config) {
			nodeOnly(c)
			noStage(c)
		}},
	}
}
