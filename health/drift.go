package health

import (
	"context"
	"errors"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/state"
)

// drift compares the CSI nodes the backend says v is published to with
// v's attachment records. v was read before the backend was asked, so
// a record it shows Attached was attached before the listing: if the
// backend does not list it, the backend lost it. A listed node without
// a record may be an attach whose record came after v was read: it is
// left for Config.LeakGrace, and AdoptAttachment, which checks in its
// transaction, refuses it if a claim or record has come since.
func (m *Monitor) drift(ctx context.Context, p *csi.Plugin, v *csi.Volume, published []string, ps *pass) {
	recorded := make(map[string]bool, len(v.Attachments))
	for node, a := range v.Attachments {
		recorded[a.ExternalNodeID] = true
		if a.State == csi.AttachmentAttached && !slices.Contains(published, a.ExternalNodeID) {
			m.vanished(ctx, p, v, node, ps)
		}
	}
	for _, ext := range published {
		if recorded[ext] {
			continue
		}
		node := nodeOf(p, ext)
		if node == "" {
			m.cfg.Logger.Debug("health: backend attachment to a CSI node csikit does not know; left alone",
				"plugin", p.ID, "namespace", v.Namespace, "volume", v.ID, "csi_node", ext)
			continue
		}
		key := leakKey{p.ID, v.ExternalID, ext}
		ps.seen[key] = true
		first, ok := m.leaks[key]
		if !ok {
			m.leaks[key] = ps.now
			m.cfg.Logger.Info("health: backend attachment without a record; detaching it after the grace period unless a claim records it",
				"plugin", p.ID, "namespace", v.Namespace, "volume", v.ID, "node", node, "grace", m.cfg.LeakGrace)
			continue
		}
		if ps.now.Sub(first) < m.cfg.LeakGrace {
			continue
		}
		_, err := m.cfg.Applier.Apply(ctx, state.AdoptAttachment{Namespace: v.Namespace, VolumeID: v.ID, NodeID: node, ExternalNodeID: ext})
		if err != nil {
			if errors.Is(err, csi.ErrVolumeInUse) {
				delete(m.leaks, key)
				m.cfg.Logger.Info("health: backend attachment is claimed now; not a leak", "plugin", p.ID, "namespace", v.Namespace, "volume", v.ID, "node", node)
			} else {
				m.cfg.Logger.Warn("health: cannot record the leaked attachment; trying again on the next pass", "plugin", p.ID, "namespace", v.Namespace, "volume", v.ID, "node", node, "error", err)
			}
			continue
		}
		delete(m.leaks, key)
		reason := "attached on the backend with no claim and no record for " + m.cfg.LeakGrace.String()
		m.cfg.Logger.Info("health: detaching a leaked attachment", "plugin", p.ID, "namespace", v.Namespace, "volume", v.ID, "node", node, "reason", reason)
		ps.events = append(ps.events, Event{Kind: EventLeak, PluginID: p.ID, Namespace: v.Namespace, VolumeID: v.ID, NodeID: node, Reason: reason})
		m.detachLeak(ctx, p, v, node, ext, ps)
	}
}

// vanished flags v's record on node so the next claim publishes again.
func (m *Monitor) vanished(ctx context.Context, p *csi.Plugin, v *csi.Volume, node string, ps *pass) {
	res, err := m.cfg.Applier.Apply(ctx, state.FlagAttachmentVanished{Namespace: v.Namespace, VolumeID: v.ID, NodeID: node})
	switch {
	case errors.Is(err, csi.ErrAttachmentNotFound), errors.Is(err, csi.ErrVolumeNotFound):
		return // released meanwhile
	case err != nil:
		m.cfg.Logger.Warn("health: cannot flag a vanished attachment; trying again on the next pass", "plugin", p.ID, "namespace", v.Namespace, "volume", v.ID, "node", node, "error", err)
		return
	case !res.Changed:
		return
	}
	reason := "the backend no longer lists the attachment; the next claim on the node publishes it again"
	m.cfg.Logger.Info("health: attachment vanished", "plugin", p.ID, "namespace", v.Namespace, "volume", v.ID, "node", node, "reason", reason)
	ps.events = append(ps.events, Event{Kind: EventVanished, PluginID: p.ID, Namespace: v.Namespace, VolumeID: v.ID, NodeID: node, Reason: reason})
}

// resumeLeaks finishes the detach of leaks adopted by an earlier pass
// (or an earlier leader) that did not complete: a Detaching record with
// no claim on its node is only ever an adopted leak, since a release
// keeps its claim until the record is removed.
func (m *Monitor) resumeLeaks(ctx context.Context, p *csi.Plugin, v *csi.Volume, ps *pass) {
	for node, a := range v.Attachments {
		if a.State == csi.AttachmentDetaching && !claimOnNode(v, node) {
			m.detachLeak(ctx, p, v, node, a.ExternalNodeID, ps)
		}
	}
}

// detachLeak unpublishes an adopted attachment and removes its record;
// on failure the record stays Detaching and resumeLeaks tries again.
func (m *Monitor) detachLeak(ctx context.Context, p *csi.Plugin, v *csi.Volume, node, ext string, ps *pass) {
	if controllerCaps(p).PublishUnpublishVolume {
		cctx, cancel := m.callCtx(ctx)
		err := m.cfg.Controllers.ControllerUnpublish(cctx, p.ID, &plugin.ControllerUnpublishRequest{ExternalID: v.ExternalID, ExternalNodeID: ext, Secrets: v.Secrets})
		cancel()
		if !csi.TeardownDone(err) {
			m.cfg.Logger.Warn("health: ControllerUnpublishVolume of a leaked attachment failed; trying again on the next pass",
				"plugin", p.ID, "namespace", v.Namespace, "volume", v.ID, "node", node, "error", err)
			return
		}
	}
	if _, err := m.cfg.Applier.Apply(ctx, state.RemoveAttachment{Namespace: v.Namespace, VolumeID: v.ID, NodeID: node}); err != nil {
		m.cfg.Logger.Warn("health: cannot remove the record of a detached leak; trying again on the next pass",
			"plugin", p.ID, "namespace", v.Namespace, "volume", v.ID, "node", node, "error", err)
		return
	}
	m.cfg.Logger.Info("health: leaked attachment detached", "plugin", p.ID, "namespace", v.Namespace, "volume", v.ID, "node", node)
	ps.events = append(ps.events, Event{Kind: EventLeakDetached, PluginID: p.ID, Namespace: v.Namespace, VolumeID: v.ID, NodeID: node})
}

// nodeOf returns the host node whose node instance of p reports the CSI
// node ID ext, or "".
func nodeOf(p *csi.Plugin, ext string) string {
	for node, in := range p.Nodes {
		if in != nil && in.NodeInfo != nil && in.NodeInfo.ID == ext {
			return node
		}
	}
	return ""
}

// claimOnNode reports whether any claim of v, live or past, is on node.
func claimOnNode(v *csi.Volume, node string) bool {
	for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for _, c := range m {
			if c.NodeID == node {
				return true
			}
		}
	}
	return false
}
