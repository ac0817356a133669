package capacity

import (
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// Fit says whether a volume to be created fits the capacity one plugin
// reported for one topology and class. The zero value, FitUnknown, is
// no record at all.
type Fit uint8

// The fits.
const (
	// FitUnknown: no record for the topology and class (the controller
	// does not advertise GET_CAPACITY, the class is not one the
	// Refresher asks about, or no pass has run yet). Nothing is known
	// against the volume: Fits is true, and the create itself decides.
	FitUnknown Fit = iota
	// FitRoom: the record has room for the volume.
	FitRoom
	// FitNoRoom: Available is below the volume's size (or is 0).
	FitNoRoom
	// FitTooLarge: the volume's size is above MaximumVolumeSize.
	FitTooLarge
	// FitTooSmall: the volume's limit is below MinimumVolumeSize.
	FitTooSmall
)

var fitNames = [...]string{"unknown", "room", "no-room", "too-large", "too-small"}

func (f Fit) String() string {
	if int(f) < len(fitNames) {
		return fitNames[f]
	}
	return "fit(?)"
}

// Fits reports whether a create may be tried: FitRoom or FitUnknown.
func (f Fit) Fits() bool { return f == FitRoom || f == FitUnknown }

// Check is the fit of a volume of requiredBytes to limitBytes (the
// CreateVolume capacity range; 0 is unset, as in CSI) in one record.
// The volume's size is requiredBytes, raised to MinimumVolumeSize as a
// plugin does; a volume of no required size needs some room (Available
// above 0).
func Check(c *state.Capacity, requiredBytes, limitBytes int64) Fit {
	size := requiredBytes
	if m := c.MinimumVolumeSize; m != nil && *m > size {
		if limitBytes > 0 && *m > limitBytes {
			return FitTooSmall
		}
		size = *m
	}
	if m := c.MaximumVolumeSize; m != nil && size > *m {
		return FitTooLarge
	}
	if c.Available < max(size, 1) {
		return FitNoRoom
	}
	return FitRoom
}

// Room is the fit of one volume to be created in each topology a plugin
// reported capacity for, in one class. Build it once per create (it
// holds a map by topology key) and ask it per candidate node.
type Room struct {
	byTopology map[string]Fit
	withRoom   []*csi.Topology
}

// NewRoom checks a volume of class (state.ClassOf of its CreateVolume
// parameters) and capacity range against records (state's Capacity
// read of its plugin). Records of other classes are ignored. Room keeps
// the records' topologies: do not change them while it is in use.
func NewRoom(records []state.Capacity, class string, requiredBytes, limitBytes int64) *Room {
	r := &Room{byTopology: map[string]Fit{}}
	for i := range records {
		c := &records[i]
		if c.Class != class {
			continue
		}
		f := Check(c, requiredBytes, limitBytes)
		r.byTopology[state.TopologyKey(c.Topology)] = f
		if f == FitRoom {
			r.withRoom = append(r.withRoom, c.Topology)
		}
	}
	return r
}

// Node is the fit on a node whose node plugin reports the accessible
// topology topo (csi.NodeInfo.Topology): the record of exactly that
// topology, which is what the Refresher asked about for the node.
func (r *Room) Node(topo *csi.Topology) Fit {
	return r.byTopology[state.TopologyKey(topo)]
}

// WithRoom returns the topologies whose record has room, in the order
// of the records (by topology key): the topologies a host may put in a
// CreateVolume's requisite list. The caller must not change them.
func (r *Room) WithRoom() []*csi.Topology { return r.withRoom }
