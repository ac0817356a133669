package state

import (
	"maps"

	"github.com/csikit/csikit/csi"
)

// viewChunk bounds how many volumes share one allocation in a read's
// copies. A caller that keeps one volume of a long list keeps its chunk
// alive: at most a few tens of kilobytes.
const viewChunk = 64

// viewVolumes returns copies of stored volumes, with their plugins'
// fields filled in, for a read. The copies are what csi.Volume.Copy
// makes (the caller owns every map, slice and pointer in them), built
// with fewer allocations: the structs, the claims and the capabilities
// of a chunk of volumes each come from one slice.
func (d *db) viewVolumes(rows []*volRow) []*csi.Volume {
	out := make([]*csi.Volume, len(rows))
	var pc pluginCache
	for start := 0; start < len(rows); start += viewChunk {
		chunk := rows[start:min(start+viewChunk, len(rows))]
		claims, caps := 0, 0
		for _, r := range chunk {
			claims += len(r.v.ReadClaims) + len(r.v.WriteClaims) + len(r.v.PastClaims)
			caps += len(r.v.Capabilities)
		}
		vols := make([]csi.Volume, len(chunk))
		cs := make([]csi.Claim, claims)
		cp := make([]csi.Capability, caps)
		for i, r := range chunk {
			v := &r.v
			c := &vols[i]
			*c = *v
			if v.Capabilities != nil {
				n := copy(cp, v.Capabilities)
				c.Capabilities, cp = cp[:n:n], cp[n:]
			}
			c.MountOptions = v.MountOptions.Copy()
			c.Parameters, c.Context, c.Secrets = r.attrs.maps()
			c.RequestedTopologies = v.RequestedTopologies.Copy()
			if v.Topologies != nil {
				c.Topologies = make([]*csi.Topology, len(v.Topologies))
				for j, t := range v.Topologies {
					c.Topologies[j] = t.Copy()
				}
			}
			c.ReadClaims, cs = copyClaims(v.ReadClaims, cs)
			c.WriteClaims, cs = copyClaims(v.WriteClaims, cs)
			c.PastClaims, cs = copyClaims(v.PastClaims, cs)
			pc.fill(d, c)
			out[start+i] = c
		}
	}
	return out
}

// copyClaims copies a claim map, its claims into the front of slab, and
// returns the copy and the rest of slab.
func copyClaims(m map[string]*csi.Claim, slab []csi.Claim) (map[string]*csi.Claim, []csi.Claim) {
	if m == nil {
		return nil, slab
	}
	out := make(map[string]*csi.Claim, len(m))
	for id, c := range m {
		d := &slab[0]
		slab = slab[1:]
		*d = *c
		d.MountOptions = c.MountOptions.Copy()
		d.PublishContext = maps.Clone(c.PublishContext)
		out[id] = d
	}
	return out, slab
}

// pluginCache remembers the last plugin a read looked up: the volumes of
// a list mostly share one.
type pluginCache struct {
	id string
	p  *csi.Plugin
	ok bool
}

// fill sets a volume copy's fields that come from its plugin.
func (pc *pluginCache) fill(d *db, v *csi.Volume) {
	if !pc.ok || pc.id != v.PluginID {
		pc.id, pc.p, pc.ok = v.PluginID, d.plugin(v.PluginID), true
	}
	p := pc.p
	if p == nil {
		return
	}
	if p.Provider != "" {
		v.Provider = p.Provider
	}
	v.ControllerRequired = p.ControllerRequired
	v.Schedulable = p.Schedulable()
	v.ControllersHealthy = p.ControllersHealthy
	v.ControllersExpected = p.ControllersExpected
	v.NodesHealthy = p.NodesHealthy
	v.NodesExpected = p.NodesExpected
}
