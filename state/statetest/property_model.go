package statetest

import (
	"errors"
	"maps"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
	"pgregory.net/rapid"
)

// The attachment model of the property check: what each command that
// reads or writes a volume's attachments must do to them, predicted from
// the volume as it is before the command.

// expect returns, for a command of the attachment model applied on its
// own, what checks its outcome: whether the store must refuse it (and
// with which sentinel) and what it must leave of the volume's
// attachments. Nil for commands the model does not predict (batches
// among them: the model reads the state before the command).
func (m *machine) expect(rt *rapid.T, cmd state.Command) func(state.Result, error) {
	ns, volID, ok := modelVolume(cmd)
	if !ok {
		return nil
	}
	v, err := m.w.s.Volume(ns, volID)
	if err != nil && !errors.Is(err, csi.ErrVolumeNotFound) {
		rt.Fatalf("Volume(%s, %s): %v", ns, volID, err)
	}
	p := &prediction{m: m, rt: rt, name: cmd.Kind(), ns: ns, volID: volID, v: v,
		idx: m.w.idx + 1} // the index the command is applied at
	if v == nil {
		if _, ok := cmd.(state.ClaimVolume); ok {
			return nil
		}
		return p.outcome(csi.ErrVolumeNotFound, nil)
	}
	p.atts = maps.Clone(v.Attachments)
	switch c := cmd.(type) {
	case state.AttachVolume:
		return p.attachOn(c.NodeID, c.PublishContext)
	case state.SetPublishContext:
		cl := v.Claim(c.AllocationID)
		if cl == nil {
			return p.outcome(csi.ErrClaimNotFound, nil)
		}
		return p.attachOn(cl.NodeID, c.PublishContext)
	case state.DetachVolume:
		return p.detach(c.NodeID)
	case state.RemoveAttachment:
		return p.removeAttachment(c.NodeID)
	case state.FreeClaim:
		return p.removeClaim(c.AllocationID, true)
	case state.RemoveClaim:
		return p.removeClaim(c.AllocationID, false)
	case state.ClaimVolume:
		return p.claim(c.Claim)
	}
	return nil
}

// modelVolume returns the volume a command of the attachment model
// names; ok is false for the other commands.
func modelVolume(cmd state.Command) (ns, volID string, ok bool) {
	switch c := cmd.(type) {
	case state.AttachVolume:
		return c.Namespace, c.VolumeID, true
	case state.SetPublishContext:
		return c.Namespace, c.VolumeID, true
	case state.DetachVolume:
		return c.Namespace, c.VolumeID, true
	case state.RemoveAttachment:
		return c.Namespace, c.VolumeID, true
	case state.FreeClaim:
		return c.Namespace, c.VolumeID, true
	case state.RemoveClaim:
		return c.Namespace, c.VolumeID, true
	case state.ClaimVolume:
		return c.Namespace, c.VolumeID, true
	}
	return "", "", false
}

// prediction is what the model knows before one command: the volume as
// it was (v) and its attachments (atts), and the index the command is
// applied at.
type prediction struct {
	m         *machine
	rt        *rapid.T
	name      state.Kind
	ns, volID string
	v         *csi.Volume
	atts      map[string]*csi.Attachment
	idx       uint64
}

// outcome checks the error against want (nil: success) and the
// volume's attachments against wantAtt, when the command must
// succeed.
func (p *prediction) outcome(want error, wantAtt map[string]*csi.Attachment) func(state.Result, error) {
	return func(_ state.Result, err error) {
		switch {
		case want == nil && err != nil:
			p.rt.Errorf("%s: refused with %v, the model says it applies to %s", p.name, err, toJSON(p.v))
			return
		case want != nil && !errors.Is(err, want):
			p.rt.Errorf("%s: error %v, the model says %q for %s", p.name, err, want, toJSON(p.v))
			return
		case want != nil:
			return
		}
		after, err := p.m.w.s.Volume(p.ns, p.volID)
		if err != nil {
			p.rt.Fatalf("Volume(%s, %s) after %s: %v", p.ns, p.volID, p.name, err)
		}
		if got, w := toJSON(after.Attachments), toJSON(nilIfNone(wantAtt)); got != w {
			p.rt.Errorf("%s: attachments %s, the model says %s", p.name, got, w)
		}
	}
}

// with returns the attachments as they were, with a in place of the
// one to node (none for a nil a).
func (p *prediction) with(node string, a *csi.Attachment) map[string]*csi.Attachment {
	out := maps.Clone(p.atts)
	if out == nil {
		out = map[string]*csi.Attachment{}
	}
	if a == nil {
		delete(out, node)
	} else {
		out[node] = a
	}
	return out
}

// attachOn predicts AttachVolume on node with the publish context pc.
func (p *prediction) attachOn(node string, pc map[string]string) func(state.Result, error) {
	a := p.atts[node]
	switch {
	case a == nil:
		return p.outcome(csi.ErrAttachmentNotFound, nil)
	case a.State == csi.AttachmentDetaching:
		return p.outcome(csi.ErrVolumeInUse, nil)
	case a.State == csi.AttachmentAttached && maps.Equal(a.PublishContext, pc):
		return p.outcome(nil, p.atts)
	}
	na := a.Copy()
	na.State, na.PublishContext, na.ModifyIndex = csi.AttachmentAttached, maps.Clone(pc), p.idx
	if len(na.PublishContext) == 0 {
		na.PublishContext = nil
	}
	return p.outcome(nil, p.with(node, na))
}

// detach predicts DetachVolume from node.
func (p *prediction) detach(node string) func(state.Result, error) {
	a := p.atts[node]
	switch {
	case a == nil:
		return p.outcome(csi.ErrAttachmentNotFound, nil)
	case a.State == csi.AttachmentDetaching:
		return p.outcome(nil, p.atts)
	case len(claimsOn(p.v, node, true)) > 0:
		return p.outcome(csi.ErrVolumeInUse, nil)
	}
	na := a.Copy()
	na.State, na.ModifyIndex = csi.AttachmentDetaching, p.idx
	return p.outcome(nil, p.with(node, na))
}

// removeAttachment predicts RemoveAttachment from node.
func (p *prediction) removeAttachment(node string) func(state.Result, error) {
	switch {
	case p.atts[node] == nil:
		return p.outcome(nil, p.atts)
	case len(claimsOn(p.v, node, true)) > 0:
		return p.outcome(csi.ErrVolumeInUse, nil)
	}
	return p.outcome(nil, p.with(node, nil))
}

// removeClaim predicts FreeClaim (free) or RemoveClaim of allocID's
// claim.
func (p *prediction) removeClaim(allocID string, free bool) func(state.Result, error) {
	cl := p.v.Claim(allocID)
	switch {
	case cl == nil:
		return p.outcome(csi.ErrClaimNotFound, nil)
	case free && p.v.PastClaims[allocID] == nil:
		return p.outcome(csi.ErrInvalidRequest, nil)
	}
	a := p.atts[cl.NodeID]
	if a == nil || len(claimsOn(p.v, cl.NodeID, false)) > 1 {
		return p.outcome(nil, p.atts) // the attachment, if any, stays for the others
	}
	if free || a.State != csi.AttachmentAttaching {
		// The last claim on the node, attached: detach first.
		return p.outcome(csi.ErrVolumeInUse, nil)
	}
	return p.outcome(nil, p.with(cl.NodeID, nil)) // nothing was attached
}

// claim checks a ClaimVolume of c that the store accepted: the claim
// rules are the claim cases' business, the attachment it makes or
// joins the model's.
func (p *prediction) claim(c csi.Claim) func(state.Result, error) {
	before := p.atts[c.NodeID]
	repeat := p.v.Claim(c.AllocationID) != nil
	return func(res state.Result, err error) {
		if err != nil {
			return // the claim rules are the claim cases' business
		}
		after, err := p.m.w.s.Volume(p.ns, p.volID)
		if err != nil {
			p.rt.Fatalf("Volume(%s, %s) after %s: %v", p.ns, p.volID, p.name, err)
		}
		a := after.Attachments[c.NodeID]
		switch {
		case before != nil && before.State == csi.AttachmentDetaching:
			p.rt.Errorf("%s: a claim of %s on node %s, from which the volume is detaching, was written", p.name, c.AllocationID, c.NodeID)
		case before != nil && toJSON(a) != toJSON(before):
			p.rt.Errorf("%s: the claim changed the attachment it joins from %s to %s", p.name, toJSON(before), toJSON(a))
		case before == nil && a == nil:
			p.rt.Errorf("%s: no attachment to node %s after the claim", p.name, c.NodeID)
		case before == nil && (repeat || a.State != wantState(after) || a.CreateIndex != p.idx || a.ModifyIndex != p.idx ||
			a.PublishContext != nil || a.ExternalNodeID != after.Claim(c.AllocationID).ExternalNodeID):
			p.rt.Errorf("%s: new attachment %s at index %d for the claim %s", p.name, toJSON(a), p.idx, toJSON(after.Claim(c.AllocationID)))
		case toJSON(res.Attachment) != toJSON(a):
			p.rt.Errorf("%s: Result.Attachment = %s, the stored one is %s", p.name, toJSON(res.Attachment), toJSON(a))
		}
		for node, o := range p.atts {
			if node != c.NodeID && toJSON(after.Attachments[node]) != toJSON(o) {
				p.rt.Errorf("%s: the claim on node %s changed the attachment to node %s", p.name, c.NodeID, node)
			}
		}
	}
}

// wantState is the state of a new attachment of v: Attaching until
// ControllerPublishVolume when the plugin needs a controller, Attached
// at once otherwise.
func wantState(v *csi.Volume) csi.AttachmentState {
	if v.ControllerRequired {
		return csi.AttachmentAttaching
	}
	return csi.AttachmentAttached
}

func nilIfNone(m map[string]*csi.Attachment) map[string]*csi.Attachment {
	if len(m) == 0 {
		return nil
	}
	return m
}
