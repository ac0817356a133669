package health

import (
	"context"
	"errors"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// view is what the controller said about one volume.
type view struct {
	found     bool
	condition *plugin.VolumeCondition
	published []string
	err       error // the call failed: nothing is known
}

// controllerViews reads the plugin's view of its volumes: paged
// ListVolumes (one call per page) when advertised, else one
// ControllerGetVolume per volume, else nothing. A listing that fails
// part way is dropped whole: a volume it did not reach is not missing.
func (m *Monitor) controllerViews(ctx context.Context, p *csi.Plugin, caps csi.ControllerCapabilities, vols []*csi.Volume) map[string]view {
	switch {
	case caps.ListVolumes:
		views, err := m.list(ctx, p.ID, len(vols))
		if err != nil {
			m.cfg.Logger.Warn("health: ListVolumes failed; trying again on the next pass", "plugin", p.ID, "error", err)
			return nil
		}
		for _, v := range vols {
			if _, ok := views[v.ExternalID]; !ok {
				views[v.ExternalID] = view{}
			}
		}
		return views
	case caps.GetVolume:
		return m.getEach(ctx, p.ID, vols)
	}
	return nil
}

func (m *Monitor) list(ctx context.Context, pluginID string, hint int) (map[string]view, error) {
	views := make(map[string]view, hint)
	for token := ""; ; {
		cctx, cancel := m.callCtx(ctx)
		page, err := m.cfg.Controllers.ListVolumes(cctx, pluginID, &plugin.ListVolumesRequest{MaxEntries: m.cfg.PageSize, StartingToken: token})
		cancel()
		if err != nil {
			return nil, err
		}
		for i := range page.Entries {
			e := &page.Entries[i]
			views[e.Volume.ExternalID] = view{found: true, condition: e.Condition, published: e.PublishedNodeIDs}
		}
		if page.NextToken == "" || page.NextToken == token {
			return views, nil
		}
		token = page.NextToken
	}
}

func (m *Monitor) getEach(ctx context.Context, pluginID string, vols []*csi.Volume) map[string]view {
	got := make([]view, len(vols))
	m.each(len(vols), func(i int) {
		cctx, cancel := m.callCtx(ctx)
		defer cancel()
		resp, err := m.cfg.Controllers.ControllerGetVolume(cctx, pluginID, &plugin.ControllerGetVolumeRequest{ExternalID: vols[i].ExternalID})
		switch {
		case notFound(err):
			got[i] = view{}
		case err != nil:
			got[i] = view{err: err}
		case resp.Status != nil:
			got[i] = view{found: true, condition: resp.Status.Condition, published: resp.Status.PublishedNodeIDs}
		default:
			got[i] = view{found: true}
		}
	})
	views := make(map[string]view, len(vols))
	for i, v := range vols {
		if got[i].err != nil {
			m.cfg.Logger.Warn("health: ControllerGetVolume failed; trying again on the next pass",
				"plugin", pluginID, "namespace", v.Namespace, "volume", v.ID, "error", got[i].err)
		}
		views[v.ExternalID] = got[i]
	}
	return views
}

func notFound(err error) bool {
	return err != nil && (errors.Is(err, csi.ErrVolumeNotFound) || csi.CodeOf(err) == csi.CodeNotFound)
}

// controllerReport adds the controller's report of v when it differs
// from the stored one, with the events it makes.
func (m *Monitor) controllerReport(p *csi.Plugin, v *csi.Volume, caps csi.ControllerCapabilities, vw view, ps *pass) {
	var cond *state.Condition
	if caps.GetVolumeHealth && vw.condition != nil {
		cond = &state.Condition{Abnormal: vw.condition.Abnormal, Message: vw.condition.Message}
	}
	missing := !vw.found
	old := ps.healths[state.VolumeKey{Namespace: v.Namespace, ID: v.ID}]
	var oldCond *state.Condition
	oldMissing := false
	if old != nil {
		oldCond, oldMissing = old.Condition, old.Missing
	}
	if sameCondition(oldCond, cond) && oldMissing == missing {
		return
	}
	ps.reports = append(ps.reports, state.HealthReport{Namespace: v.Namespace, VolumeID: v.ID, Condition: cond, Missing: missing, At: ps.now})
	ev := Event{PluginID: p.ID, Namespace: v.Namespace, VolumeID: v.ID}
	switch {
	case missing && !oldMissing:
		ev.Kind, ev.Reason = EventMissing, "the controller no longer has the volume"
		m.cfg.Logger.Info("health: volume missing on the backend", "plugin", p.ID, "namespace", v.Namespace, "volume", v.ID, "reason", ev.Reason)
	case abnormal(cond) && !abnormal(oldCond):
		ev.Kind, ev.Reason = EventAbnormal, cond.Message
		m.cfg.Logger.Info("health: controller reports the volume abnormal", "plugin", p.ID, "namespace", v.Namespace, "volume", v.ID, "reason", cond.Message)
	case !abnormal(cond) && abnormal(oldCond) || !missing && oldMissing:
		ev.Kind, ev.Reason = EventRecovered, "the controller reports the volume normal"
		m.cfg.Logger.Info("health: volume normal again", "plugin", p.ID, "namespace", v.Namespace, "volume", v.ID)
	default:
		return // a message changed, no event
	}
	ps.events = append(ps.events, ev)
}

func abnormal(c *state.Condition) bool { return c != nil && c.Abnormal }

func sameCondition(a, b *state.Condition) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}
