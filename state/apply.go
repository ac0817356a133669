package state

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/csikit/csikit/csi"
	"github.com/hashicorp/go-memdb"
)

// Apply implements Store. It runs cmd in one memdb write transaction and
// commits only if the whole command succeeded.
func (s *MemStore) Apply(index uint64, cmd Command) (Result, error) {
	if isNil(cmd) {
		return Result{}, fmt.Errorf("%w: apply a nil command", csi.ErrInvalidRequest)
	}
	if index == 0 {
		return Result{}, fmt.Errorf("%w: apply %s at index 0; log indexes start at 1", csi.ErrInvalidRequest, cmd.Kind())
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if index < s.last {
		return Result{}, fmt.Errorf("%w: apply %s at index %d, below the store's last write at %d; apply commands in log order",
			csi.ErrInvalidRequest, cmd.Kind(), index, s.last)
	}
	gen := s.gen.Load()
	txn := gen.db.Txn(true)
	defer txn.Abort() // no-op after Commit
	w := &writer{txn: txn, index: index}
	if err := cmd.apply(w); err != nil {
		return Result{}, err
	}
	if err := w.flushVolumes(); err != nil {
		return Result{}, err
	}
	if err := w.finishPlugins(); err != nil {
		return Result{}, err
	}
	res := Result{Index: index, Claim: w.claim, Attachment: w.attachment}
	if w.touched == ([numTables]bool{}) {
		return res, nil
	}
	txn.Commit()
	s.last = index
	// After the commit: a reader that sees a new mark sees the write.
	for slot, moved := range w.touched {
		if moved {
			gen.move(slot, index)
		}
	}
	if w.past {
		gen.move(pastSlot, index)
	}
	res.Changed = true
	return res, nil
}

// writer is one command's write transaction.
type writer struct {
	txn     *memdb.Txn
	index   uint64
	touched [numTables]bool // by tableSlot
	// plugins collects, per plugin ID, what the command changed about
	// its instances and allocations; finishPlugins writes the plugin rows.
	plugins    map[string]*pluginChange
	claim      *csi.Claim
	attachment *csi.Attachment
	// past: the command wrote or removed a volume that holds past
	// claims before or after it (PastClaimsIndex moves).
	past bool
	// vols holds the volumes written by this write and not inserted
	// yet, in the order first written (volOrder): a volume that several
	// commands of a batch change (two claims' checkpoints, a claim and
	// its publish context) is inserted once, at flushVolumes. Reads of
	// a volume by ID in the writer see these (volume); a lookup through
	// tRefs flushes them first.
	vols     map[VolumeKey]*csi.Volume
	volOrder []VolumeKey
}

type pluginChange struct {
	controllersHealthy, nodesHealthy   int
	controllersExpected, nodesExpected int
	metas                              []*csi.PluginInfo // healthy instances written, in order
}

func (w *writer) insert(table string, obj any) error {
	if err := put(w.txn, table, obj); err != nil {
		return dbErr("write "+table, err)
	}
	w.touched[tableSlot(tableOf(table))] = true
	return nil
}

func (w *writer) delete(table string, obj any) error {
	if err := remove(w.txn, table, obj); err != nil {
		return dbErr("delete from "+table, err)
	}
	w.touched[tableSlot(tableOf(table))] = true
	return nil
}

func (w *writer) plugin(id string) *pluginChange {
	pc := w.plugins[id]
	if pc == nil {
		pc = &pluginChange{}
		if w.plugins == nil {
			w.plugins = map[string]*pluginChange{}
		}
		w.plugins[id] = pc
	}
	return pc
}

// putVolume writes v, a volume the writer owns (new, or from
// editable), when the write flushes its volumes.
func (w *writer) putVolume(v *csi.Volume) error {
	normalizeVolume(v)
	v.ModifyIndex = w.index
	if !w.past {
		if len(v.PastClaims) > 0 {
			w.past = true
		} else if old, err := getOne[*csi.Volume](w.txn, tVolumes, v.Namespace, v.ID); err != nil {
			return err
		} else if old != nil && len(old.PastClaims) > 0 {
			w.past = true
		}
	}
	k := VolumeKey{v.Namespace, v.ID}
	if w.vols == nil {
		w.vols = map[VolumeKey]*csi.Volume{}
	}
	if _, ok := w.vols[k]; !ok {
		w.volOrder = append(w.volOrder, k)
	}
	w.vols[k] = v
	// The table changes even if a later command of the batch removes
	// the volume again.
	w.touched[tableSlot(TableVolumes)] = true
	return nil
}

// flushVolumes inserts the volumes written and not inserted yet.
func (w *writer) flushVolumes() error {
	for _, k := range w.volOrder {
		if v := w.vols[k]; v != nil {
			if err := w.insert(tVolumes, v); err != nil {
				return err
			}
		}
	}
	clear(w.vols)
	w.volOrder = w.volOrder[:0]
	return nil
}

// volume returns a volume as this write leaves it so far, or nil.
func (w *writer) volume(ns, id string) (*csi.Volume, error) {
	if v, ok := w.vols[VolumeKey{ns, id}]; ok {
		return v, nil
	}
	return getOne[*csi.Volume](w.txn, tVolumes, ns, id)
}

// mustVolume is volume, with ErrVolumeNotFound for a missing one.
func (w *writer) mustVolume(ns, id string) (*csi.Volume, error) {
	v, err := w.volume(ns, id)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, volumeNotFound(ns, id)
	}
	return v, nil
}

// deleteVolume removes the volume v names.
func (w *writer) deleteVolume(v *csi.Volume) error {
	k := VolumeKey{v.Namespace, v.ID}
	if p, ok := w.vols[k]; ok {
		if len(p.PastClaims) > 0 {
			w.past = true
		}
		// Not inserted, and now never will be; memdb removes the
		// stored row by the keys of the stored version.
		delete(w.vols, k)
		w.touched[tableSlot(TableVolumes)] = true
	}
	stored, err := getOne[*csi.Volume](w.txn, tVolumes, v.Namespace, v.ID)
	if err != nil || stored == nil {
		return err
	}
	if len(stored.PastClaims) > 0 {
		w.past = true
	}
	return w.delete(tVolumes, stored)
}

// --- validation and naming ---

func volName(ns, id string) string { return ns + "/" + id }

func validateVolumeRef(ns, id string) error {
	if err := csi.ValidateNamespace(ns); err != nil {
		return err
	}
	return csi.ValidateVolumeID(id)
}

func validateClaimRef(ns, volID, allocID string) error {
	if err := validateVolumeRef(ns, volID); err != nil {
		return err
	}
	return csi.ValidateAllocationID(allocID)
}

func validateVolume(v *csi.Volume) error {
	if err := validateVolumeRef(v.Namespace, v.ID); err != nil {
		return err
	}
	if err := csi.ValidatePluginID(v.PluginID); err != nil {
		return fmt.Errorf("volume %s: %w", volName(v.Namespace, v.ID), err)
	}
	switch {
	case v.Creating && v.ExternalID != "":
		return fmt.Errorf("%w: volume %s is being created and names external ID %q; a creation intent has no external ID until the plugin answers",
			csi.ErrInvalidRequest, volName(v.Namespace, v.ID), v.ExternalID)
	case !v.Creating:
		if err := csi.ValidateExternalID("external volume ID", v.ExternalID); err != nil {
			return fmt.Errorf("volume %s: %w", volName(v.Namespace, v.ID), err)
		}
	}
	if len(v.Capabilities) == 0 {
		return fmt.Errorf("%w: volume %s has no capability; give at least one (access mode, attachment mode) pair",
			csi.ErrInvalidRequest, volName(v.Namespace, v.ID))
	}
	for _, c := range v.Capabilities {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("volume %s: %w", volName(v.Namespace, v.ID), err)
		}
	}
	for _, f := range []struct {
		name  string
		bytes int64
	}{{"Capacity", v.Capacity}, {"RequestedCapacityMin", v.RequestedCapacityMin}, {"RequestedCapacityMax", v.RequestedCapacityMax}} {
		if f.bytes < 0 {
			return fmt.Errorf("%w: volume %s has %s %d; give a size in bytes, or 0 for none",
				csi.ErrInvalidRequest, volName(v.Namespace, v.ID), f.name, f.bytes)
		}
	}
	if v.RequestedCapacityMax > 0 && v.RequestedCapacityMin > v.RequestedCapacityMax {
		return fmt.Errorf("%w: volume %s has RequestedCapacityMin %d above RequestedCapacityMax %d; the minimum may not exceed the maximum",
			csi.ErrInvalidRequest, volName(v.Namespace, v.ID), v.RequestedCapacityMin, v.RequestedCapacityMax)
	}
	return nil
}

// normalizeVolume makes empty collections nil, so a volume reads the same
// before and after a JSON round trip (snapshots, replicated logs).
func normalizeVolume(v *csi.Volume) {
	v.Parameters = nilIfEmpty(v.Parameters)
	v.Context = nilIfEmpty(v.Context)
	if len(v.Secrets) == 0 {
		v.Secrets = nil
	}
	if len(v.Topologies) == 0 {
		v.Topologies = nil
	}
	// The pointed-to structs may be shared with the stored volume this
	// one replaces: write to them only when they are not normalized yet,
	// which is never the case for a stored one.
	if r := v.RequestedTopologies; r != nil {
		if r.Required != nil && len(r.Required) == 0 {
			r.Required = nil
		}
		if r.Preferred != nil && len(r.Preferred) == 0 {
			r.Preferred = nil
		}
	}
	normalizeMountOptions(v.MountOptions)
	v.ReadClaims = nilIfEmpty(v.ReadClaims)
	v.WriteClaims = nilIfEmpty(v.WriteClaims)
	v.PastClaims = nilIfEmpty(v.PastClaims)
	v.Attachments = nilIfEmpty(v.Attachments)
}

func normalizeClaim(c *csi.Claim) {
	normalizeMountOptions(c.MountOptions)
	c.ReleasedAt = c.ReleasedAt.UTC()
}

func normalizeMountOptions(o *csi.MountOptions) {
	if o != nil && o.MountFlags != nil && len(o.MountFlags) == 0 {
		o.MountFlags = nil
	}
}

func nilIfEmpty[M ~map[K]V, K comparable, V any](m M) M {
	if len(m) == 0 {
		return nil
	}
	return m
}

func nilIfEmptySlice[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}

// editable returns a shallow copy of v whose claim and attachment maps
// may be changed. Claims and attachments themselves stay shared:
// replace, never modify. Every edit
// copies, a volume the write has not inserted yet too: its maps may be
// those of the stored version it replaces (an update keeps its claims),
// and a stored volume is never changed in place, since reads of older
// states may still hold it.
func editable(v *csi.Volume) *csi.Volume {
	c := *v
	c.ReadClaims = maps.Clone(v.ReadClaims)
	c.WriteClaims = maps.Clone(v.WriteClaims)
	c.PastClaims = maps.Clone(v.PastClaims)
	c.Attachments = maps.Clone(v.Attachments)
	return &c
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

func (b Batch) apply(w *writer) error {
	for i, c := range b.Commands {
		if isNil(c) {
			return fmt.Errorf("%w: batch command %d is nil", csi.ErrInvalidRequest, i)
		}
		if isBatch(c) {
			return fmt.Errorf("batch command %d: %w", i, errNestedBatch)
		}
		if err := c.apply(w); err != nil {
			return fmt.Errorf("batch command %d (%s): %w", i, c.Kind(), err)
		}
		// The next command must see the plugins as this one left them.
		if err := w.finishPlugins(); err != nil {
			return err
		}
	}
	w.claim, w.attachment = nil, nil
	return nil
}

// --- volumes ---

func (c RegisterVolume) apply(w *writer) error {
	v := c.Volume.Copy()
	if err := validateVolume(v); err != nil {
		return err
	}
	name := volName(v.Namespace, v.ID)
	v.ReadClaims, v.WriteClaims, v.PastClaims, v.Attachments = nil, nil, nil, nil
	v.ControllerRequired, v.Schedulable = false, false
	v.ControllersHealthy, v.ControllersExpected, v.NodesHealthy, v.NodesExpected = 0, 0, 0, 0

	old, err := w.volume(v.Namespace, v.ID)
	if err != nil {
		return err
	}
	if old == nil {
		p, err := getPlugin(w.txn, v.PluginID)
		if err != nil {
			return err
		}
		if p == nil {
			return fmt.Errorf("register volume %s: %w", name, pluginNotFound(v.PluginID))
		}
		switch {
		case v.Provider == "":
			v.Provider = p.Provider
		case p.Provider != "" && v.Provider != p.Provider:
			return fmt.Errorf("%w: volume %s names provider %q but plugin %s is provider %q; fix the provider or leave it empty",
				csi.ErrInvalidRequest, name, v.Provider, v.PluginID, p.Provider)
		}
		if !v.Creating {
			if err := w.checkExternalFree(v); err != nil {
				return err
			}
		}
		v.CreateIndex = w.index
		return w.putVolume(v)
	}

	completes := old.Creating && !v.Creating
	if v.Creating && !old.Creating {
		return fmt.Errorf("%w: volume %s exists and is not being created; delete it first to create it again",
			csi.ErrVolumeExists, name)
	}
	switch {
	case v.ExternalID != old.ExternalID && !completes:
		return fmt.Errorf("%w: volume %s exists with external ID %q, not %q; deregister it first to register another external volume",
			csi.ErrVolumeExists, name, old.ExternalID, v.ExternalID)
	case v.PluginID != old.PluginID:
		return fmt.Errorf("%w: volume %s exists with plugin %s, not %s; deregister it first to move it to another plugin",
			csi.ErrVolumeExists, name, old.PluginID, v.PluginID)
	case v.Provider == "":
		v.Provider = old.Provider
	case old.Provider != "" && v.Provider != old.Provider:
		return fmt.Errorf("%w: volume %s exists with provider %q, not %q; deregister it first to change provider",
			csi.ErrVolumeExists, name, old.Provider, v.Provider)
	}
	if completes {
		// The creation's outcome: its external ID is new to the store.
		if err := w.checkExternalFree(v); err != nil {
			return err
		}
	}
	for _, m := range []map[string]*csi.Claim{old.ReadClaims, old.WriteClaims} {
		for _, id := range slices.Sorted(maps.Keys(m)) {
			if cl := m[id]; !v.Allows(cl.Capability()) {
				return fmt.Errorf("%w: volume %s: allocation %s claims it as %s; keep that capability until the claim is released",
					csi.ErrVolumeInUse, name, id, cl.Capability())
			}
		}
	}
	v.ReadClaims, v.WriteClaims, v.PastClaims, v.Attachments = old.ReadClaims, old.WriteClaims, old.PastClaims, old.Attachments
	v.CreateIndex, v.ModifyIndex = old.CreateIndex, old.ModifyIndex
	normalizeVolume(v)
	if reflect.DeepEqual(v, old) {
		return nil
	}
	return w.putVolume(v)
}

func (c DeregisterVolume) apply(w *writer) error {
	if err := validateVolumeRef(c.Namespace, c.VolumeID); err != nil {
		return err
	}
	v, err := w.mustVolume(c.Namespace, c.VolumeID)
	if err != nil {
		return err
	}
	if v.InUse() && !c.Force {
		var ids []string
		for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
			ids = append(ids, slices.Collect(maps.Keys(m))...)
		}
		slices.Sort(ids)
		if len(ids) == 0 {
			return fmt.Errorf("%w: volume %s is still attached to nodes %s; wait for the release worker to detach it, or force the deregistration if the attachments are gone",
				csi.ErrVolumeInUse, volName(c.Namespace, c.VolumeID), strings.Join(slices.Sorted(maps.Keys(v.Attachments)), ", "))
		}
		return fmt.Errorf("%w: volume %s is still claimed by allocations %s; wait for the claims to be released, or force the deregistration if the attachments are gone",
			csi.ErrVolumeInUse, volName(c.Namespace, c.VolumeID), strings.Join(ids, ", "))
	}
	return w.deleteVolume(v)
}

// --- claims ---

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
		if err := w.flushVolumes(); err != nil {
			return err
		}
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

// --- attachments ---

func attachmentNotFound(ns, volID, node string) error {
	return fmt.Errorf("%w: volume %s has no attachment to node %s (not claimed there, or already detached)",
		csi.ErrAttachmentNotFound, volName(ns, volID), node)
}

// attachmentOf reads the volume and its attachment to node (nil when
// there is none).
func (w *writer) attachmentOf(ns, volID, node string) (*csi.Volume, *csi.Attachment, error) {
	if err := validateVolumeRef(ns, volID); err != nil {
		return nil, nil, err
	}
	if err := csi.ValidateNodeID(node); err != nil {
		return nil, nil, err
	}
	v, err := w.mustVolume(ns, volID)
	if err != nil {
		return nil, nil, err
	}
	return v, v.Attachments[node], nil
}

// putAttachment writes a (new copy of an) attachment of v, or removes
// the one to node when a is nil.
func (w *writer) putAttachment(v *csi.Volume, node string, a *csi.Attachment) error {
	nv := editable(v)
	if a == nil {
		delete(nv.Attachments, node)
	} else {
		a.PublishContext = nilIfEmpty(a.PublishContext)
		a.ModifyIndex = w.index
		if nv.Attachments == nil {
			nv.Attachments = map[string]*csi.Attachment{}
		}
		nv.Attachments[node] = a
	}
	return w.putVolume(nv)
}

// heldOn refuses a detach of v from node while a claim there still needs
// the volume attached (csi.Volume.ClaimsOnNode).
func heldOn(v *csi.Volume, node string) error {
	if ids := v.ClaimsOnNode(node, ""); len(ids) > 0 {
		return fmt.Errorf("%w: volume %s stays attached to node %s: allocation %s still holds it there",
			csi.ErrVolumeInUse, volName(v.Namespace, v.ID), node, strings.Join(ids, ", "))
	}
	return nil
}

func (c AttachVolume) apply(w *writer) error {
	v, a, err := w.attachmentOf(c.Namespace, c.VolumeID, c.NodeID)
	switch {
	case err != nil:
		return err
	case a == nil:
		return fmt.Errorf("%w; claim the volume again", attachmentNotFound(c.Namespace, c.VolumeID, c.NodeID))
	case a.State == csi.AttachmentDetaching:
		return fmt.Errorf("%w: volume %s is being detached from node %s, its claims there were released; claim it again once the release finishes",
			csi.ErrVolumeInUse, volName(c.Namespace, c.VolumeID), c.NodeID)
	case a.State == csi.AttachmentAttached && maps.Equal(a.PublishContext, c.PublishContext):
		return nil
	}
	na := a.Copy()
	na.State = csi.AttachmentAttached
	na.PublishContext = maps.Clone(c.PublishContext)
	return w.putAttachment(v, c.NodeID, na)
}

func (c DetachVolume) apply(w *writer) error {
	v, a, err := w.attachmentOf(c.Namespace, c.VolumeID, c.NodeID)
	switch {
	case err != nil:
		return err
	case a == nil:
		return attachmentNotFound(c.Namespace, c.VolumeID, c.NodeID)
	case a.State == csi.AttachmentDetaching:
		return nil
	}
	if err := heldOn(v, c.NodeID); err != nil {
		return err
	}
	na := a.Copy()
	na.State = csi.AttachmentDetaching
	return w.putAttachment(v, c.NodeID, na)
}

func (c RemoveAttachment) apply(w *writer) error {
	v, a, err := w.attachmentOf(c.Namespace, c.VolumeID, c.NodeID)
	if err != nil || a == nil {
		return err
	}
	if err := heldOn(v, c.NodeID); err != nil {
		return err
	}
	return w.putAttachment(v, c.NodeID, nil)
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
	// The lookups read tRefs: the volumes this write changed go in
	// first.
	if err := w.flushVolumes(); err != nil {
		return err
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

// --- nodes and plugins ---

type instanceKey struct {
	plugin string
	role   csi.PluginType
}

func roles(t csi.PluginType) []csi.PluginType {
	switch t {
	case csi.PluginTypeController:
		return []csi.PluginType{csi.PluginTypeController}
	case csi.PluginTypeNode:
		return []csi.PluginType{csi.PluginTypeNode}
	case csi.PluginTypeMonolith:
		return []csi.PluginType{csi.PluginTypeController, csi.PluginTypeNode}
	}
	return nil
}

func expand(list []*csi.PluginInfo) map[instanceKey]*csi.PluginInfo {
	m := map[instanceKey]*csi.PluginInfo{}
	for _, p := range list {
		for _, r := range roles(p.Type) {
			m[instanceKey{p.PluginID, r}] = p
		}
	}
	return m
}

func validatePluginInfo(node string, p *csi.PluginInfo) error {
	if err := csi.ValidatePluginID(p.PluginID); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	if !p.Type.Valid() {
		return fmt.Errorf("%w: node %s reports plugin %s with type %q; use controller, node or monolith",
			csi.ErrInvalidRequest, node, p.PluginID, p.Type)
	}
	if p.AllocationID != "" {
		if err := csi.ValidateAllocationID(p.AllocationID); err != nil {
			return fmt.Errorf("node %s, plugin %s: %w", node, p.PluginID, err)
		}
	}
	if ni := p.NodeInfo; ni != nil {
		if ni.ID != "" {
			if err := csi.ValidateExternalID("CSI node ID", ni.ID); err != nil {
				return fmt.Errorf("node %s, plugin %s: %w", node, p.PluginID, err)
			}
		}
		if ni.MaxVolumes < 0 {
			return fmt.Errorf("%w: node %s reports plugin %s with MaxVolumes %d; use 0 for no limit",
				csi.ErrInvalidRequest, node, p.PluginID, ni.MaxVolumes)
		}
	}
	return nil
}

func (c UpsertNodePlugins) apply(w *writer) error {
	if err := csi.ValidateNodeID(c.NodeID); err != nil {
		return err
	}
	seen := map[instanceKey]bool{}
	list := make([]*csi.PluginInfo, 0, len(c.Plugins))
	for i := range c.Plugins {
		p := &c.Plugins[i]
		if err := validatePluginInfo(c.NodeID, p); err != nil {
			return err
		}
		for _, r := range roles(p.Type) {
			k := instanceKey{p.PluginID, r}
			if seen[k] {
				return fmt.Errorf("%w: node %s reports plugin %s as a %s instance twice; send one fingerprint per plugin and role",
					csi.ErrInvalidRequest, c.NodeID, p.PluginID, r)
			}
			seen[k] = true
		}
		if p.AllocationID != "" {
			a, err := getAllocation(w.txn, p.AllocationID)
			if err != nil {
				return err
			}
			if a != nil && a.Terminal {
				continue // a late report from a stopped plugin task
			}
		}
		info := p.Copy()
		info.UpdateTime = info.UpdateTime.UTC()
		list = append(list, info)
	}
	slices.SortFunc(list, func(a, b *csi.PluginInfo) int {
		if c := strings.Compare(a.PluginID, b.PluginID); c != 0 {
			return c
		}
		return strings.Compare(string(a.Type), string(b.Type))
	})
	return w.setNodePlugins(c.NodeID, list, false)
}

func (c DeleteNode) apply(w *writer) error {
	if err := csi.ValidateNodeID(c.NodeID); err != nil {
		return err
	}
	return w.setNodePlugins(c.NodeID, nil, true)
}

// setNodePlugins replaces a node's instances with list (or deletes the
// node when remove is set) and records the effect on each plugin.
func (w *writer) setNodePlugins(nodeID string, list []*csi.PluginInfo, remove bool) error {
	old, err := getNode(w.txn, nodeID)
	if err != nil {
		return err
	}
	if old == nil && remove {
		return nil
	}
	var oldList []*csi.PluginInfo
	if old != nil {
		oldList = old.Plugins
		if !remove && reflect.DeepEqual(oldList, nilIfEmptySlice(list)) {
			return nil // a repeated report changes nothing and wakes no one
		}
	}
	oldM, newM := expand(oldList), expand(list)
	keys := slices.Collect(maps.Keys(oldM))
	for k := range newM {
		if _, ok := oldM[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b instanceKey) int {
		if c := strings.Compare(a.plugin, b.plugin); c != 0 {
			return c
		}
		return strings.Compare(string(a.role), string(b.role))
	})
	for _, k := range keys {
		o, n := oldM[k], newM[k]
		pc := w.plugin(k.plugin)
		d := healthy(n) - healthy(o)
		if k.role == csi.PluginTypeController {
			pc.controllersHealthy += d
		} else {
			pc.nodesHealthy += d
		}
		if n == nil {
			if err := w.delete(tInstances, &instance{PluginID: k.plugin, Role: k.role, NodeID: nodeID}); err != nil {
				return err
			}
			continue
		}
		if err := w.insert(tInstances, &instance{PluginID: k.plugin, Role: k.role, NodeID: nodeID, Info: n}); err != nil {
			return err
		}
		if n.Healthy {
			pc.metas = append(pc.metas, n)
		}
	}
	if remove {
		return w.delete(tNodes, old)
	}
	row := &Node{ID: nodeID, Plugins: nilIfEmptySlice(list), CreateIndex: w.index, ModifyIndex: w.index}
	if old != nil {
		row.CreateIndex = old.CreateIndex
	}
	return w.insert(tNodes, row)
}

func healthy(p *csi.PluginInfo) int {
	if p != nil && p.Healthy {
		return 1
	}
	return 0
}

// finishPlugins writes the plugin rows the command affected: it creates
// a plugin from a healthy instance, updates counts and metadata, and
// deletes a plugin left without instances.
func (w *writer) finishPlugins() error {
	if len(w.plugins) == 0 {
		return nil
	}
	ids := slices.Sorted(maps.Keys(w.plugins))
	changes := w.plugins
	w.plugins = nil
	for _, id := range ids {
		pc := changes[id]
		row, err := getPlugin(w.txn, id)
		if err != nil {
			return err
		}
		exists, err := hasInstances(w.txn, id)
		if err != nil {
			return err
		}
		if row == nil {
			if len(pc.metas) == 0 || !exists {
				continue
			}
			p := &csi.Plugin{ID: id, CreateIndex: w.index, ModifyIndex: w.index}
			setPluginMeta(p, pc.metas)
			if err := recountPlugin(w.txn, p); err != nil {
				return err
			}
			if err := w.insert(tPlugins, p); err != nil {
				return err
			}
			continue
		}
		if !exists {
			if err := w.delete(tPlugins, row); err != nil {
				return err
			}
			continue
		}
		p := row.Copy()
		p.ControllersHealthy += pc.controllersHealthy
		p.NodesHealthy += pc.nodesHealthy
		p.ControllersExpected += pc.controllersExpected
		p.NodesExpected += pc.nodesExpected
		setPluginMeta(p, pc.metas)
		p.ModifyIndex = w.index
		if err := w.insert(tPlugins, p); err != nil {
			return err
		}
	}
	return nil
}

// setPluginMeta takes a plugin's metadata from healthy instances, in the
// order they were written.
func setPluginMeta(p *csi.Plugin, infos []*csi.PluginInfo) {
	for _, info := range infos {
		p.Provider = info.Provider
		p.Version = info.ProviderVersion
		// A split plugin's node binary may not advertise
		// CONTROLLER_SERVICE while its controller does: only an instance
		// that serves the controller may clear the flag, any instance may
		// set it. Otherwise the flag would follow whichever instance
		// reported last.
		if info.RequiresController || info.Type.HasController() {
			p.ControllerRequired = info.RequiresController
		}
	}
}

// recountPlugin computes a new plugin row's counts from its instances and
// running allocations. Later changes adjust them incrementally, so a
// fingerprint from one node never walks every node of a large cluster.
func recountPlugin(txn *memdb.Txn, p *csi.Plugin) error {
	p.ControllersHealthy, p.NodesHealthy, p.ControllersExpected, p.NodesExpected = 0, 0, 0, 0
	err := eachInstance(txn, p.ID, "", func(in *instance) error {
		if in.Role == csi.PluginTypeController {
			p.ControllersHealthy += healthy(in.Info)
		} else {
			p.NodesHealthy += healthy(in.Info)
		}
		return nil
	})
	if err != nil {
		return err
	}
	it, err := byRef(txn, tAllocations, refRunning, p.ID)
	if err != nil {
		return dbErr("list plugin allocations", err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		c, n := expected(raw.(*csi.Allocation), p.ID)
		p.ControllersExpected += c
		p.NodesExpected += n
	}
	if err := it.Err(); err != nil {
		return dbErr("list plugin allocations", err)
	}
	return nil
}

// allocPluginIDs returns the distinct plugins a running allocation runs,
// sorted; none for a terminal or missing one.
func allocPluginIDs(a *csi.Allocation) []string {
	if a == nil || a.Terminal {
		return nil
	}
	var ids []string
	for _, p := range a.Plugins {
		ids = append(ids, p.PluginID)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// expected returns how many controller and node instances of plugin a
// running allocation is expected to provide.
func expected(a *csi.Allocation, plugin string) (controllers, nodes int) {
	if a == nil || a.Terminal {
		return 0, 0
	}
	for _, ap := range a.Plugins {
		if ap.PluginID != plugin {
			continue
		}
		if ap.Type.HasController() {
			controllers++
		}
		if ap.Type.HasNode() {
			nodes++
		}
	}
	return controllers, nodes
}

// --- allocations ---

func validateAllocation(a *csi.Allocation) error {
	if err := csi.ValidateAllocationID(a.ID); err != nil {
		return err
	}
	if err := csi.ValidateNamespace(a.Namespace); err != nil {
		return fmt.Errorf("allocation %s: %w", a.ID, err)
	}
	if err := csi.ValidateNodeID(a.NodeID); err != nil {
		return fmt.Errorf("allocation %s: %w", a.ID, err)
	}
	seen := map[csi.AllocPlugin]bool{}
	for _, p := range a.Plugins {
		if err := csi.ValidatePluginID(p.PluginID); err != nil {
			return fmt.Errorf("allocation %s: %w", a.ID, err)
		}
		if !p.Type.Valid() {
			return fmt.Errorf("%w: allocation %s runs plugin %s with type %q; use controller, node or monolith",
				csi.ErrInvalidRequest, a.ID, p.PluginID, p.Type)
		}
		if seen[p] {
			return fmt.Errorf("%w: allocation %s lists plugin %s as %s twice", csi.ErrInvalidRequest, a.ID, p.PluginID, p.Type)
		}
		seen[p] = true
	}
	return nil
}

func (c UpsertAllocations) apply(w *writer) error {
	ids := map[string]bool{}
	terminal := false
	for i := range c.Allocations {
		a := &c.Allocations[i]
		if err := validateAllocation(a); err != nil {
			return err
		}
		if ids[a.ID] {
			return fmt.Errorf("%w: allocation %s appears twice in one upsert", csi.ErrInvalidRequest, a.ID)
		}
		ids[a.ID] = true
		terminal = terminal || a.Terminal
	}
	if terminal && c.ReleasedAt.IsZero() {
		return fmt.Errorf("%w: upsert of terminal allocations without ReleasedAt; set it to when they stopped",
			csi.ErrInvalidRequest)
	}
	var stopped []*csi.Allocation
	for i := range c.Allocations {
		a := c.Allocations[i].Copy()
		changed, err := w.upsertAllocation(a)
		if err != nil {
			return err
		}
		if changed && a.Terminal {
			stopped = append(stopped, a)
		}
	}
	if len(stopped) == 0 {
		return nil
	}
	stoppedIDs := make([]string, len(stopped))
	for i, a := range stopped {
		stoppedIDs[i] = a.ID
	}
	if err := w.releaseClaims(stoppedIDs, c.ReleasedAt); err != nil {
		return err
	}
	for _, a := range stopped {
		if err := w.dropInstances(a); err != nil {
			return err
		}
	}
	return nil
}

// upsertAllocation writes a and reports whether it changed anything;
// the caller releases the claims of a terminal allocation.
func (w *writer) upsertAllocation(a *csi.Allocation) (bool, error) {
	if len(a.Plugins) == 0 {
		a.Plugins = nil
	}
	old, err := getAllocation(w.txn, a.ID)
	if err != nil {
		return false, err
	}
	a.CreateIndex, a.ModifyIndex = w.index, w.index
	if old != nil {
		switch {
		case old.Terminal && !a.Terminal:
			return false, fmt.Errorf("%w: allocation %s is terminal and cannot run again; give the new run a new allocation ID",
				csi.ErrAllocationTerminal, a.ID)
		case old.Namespace != a.Namespace:
			return false, fmt.Errorf("%w: allocation %s is in namespace %s and cannot move to %s",
				csi.ErrInvalidRequest, a.ID, old.Namespace, a.Namespace)
		case old.NodeID != a.NodeID:
			return false, fmt.Errorf("%w: allocation %s runs on node %s and cannot move to node %s; place a new allocation",
				csi.ErrInvalidRequest, a.ID, old.NodeID, a.NodeID)
		}
		a.CreateIndex, a.ModifyIndex = old.CreateIndex, old.ModifyIndex
		if reflect.DeepEqual(a, old) {
			return false, nil
		}
		a.ModifyIndex = w.index
	}
	if err := w.insert(tAllocations, a); err != nil {
		return false, err
	}
	for _, x := range []*csi.Allocation{old, a} {
		sign := 1
		if x == old {
			sign = -1
		}
		for _, id := range allocPluginIDs(x) {
			c, n := expected(x, id)
			pc := w.plugin(id)
			pc.controllersExpected += sign * c
			pc.nodesExpected += sign * n
		}
	}
	return true, nil
}

// dropInstances removes the plugin instances a terminal allocation ran,
// on whichever nodes reported them.
func (w *writer) dropInstances(a *csi.Allocation) error {
	it, err := w.txn.Get(tInstances, iAlloc, a.ID)
	if err != nil {
		return dbErr("list instances of allocation", err)
	}
	var nodes []string
	for raw := it.Next(); raw != nil; raw = it.Next() {
		nodes = append(nodes, raw.(*instance).NodeID)
	}
	slices.Sort(nodes)
	for _, id := range slices.Compact(nodes) {
		n, err := getNode(w.txn, id)
		if err != nil {
			return err
		}
		keep := slices.DeleteFunc(slices.Clone(n.Plugins), func(p *csi.PluginInfo) bool { return p.AllocationID == a.ID })
		if err := w.setNodePlugins(id, keep, false); err != nil {
			return err
		}
	}
	return nil
}

func (c DeleteAllocations) apply(w *writer) error {
	for _, id := range c.AllocationIDs {
		if err := csi.ValidateAllocationID(id); err != nil {
			return err
		}
		a, err := getAllocation(w.txn, id)
		if err != nil {
			return err
		}
		if a == nil {
			continue
		}
		if !a.Terminal {
			return fmt.Errorf("%w: allocation %s is still running; upsert it as terminal before deleting it",
				csi.ErrInvalidRequest, id)
		}
		if err := w.delete(tAllocations, a); err != nil {
			return err
		}
	}
	return nil
}

// checkExternalFree refuses a volume v, new or completing its creation,
// whose backing volume is registered as another volume
// (*ExternalIDTakenError). Any other update needs no check: it cannot
// change PluginID or ExternalID.
func (w *writer) checkExternalFree(v *csi.Volume) error {
	// The lookup reads tRefs: the volumes this write registered so far
	// (earlier in a batch) go in first.
	if err := w.flushVolumes(); err != nil {
		return err
	}
	it, err := byRef(w.txn, tVolumes, refExternal, v.PluginID, v.ExternalID)
	if err != nil {
		return dbErr("look up external volume", err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		h := raw.(*csi.Volume)
		// A longer external ID holding a NUL can share the key's
		// leading parts (see refExternal).
		if h.ExternalID != v.ExternalID || (h.Namespace == v.Namespace && h.ID == v.ID) {
			continue
		}
		return &ExternalIDTakenError{Volume: VolumeKey{v.Namespace, v.ID}, PluginID: v.PluginID, ExternalID: v.ExternalID,
			Holder: VolumeKey{h.Namespace, h.ID}}
	}
	if err := it.Err(); err != nil {
		return dbErr("look up external volume", err)
	}
	return nil
}
