package csitest

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/csikit/csikit/csi"
)

// Pool is storage the fake provisions volumes from: one topology and
// one parameters class, with a capacity that CreateVolume draws from,
// ControllerExpandVolume grows into, DeleteVolume gives back and
// GetCapacity reports. Config.Pools lists them; see there for how
// CreateVolume chooses one.
type Pool struct {
	// Topology is where the pool's volumes are accessible from: their
	// accessible_topology. Nil means everywhere (a volume without
	// accessible_topology). A pool with a topology needs
	// Config.RequiresTopologies.
	Topology *csi.Topology
	// Parameters is the pool's class: it serves the CreateVolume and
	// GetCapacity requests whose parameters hold every one of these
	// pairs (and any others). Empty serves every request.
	Parameters map[string]string
	// Capacity is how many bytes the pool's volumes may hold in all. 0
	// is a pool with no room at all.
	Capacity int64
	// MaxVolumeSize and MinVolumeSize, when set, bound the size of one
	// volume of the pool: CreateVolume answers OutOfRange for a range
	// outside them, makes a volume of MinVolumeSize when the request
	// asks for less, and GetCapacity reports maximum_volume_size and
	// minimum_volume_size. Nil bounds are not reported.
	MaxVolumeSize *int64
	MinVolumeSize *int64
}

// noPool is the pool index of a volume that draws from no pool.
const noPool = -1

func (c Pool) copy() Pool {
	c.Topology = c.Topology.Copy()
	c.Parameters = maps.Clone(c.Parameters)
	if c.MaxVolumeSize != nil {
		c.MaxVolumeSize = new(*c.MaxVolumeSize)
	}
	if c.MinVolumeSize != nil {
		c.MinVolumeSize = new(*c.MinVolumeSize)
	}
	return c
}

func (c Pool) validate(i int, requiresTopologies bool) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: csitest: Pools[%d]: %s", csi.ErrInvalidRequest, i, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Capacity < 0:
		return bad("Capacity is %d; use 0 for a full pool or a positive number of bytes", c.Capacity)
	case c.MaxVolumeSize != nil && *c.MaxVolumeSize < 0:
		return bad("MaxVolumeSize is %d; use nil for no bound", *c.MaxVolumeSize)
	case c.MinVolumeSize != nil && *c.MinVolumeSize < 0:
		return bad("MinVolumeSize is %d; use nil for no bound", *c.MinVolumeSize)
	case c.MaxVolumeSize != nil && c.MinVolumeSize != nil && *c.MinVolumeSize > *c.MaxVolumeSize:
		return bad("MinVolumeSize (%d) exceeds MaxVolumeSize (%d)", *c.MinVolumeSize, *c.MaxVolumeSize)
	case c.Topology != nil && !requiresTopologies:
		return bad("has Topology %s but the plugin does not set RequiresTopologies, so its volumes would have no accessible topology", c.Topology)
	}
	return nil
}

// serves reports whether the pool's class takes a request with params.
func (c Pool) serves(params map[string]string) bool {
	for k, v := range c.Parameters {
		if w, ok := params[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// reachableFrom reports whether the pool's volumes are accessible from
// the topology t, by csikit's rule (csi.Reachable): every segment of the
// pool's topology is on t. A nil t asks for no place in particular.
func (c Pool) reachableFrom(t *csi.Topology) bool {
	return t == nil || c.Topology.Contains(t)
}

// size returns the capacity of a new volume of the pool for the range
// [req, lim] (0: unbounded), or false when the pool's bounds exclude it.
func (c Pool) size(req, lim int64) (int64, bool) {
	n := req
	if n == 0 {
		n = DefaultVolumeCapacity
		if lim > 0 {
			n = min(n, lim)
		}
	}
	if mn := c.MinVolumeSize; mn != nil && n < *mn {
		if lim > 0 && lim < *mn {
			return 0, false
		}
		n = *mn
	}
	if mx := c.MaxVolumeSize; mx != nil && n > *mx {
		if req > *mx {
			return 0, false
		}
		n = *mx
	}
	return n, true
}

func (c Pool) String() string {
	s := "{" + c.Topology.String() + "}"
	if len(c.Parameters) > 0 {
		s += fmt.Sprintf(" class %v", c.Parameters)
	}
	return s
}

func topologyOf(t *csipb.Topology) *csi.Topology {
	if t == nil {
		return nil
	}
	return &csi.Topology{Segments: t.GetSegments()}
}

// usedLocked is the capacity held by the volumes of pool i; p.mu is
// held.
func (p *Plugin) usedLocked(i int) int64 {
	var n int64
	for _, v := range p.volumes {
		if v.pool == i {
			n += v.capacity
		}
	}
	return n
}

// availableLocked is the room left in pool i, or unlimited for a volume
// of no pool; p.mu is held.
func (p *Plugin) availableLocked(i int) int64 {
	if i == noPool {
		return 1<<63 - 1
	}
	return max(p.pools[i].Capacity-p.usedLocked(i), 0)
}

// defaultPool is the pool of a volume that AddVolume or
// AdmitUnknownVolumes puts in the model: the one implicit pool of
// AvailableCapacity, or none when Config.Pools is set.
func (p *Plugin) defaultPool() int {
	if p.explicitPools {
		return noPool
	}
	return 0
}

// checkPreferred refuses a requirement whose preferred topologies are
// not all requisite ones, which the spec forbids a CO to send.
func checkPreferred(method string, r *csipb.TopologyRequirement) error {
	if len(r.GetRequisite()) == 0 {
		return nil
	}
	for i, pt := range r.GetPreferred() {
		if !slices.ContainsFunc(r.GetRequisite(), func(rt *csipb.Topology) bool { return topologyOf(rt).Equal(topologyOf(pt)) }) {
			return errorf(codes.InvalidArgument, method, "accessibility_requirements.preferred[%d] %v is not among the requisite topologies; the spec requires every preferred topology to be requisite too", i, pt.GetSegments())
		}
	}
	return nil
}

// satisfies reports whether a volume accessible from topo meets the
// requisite topologies r: it is reachable from one of them, or r is
// empty.
func satisfies(topo []*csipb.Topology, r *csipb.TopologyRequirement) bool {
	if len(r.GetRequisite()) == 0 || len(topo) == 0 {
		return true
	}
	vol := make([]*csi.Topology, len(topo))
	for i, t := range topo {
		vol[i] = topologyOf(t)
	}
	return slices.ContainsFunc(r.GetRequisite(), func(rt *csipb.Topology) bool { return csi.Reachable(vol, topologyOf(rt)) })
}

// placement is where CreateVolume puts a new volume.
type placement struct {
	pool     int
	capacity int64
	topology []*csipb.Topology
}

// placeLocked chooses the pool of a new volume of req, whose capacity
// range is [reqBytes, limBytes]; p.mu is held.
//
// With Config.Pools it tries the pools of the request's class in this
// order: those accessible from each preferred topology in turn, then
// from each requisite topology in turn; without requisite topologies
// also those the fake's own node reaches, then every other one. The
// first whose bounds allow the range and that has room wins. Without
// Config.Pools there is one pool, accessible from wherever the request
// asks (see chooseTopologyLocked).
func (p *Plugin) placeLocked(m string, req *csipb.CreateVolumeRequest, reqBytes, limBytes int64) (placement, error) {
	r := req.GetAccessibilityRequirements()
	if err := checkPreferred(m, r); err != nil {
		return placement{}, err
	}
	name := req.GetName()
	if !p.explicitPools {
		n, _ := p.pools[0].size(reqBytes, limBytes)
		if avail := p.availableLocked(0); n > avail {
			return placement{}, errorf(codes.ResourceExhausted, m, "volume %q needs %d bytes but %d are available", name, n, avail)
		}
		pl := placement{pool: 0, capacity: n}
		if p.requiresTopologies {
			pl.topology = p.chooseTopologyLocked(r)
		}
		return pl, nil
	}

	var serving []int
	for i, pool := range p.pools {
		if pool.serves(req.GetParameters()) {
			serving = append(serving, i)
		}
	}
	if len(serving) == 0 {
		return placement{}, errorf(codes.InvalidArgument, m, "no pool serves the parameters %v of volume %q; the fake's pools are %s", req.GetParameters(), name, p.poolsString(nil))
	}
	var order []int
	add := func(t *csi.Topology) {
		for _, i := range serving {
			if p.pools[i].reachableFrom(t) && !slices.Contains(order, i) {
				order = append(order, i)
			}
		}
	}
	for _, t := range r.GetPreferred() {
		add(topologyOf(t))
	}
	for _, t := range r.GetRequisite() {
		add(topologyOf(t))
	}
	if len(r.GetRequisite()) == 0 {
		if p.topology != nil {
			add(p.topology)
		}
		add(nil)
	}
	if len(order) == 0 {
		return placement{}, errorf(codes.ResourceExhausted, m, "no pool of the parameters of volume %q is accessible from the requisite topologies %s; the fake's pools are %s",
			name, requisiteString(r), p.poolsString(serving))
	}
	outOfRange := 0
	for _, i := range order {
		pool := p.pools[i]
		n, ok := pool.size(reqBytes, limBytes)
		if !ok {
			outOfRange++
			continue
		}
		if n > p.availableLocked(i) {
			continue
		}
		pl := placement{pool: i, capacity: n}
		if pool.Topology != nil {
			pl.topology = []*csipb.Topology{{Segments: maps.Clone(pool.Topology.Segments)}}
		}
		return pl, nil
	}
	if outOfRange == len(order) {
		return placement{}, errorf(codes.OutOfRange, m, "capacity range [%d, %d] of volume %q is outside the volume sizes of pools %s",
			reqBytes, limBytes, name, p.poolsString(order))
	}
	return placement{}, errorf(codes.ResourceExhausted, m, "volume %q does not fit in the pools accessible from %s: %s",
		name, requisiteString(r), p.poolsString(order))
}

// chooseTopologyLocked places a new volume of the implicit pool: the
// first preferred topology, else the first requisite one, else this
// fake's node.
func (p *Plugin) chooseTopologyLocked(r *csipb.TopologyRequirement) []*csipb.Topology {
	var t *csipb.Topology
	switch {
	case len(r.GetPreferred()) > 0:
		t = r.GetPreferred()[0]
	case len(r.GetRequisite()) > 0:
		t = r.GetRequisite()[0]
	case p.topology != nil:
		t = &csipb.Topology{Segments: maps.Clone(p.topology.Segments)}
	default:
		return nil
	}
	return []*csipb.Topology{proto.Clone(t).(*csipb.Topology)}
}

func requisiteString(r *csipb.TopologyRequirement) string {
	if len(r.GetRequisite()) == 0 {
		return "anywhere"
	}
	ts := make([]*csi.Topology, len(r.GetRequisite()))
	for i, t := range r.GetRequisite() {
		ts[i] = topologyOf(t)
	}
	return csi.TopologiesString(ts)
}

// poolsString lists pools (all when idx is nil) with the room left in
// each, for error messages; p.mu is held.
func (p *Plugin) poolsString(idx []int) string {
	if idx == nil {
		for i := range p.pools {
			idx = append(idx, i)
		}
	}
	s := make([]string, len(idx))
	for j, i := range idx {
		s[j] = fmt.Sprintf("%s with %d of %d bytes free", p.pools[i], p.availableLocked(i), p.pools[i].Capacity)
	}
	return strings.Join(s, "; ")
}

// capacityLocked answers GetCapacity: the room left in the pools that
// serve the parameters and whose volumes are accessible from the
// topology; p.mu is held. maximum_volume_size, when a pool bounds it,
// is the largest volume one of them can still take, and
// minimum_volume_size the smallest bound among them.
func (p *Plugin) capacityLocked(req *csipb.GetCapacityRequest) *csipb.GetCapacityResponse {
	t := topologyOf(req.GetAccessibleTopology())
	resp := &csipb.GetCapacityResponse{}
	var largest, smallest int64 = 0, 1<<63 - 1
	var hasMax, hasMin bool
	for i, pool := range p.pools {
		if !pool.serves(req.GetParameters()) || !pool.reachableFrom(t) {
			continue
		}
		free := p.availableLocked(i)
		resp.AvailableCapacity += free
		one := free
		if mx := pool.MaxVolumeSize; mx != nil {
			hasMax = true
			one = min(free, *mx)
		}
		largest = max(largest, one)
		var mn int64
		if pool.MinVolumeSize != nil {
			hasMin, mn = true, *pool.MinVolumeSize
		}
		smallest = min(smallest, mn)
	}
	if hasMax {
		resp.MaximumVolumeSize = wrapperspb.Int64(largest)
	}
	if hasMin {
		resp.MinimumVolumeSize = wrapperspb.Int64(smallest)
	}
	return resp
}
