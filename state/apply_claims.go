package state

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/csikit/csikit/csi"
	"github.com/hashicorp/go-memdb"
)

func validateClaimRef(ns, volID, allocID string) error {
	if err := validateVolumeRef(ns, volID); err != nil {
		return err
	}
	return csi.ValidateAllocationID(allocID)
}

func normalizeClaim(c *csi.Claim) {
	normalizeMountOptions(c.MountOptions)
	c.ReleasedAt = c.ReleasedAt.UTC()
}

// claimMap returns the map of v holding allocID's claim, or nil.
func claimMap(v *csi.Volume, allocID string) *map[string]*csi.Claim {
	for _, m := range []*map[string]*csi.Claim{&v.WriteClaims, &v.ReadClaims, &v.PastClaims} {
		if _, ok := (*m)[allocID]; ok {
			return m
		}
	}
	return nil
}

func claimNotFound(ns, volID, allocID string) error {
	return fmt.Errorf("%w: allocation %s holds no claim on volume %s", csi.ErrClaimNotFound, allocID, volName(ns, volID))
}

// claimOf reads a volume and allocID's claim on it, and whether the
// claim is past.
func (w *writer) claimOf(ns, volID, allocID string) (v *csi.Volume, c *csi.Claim, past bool, err error) {
	if err := validateClaimRef(ns, volID, allocID); err != nil {
		return nil, nil, false, err
	}
	if v, err = w.mustVolume(ns, volID); err != nil {
		return nil, nil, false, err
	}
	m := claimMap(v, allocID)
	if m == nil {
		return nil, nil, false, claimNotFound(ns, volID, allocID)
	}
	return v, (*m)[allocID], m == &v.PastClaims, nil
}

// editClaim finds allocID's claim on a volume and lets fn decide its
// fate: return a new claim to replace it, nil to remove it, or the same
// pointer to leave everything as it was.
func (w *writer) editClaim(ns, volID, allocID string, fn func(c *csi.Claim, past bool) (*csi.Claim, error)) error {
	v, old, past, err := w.claimOf(ns, volID, allocID)
	if err != nil {
		return err
	}
	nc, err := fn(old, past)
	if err != nil || nc == old {
		return err
	}
	nv := editable(v)
	m := claimMap(nv, allocID)
	if nc == nil {
		delete(*m, allocID)
	} else {
		normalizeClaim(nc)
		(*m)[allocID] = nc
	}
	return w.putVolume(nv)
}

func (c ClaimVolume) apply(w *writer) error {
	if err := validateVolumeRef(c.Namespace, c.VolumeID); err != nil {
		return err
	}
	name := volName(c.Namespace, c.VolumeID)
	claim := c.Claim.Copy()
	if err := csi.ValidateClaim(claim); err != nil {
		return fmt.Errorf("claim volume %s: %w", name, err)
	}
	if claim.ExternalNodeID != "" {
		if err := csi.ValidateExternalID("external node ID", claim.ExternalNodeID); err != nil {
			return fmt.Errorf("claim volume %s: %w", name, err)
		}
	}
	v, err := w.mustVolume(c.Namespace, c.VolumeID)
	if err != nil {
		return err
	}
	a, err := getAllocation(w.txn, claim.AllocationID)
	if err != nil {
		return err
	}
	switch {
	case a == nil:
		return fmt.Errorf("claim volume %s: %w", name, allocationNotFound(claim.AllocationID))
	case a.Terminal:
		return fmt.Errorf("%w: allocation %s is terminal and cannot claim volume %s; place a new allocation",
			csi.ErrAllocationTerminal, a.ID, name)
	case a.Namespace != v.Namespace:
		return fmt.Errorf("%w: allocation %s is in namespace %s and cannot claim volume %s; claim a volume of its own namespace",
			csi.ErrNamespaceMismatch, a.ID, a.Namespace, name)
	case a.NodeID != claim.NodeID:
		return fmt.Errorf("%w: claim on volume %s names node %s but allocation %s runs on node %s",
			csi.ErrInvalidRequest, name, claim.NodeID, a.ID, a.NodeID)
	}
	if v.Creating {
		return fmt.Errorf("%w: volume %s is being created (the plugin has not answered CreateVolume yet); retry the claim once the creation completes",
			csi.ErrVolumeInUse, name)
	}
	if csi.IsRepeatClaim(v, claim) {
		w.claim = v.Claim(claim.AllocationID).Copy()
		w.attachment = v.Attachments[claim.NodeID].Copy()
		return nil
	}

	p, err := getPlugin(w.txn, v.PluginID)
	if err != nil {
		return err
	}
	if p == nil {
		return fmt.Errorf("claim volume %s: %w", name, pluginNotFound(v.PluginID))
	}
	if !p.Schedulable() {
		return fmt.Errorf("%w: volume %s: plugin %s is not schedulable (%d healthy node instances, %d healthy controllers, controller required: %t); wait for healthy plugin instances",
			csi.ErrPluginUnhealthy, name, p.ID, p.NodesHealthy, p.ControllersHealthy, p.ControllerRequired)
	}
	in, err := getInstance(w.txn, p.ID, csi.PluginTypeNode, claim.NodeID)
	if err != nil {
		return err
	}
	if in == nil {
		return fmt.Errorf("%w: volume %s: plugin %s has no node instance on node %s; run its node plugin there or place the allocation elsewhere",
			csi.ErrPluginNotFound, name, p.ID, claim.NodeID)
	}
	if !in.Info.Healthy {
		return fmt.Errorf("%w: volume %s: the node instance of plugin %s on node %s is unhealthy (%s); wait for it to recover",
			csi.ErrPluginUnhealthy, name, p.ID, claim.NodeID, in.Info.HealthDescription)
	}
	if err := csi.CheckClaim(v, claim); err != nil {
		return fmt.Errorf("claim volume %s: %w", name, err)
	}
	ni := in.Info.NodeInfo
	if claim.ExternalNodeID == "" {
		if ni == nil || ni.ID == "" {
			return fmt.Errorf("%w: volume %s: the node instance of plugin %s on node %s reported no CSI node ID; wait for its next fingerprint",
				csi.ErrPluginUnhealthy, name, p.ID, claim.NodeID)
		}
		claim.ExternalNodeID = ni.ID
	}
	att := v.Attachments[claim.NodeID]
	if att == nil && ni != nil && ni.MaxVolumes > 0 {
		if err := checkMaxVolumes(w.txn, v, claim.NodeID, ni.MaxVolumes); err != nil {
			return err
		}
	}

	claim.State = csi.ClaimTaken
	claim.ReleasedAt = time.Time{}
	claim.LastError = ""
	normalizeClaim(claim)
	nv := editable(v)
	m := &nv.ReadClaims
	if claim.Mode == csi.ClaimWrite {
		m = &nv.WriteClaims
	}
	if *m == nil {
		*m = map[string]*csi.Claim{}
	}
	(*m)[claim.AllocationID] = claim
	if att == nil {
		// The first claim on the node makes its attachment, in this
		// transaction: Attached at once when the plugin has no
		// controller to publish through, Attaching otherwise until the
		// claim flow has called ControllerPublishVolume (or found it is
		// not needed) and written AttachVolume.
		att = &csi.Attachment{NodeID: claim.NodeID, ExternalNodeID: claim.ExternalNodeID,
			State: csi.AttachmentAttaching, CreateIndex: w.index, ModifyIndex: w.index}
		if !p.ControllerRequired {
			att.State = csi.AttachmentAttached
		}
		if nv.Attachments == nil {
			nv.Attachments = map[string]*csi.Attachment{}
		}
		nv.Attachments[claim.NodeID] = att
	}
	if err := w.putVolume(nv); err != nil {
		return err
	}
	w.claim = claim.Copy()
	w.attachment = att.Copy()
	return nil
}

func checkMaxVolumes(txn *memdb.Txn, v *csi.Volume, node string, limit int64) error {
	if v.Attachments[node] != nil {
		return nil // no new attachment
	}
	// The attachment keys alone count: no volume is read.
	it, err := txn.Get(tRefs, iID, tVolumes, refAttached, node, v.PluginID)
	if err != nil {
		return dbErr("count volumes on node", err)
	}
	var n int64
	for raw := it.Next(); raw != nil; raw = it.Next() {
		n++
	}
	if n >= limit {
		return fmt.Errorf("%w: node %s has %d volumes of plugin %s attached, its limit is %d; cannot attach volume %s until one is released, or place the allocation elsewhere",
			csi.ErrMaxVolumes, node, n, v.PluginID, limit, volName(v.Namespace, v.ID))
	}
	return nil
}

func (c SetPublishContext) apply(w *writer) error {
	_, cl, _, err := w.claimOf(c.Namespace, c.VolumeID, c.AllocationID)
	if err != nil {
		return err
	}
	return AttachVolume{Namespace: c.Namespace, VolumeID: c.VolumeID, NodeID: cl.NodeID, PublishContext: c.PublishContext}.apply(w)
}

// lastOnNode reports whether v, as edited, has no claim left on node.
func lastOnNode(v *csi.Volume, node string) bool {
	for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for _, c := range m {
			if c.NodeID == node {
				return false
			}
		}
	}
	return true
}

// removeClaim removes allocID's claim from its volume once check allows
// it; orphan decides the fate of the claim's attachment when no claim is
// left on its node: removed with the claim, or the removal refused.
func (w *writer) removeClaim(ns, volID, allocID string, check func(c *csi.Claim, past bool) error,
	orphan func(a *csi.Attachment) (remove bool, err error)) error {
	v, old, past, err := w.claimOf(ns, volID, allocID)
	if err != nil {
		return err
	}
	if err := check(old, past); err != nil {
		return err
	}
	nv := editable(v)
	delete(*claimMap(nv, allocID), allocID)
	if a := nv.Attachments[old.NodeID]; a != nil && lastOnNode(nv, old.NodeID) {
		remove, err := orphan(a)
		if err != nil {
			return err
		}
		if remove {
			delete(nv.Attachments, old.NodeID)
		}
	}
	return w.putVolume(nv)
}

func (c RemoveClaim) apply(w *writer) error {
	return w.removeClaim(c.Namespace, c.VolumeID, c.AllocationID, func(*csi.Claim, bool) error { return nil },
		func(a *csi.Attachment) (bool, error) {
			if a.State == csi.AttachmentAttaching {
				return true, nil // nothing was attached
			}
			return false, fmt.Errorf("%w: volume %s is %s to node %s and allocation %s holds the last claim there; release the claim so that the volume is detached",
				csi.ErrVolumeInUse, volName(c.Namespace, c.VolumeID), a.State, a.NodeID, c.AllocationID)
		})
}

func (c ReleaseClaims) apply(w *writer) error {
	if err := csi.ValidateAllocationID(c.AllocationID); err != nil {
		return err
	}
	if c.ReleasedAt.IsZero() {
		return fmt.Errorf("%w: release claims of allocation %s without ReleasedAt; set it to when the allocation stopped",
			csi.ErrInvalidRequest, c.AllocationID)
	}
	return w.releaseClaims([]string{c.AllocationID}, c.ReleasedAt)
}

// releaseClaims turns the allocations' live claims into past claims.
// A volume claimed by several of them is written once: every lookup
// comes before the first write, and a write of a volume costs the same
// for one claim as for many.
func (w *writer) releaseClaims(allocIDs []string, at time.Time) error {
	type release struct {
		v      *csi.Volume // as stored, then the edited copy
		edited bool
	}
	var order []VolumeKey
	vols := map[VolumeKey]*release{}
	// Each allocation's own volumes, as the lookups found them: the
	// edits visit each claim once, not each allocation on each volume.
	type claimRef struct {
		allocID string
		r       *release
	}
	var claims []claimRef
	for _, allocID := range allocIDs {
		it, err := byRef(w.txn, tVolumes, refAlloc, allocID)
		if err != nil {
			return dbErr("list claims of allocation", err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			v := raw.(*csi.Volume)
			k := VolumeKey{v.Namespace, v.ID}
			r := vols[k]
			if r == nil {
				r = &release{v: v}
				vols[k] = r
				order = append(order, k)
			}
			claims = append(claims, claimRef{allocID, r})
		}
		if err := it.Err(); err != nil {
			return dbErr("list claims of allocation", err)
		}
	}
	for _, cr := range claims {
		allocID, r := cr.allocID, cr.r
		m := claimMap(r.v, allocID)
		if m == nil || m == &r.v.PastClaims {
			continue
		}
		nc := (*m)[allocID].Copy()
		nc.State = csi.ClaimUnpublishing
		nc.ReleasedAt = at
		normalizeClaim(nc)
		if !r.edited {
			r.v, r.edited = editable(r.v), true
		}
		delete(*claimMap(r.v, allocID), allocID)
		if r.v.PastClaims == nil {
			r.v.PastClaims = map[string]*csi.Claim{}
		}
		r.v.PastClaims[allocID] = nc
	}
	for _, k := range order {
		if r := vols[k]; r.edited {
			if err := w.putVolume(r.v); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c CheckpointClaim) apply(w *writer) error {
	if c.State <= csi.ClaimTaken || c.State > csi.ClaimReadyToFree {
		return fmt.Errorf("%w: checkpoint claim of allocation %s on volume %s to state %s; a checkpoint is unpublishing, node-detached, controller-detached or ready-to-free",
			csi.ErrInvalidRequest, c.AllocationID, volName(c.Namespace, c.VolumeID), c.State)
	}
	return w.editClaim(c.Namespace, c.VolumeID, c.AllocationID, func(old *csi.Claim, past bool) (*csi.Claim, error) {
		switch {
		case !past:
			return nil, fmt.Errorf("%w: the claim of allocation %s on volume %s is live; release the allocation before checkpointing its release",
				csi.ErrInvalidRequest, c.AllocationID, volName(c.Namespace, c.VolumeID))
		case c.State == old.State:
			return old, nil
		case c.State < old.State:
			return nil, fmt.Errorf("%w: the claim of allocation %s on volume %s is already %s and cannot go back to %s; checkpoints only move forward",
				csi.ErrInvalidRequest, c.AllocationID, volName(c.Namespace, c.VolumeID), old.State, c.State)
		}
		nc := old.Copy()
		nc.State = c.State
		nc.LastError = ""
		return nc, nil
	})
}

func (c RecordClaimError) apply(w *writer) error {
	msg := truncateUTF8(strings.ToValidUTF8(c.Error, "\uFFFD"), MaxClaimError)
	return w.editClaim(c.Namespace, c.VolumeID, c.AllocationID, func(old *csi.Claim, _ bool) (*csi.Claim, error) {
		if old.LastError == msg {
			return old, nil
		}
		nc := old.Copy()
		nc.LastError = msg
		return nc, nil
	})
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func (c FreeClaim) apply(w *writer) error {
	return w.removeClaim(c.Namespace, c.VolumeID, c.AllocationID, func(_ *csi.Claim, past bool) error {
		if !past {
			return fmt.Errorf("%w: the claim of allocation %s on volume %s is live; release the allocation before freeing its claim",
				csi.ErrInvalidRequest, c.AllocationID, volName(c.Namespace, c.VolumeID))
		}
		return nil
	}, func(a *csi.Attachment) (bool, error) {
		return false, fmt.Errorf("%w: volume %s is still %s to node %s and allocation %s holds the last claim there; detach it (RemoveAttachment) before freeing the claim",
			csi.ErrVolumeInUse, volName(c.Namespace, c.VolumeID), a.State, a.NodeID, c.AllocationID)
	})
}
