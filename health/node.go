package health

import (
	"context"
	"maps"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// nodeCall is one NodeGetVolumeStats of a pass.
type nodeCall struct {
	vol       *csi.Volume
	node      string
	condition bool // the node advertises conditions
	stats     *plugin.VolumeStats
	err       error
}

// nodeStats reads the usage and condition of each volume on each node
// where a live claim has it staged or published and the node plugin
// advertises GET_VOLUME_STATS, and drops the node reports of volumes no
// longer there.
func (m *Monitor) nodeStats(ctx context.Context, p *csi.Plugin, vols []*csi.Volume, ps *pass) {
	var calls []*nodeCall
	asked := map[state.VolumeKey]map[string]bool{} // the volumes with a call, by node
	for _, v := range vols {
		k := state.VolumeKey{Namespace: v.Namespace, ID: v.ID}
		for _, node := range liveNodes(v) {
			in := p.Nodes[node]
			if in == nil || !in.Healthy || in.NodeInfo == nil || !in.NodeInfo.Capabilities.GetVolumeStats {
				continue
			}
			if asked[k] == nil {
				asked[k] = map[string]bool{}
			}
			asked[k][node] = true
			calls = append(calls, &nodeCall{vol: v, condition: in.NodeInfo.Capabilities.GetVolumeHealth,
				node: node})
		}
	}
	m.each(len(calls), func(i int) {
		c := calls[i]
		cctx, cancel := m.callCtx(ctx)
		defer cancel()
		c.stats, c.err = m.cfg.Nodes.VolumeStats(cctx, c.node, c.vol)
	})
	if ctx.Err() != nil {
		return
	}
	for _, c := range calls {
		switch {
		case notFound(c.err):
			asked[state.VolumeKey{Namespace: c.vol.Namespace, ID: c.vol.ID}][c.node] = false
		case c.err != nil:
			m.cfg.Logger.Warn("health: NodeGetVolumeStats failed; keeping the last report", "plugin", p.ID,
				"namespace", c.vol.Namespace, "volume", c.vol.ID, "node", c.node, "error", c.err)
		case c.stats != nil:
			m.nodeReport(p, c, ps)
		}
	}
	// Node reports of volumes no longer staged or published there go.
	for _, v := range vols {
		k := state.VolumeKey{Namespace: v.Namespace, ID: v.ID}
		old := ps.healths[k]
		if old == nil {
			continue
		}
		for _, node := range slices.Sorted(maps.Keys(old.Nodes)) {
			if !asked[k][node] {
				ps.reports = append(ps.reports, state.HealthReport{Namespace: k.Namespace, VolumeID: k.ID, NodeID: node, At: ps.now})
			}
		}
	}
}

// nodeReport adds a node's report when it differs from the stored one.
func (m *Monitor) nodeReport(p *csi.Plugin, c *nodeCall, ps *pass) {
	var cond *state.Condition
	if c.condition && c.stats.Condition != nil {
		cond = &state.Condition{Abnormal: c.stats.Condition.Abnormal, Message: c.stats.Condition.Message}
	}
	var u state.Usage
	if b := c.stats.Bytes; b != nil {
		u.BytesUsed, u.BytesTotal, u.BytesAvailable = max(b.Used, 0), max(b.Total, 0), max(b.Available, 0)
	}
	if n := c.stats.Inodes; n != nil {
		u.InodesUsed, u.InodesTotal, u.InodesAvailable = max(n.Used, 0), max(n.Total, 0), max(n.Available, 0)
	}
	if cond == nil && u == (state.Usage{}) {
		cond = &state.Condition{} // keep the entry: the node answered
	}
	v, node := c.vol, c.node
	var oldCond *state.Condition
	if old := ps.healths[state.VolumeKey{Namespace: v.Namespace, ID: v.ID}]; old != nil && old.Nodes[node] != nil {
		n := old.Nodes[node]
		if sameCondition(n.Condition, cond) && n.Usage == u {
			return
		}
		oldCond = n.Condition
	}
	ps.reports = append(ps.reports, state.HealthReport{Namespace: v.Namespace, VolumeID: v.ID, NodeID: node, Condition: cond, Usage: u, At: ps.now})
	ev := Event{PluginID: p.ID, Namespace: v.Namespace, VolumeID: v.ID, NodeID: node}
	switch {
	case abnormal(cond) && !abnormal(oldCond):
		ev.Kind, ev.Reason = EventAbnormal, cond.Message
		m.cfg.Logger.Info("health: node reports the volume abnormal", "plugin", p.ID, "namespace", v.Namespace, "volume", v.ID, "node", node, "reason", cond.Message)
	case !abnormal(cond) && abnormal(oldCond):
		ev.Kind, ev.Reason = EventRecovered, "the node reports the volume normal"
		m.cfg.Logger.Info("health: volume normal again on the node", "plugin", p.ID, "namespace", v.Namespace, "volume", v.ID, "node", node)
	default:
		return
	}
	ps.events = append(ps.events, ev)
}

// liveNodes are the nodes where a live claim holds v, sorted.
func liveNodes(v *csi.Volume) []string {
	if len(v.ReadClaims)+len(v.WriteClaims) == 0 {
		return nil
	}
	set := map[string]bool{}
	for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims} {
		for _, c := range m {
			set[c.NodeID] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}
