package plugintest

import (
	"context"
	"fmt"

	"github.com/csikit/csikit/csi/plugin"
)

// The row of volume health: what NodeGetVolumeStats reports of a
// mounted volume must be usable by a health monitor.

var healthChecks = []coverageCheck{
	{name: "NodeGetVolumeStats (values)", phase: phaseMounted, needs: needBoth(needStats, needPublished), run: (*run).checkStatValues},
}

// checkStatValues reads the stats of the published volume through the
// plugin client (which decodes the condition of plugins on CSI 1.3 to
// 1.12) and checks them: each count ≥ 0, used and available within the
// total, and, where the node advertises VOLUME_CONDITION, a condition
// with a message when it is abnormal.
func (l *run) checkStatValues(ctx context.Context, step string) {
	path := l.allocs[0].path
	st, ok := callOK(ctx, l, step, methodNodeGetVolumeStats, fmt.Sprintf("the spec requires OK from NodeGetVolumeStats of volume %q at %s, where NodePublishVolume returned OK", l.externalID, path),
		func(ctx context.Context) (*plugin.VolumeStats, error) {
			return l.node.NodeGetVolumeStats(ctx, &plugin.NodeVolumeStatsRequest{ExternalID: l.externalID, VolumePath: path})
		})
	if !ok {
		return
	}
	for _, u := range []struct {
		unit string
		u    *plugin.Usage
	}{{"BYTES", st.Bytes}, {"INODES", st.Inodes}} {
		if u.u == nil {
			continue
		}
		got := fmt.Sprintf("with %s usage used=%d available=%d total=%d", u.unit, u.u.Used, u.u.Available, u.u.Total)
		switch {
		case u.u.Used < 0 || u.u.Available < 0 || u.u.Total < 0:
			l.wrong(ctx, step, methodNodeGetVolumeStats, got, "the spec requires usage counts ≥ 0")
		case u.u.Total > 0 && (u.u.Used > u.u.Total || u.u.Available > u.u.Total):
			l.wrong(ctx, step, methodNodeGetVolumeStats, got, "a health monitor requires used and available within the total")
		}
	}
	if !l.nodeCaps.GetVolumeHealth {
		return
	}
	switch c := st.Condition; {
	case c == nil:
		l.wrong(ctx, step, methodNodeGetVolumeStats, "with no volume condition", "the spec requires a volume_condition from a node plugin that advertises VOLUME_CONDITION")
	case c.Abnormal && c.Message == "":
		l.wrong(ctx, step, methodNodeGetVolumeStats, "with an abnormal condition and no message", "the spec requires a message describing an abnormal condition")
	}
}
