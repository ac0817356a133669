// apply_volumes.go owns the volume rows: RegisterVolume (which also
// updates and completes a creation), DeregisterVolume, and the writer's
// helpers that read, write and delete a volume.
//
// Rules a reader must know:
//
//   - A stored volume is shared with readers of older states: change a
//     copy from editable and write it with putVolume, which stamps
//     ModifyIndex and keeps PastClaimsIndex right (notePast).
//   - A registration never changes a volume's claims or attachments,
//     which only the claim commands write; an update keeps them and
//     must still allow every live claim's capability.
//   - A volume's plugin, external ID and provider are fixed once
//     registered; the one exception is a creation (Creating) that
//     completes, which sets the external ID the plugin answered.
//   - One volume at most stands for one backing volume (plugin ID and
//     external ID), checked whenever an external ID is new to the
//     store (checkExternalFree).
//   - Empty collections are stored as nil (normalizeVolume), so that
//     a volume reads the same after a snapshot or a log replay.

package state

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/csikit/csikit/csi"
)

// putVolume writes v, a volume the writer owns (new, or a copy from
// editable), into the transaction; later reads in the same write,
// lookups through tRefs included, see it.
func (w *writer) putVolume(v *csi.Volume) error {
	normalizeVolume(v)
	v.ModifyIndex = w.index
	if err := w.notePast(v.Namespace, v.ID, len(v.PastClaims) > 0); err != nil {
		return err
	}
	return w.insert(tVolumes, v)
}

// notePast sets w.past when the volume ns/id holds past claims as this
// write left it so far, or will (has), so that PastClaimsIndex moves
// with every write to such a volume. It reads the volume before the
// caller writes it.
func (w *writer) notePast(ns, id string, has bool) error {
	if w.past || has {
		w.past = true
		return nil
	}
	old, err := w.volume(ns, id)
	if err != nil {
		return err
	}
	w.past = old != nil && len(old.PastClaims) > 0
	return nil
}

// volume returns a volume as this write leaves it so far (the stored
// row: replace, never modify), or nil.
func (w *writer) volume(ns, id string) (*csi.Volume, error) {
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

// deleteVolume removes v, the volume as this write left it so far.
func (w *writer) deleteVolume(v *csi.Volume) error {
	if len(v.PastClaims) > 0 {
		w.past = true
	}
	if err := w.dropHealth(v.Namespace, v.ID); err != nil {
		return err
	}
	return w.delete(tVolumes, v)
}

func validateVolumeRef(ns, id string) error {
	if err := csi.ValidateNamespace(ns); err != nil {
		return err
	}
	return csi.ValidateVolumeID(id)
}

func validateVolume(v *csi.Volume) error {
	if err := validateVolumeRef(v.Namespace, v.ID); err != nil {
		return err
	}
	if err := csi.ValidatePluginID(v.PluginID); err != nil {
		return fmt.Errorf("volume %s: %w", volName(v.Namespace, v.ID), err)
	}
	switch {
	case v.Creating && v.Deleting:
		return fmt.Errorf("%w: volume %s is marked both Creating and Deleting; a volume being created is not deleted until its creation completes",
			csi.ErrInvalidRequest, volName(v.Namespace, v.ID))
	case v.Creating && v.ExternalID != "":
		return fmt.Errorf("%w: volume %s is being created and names external ID %q; a creation intent has no external ID until the plugin answers",
			csi.ErrInvalidRequest, volName(v.Namespace, v.ID), v.ExternalID)
	case !v.Creating:
		if err := csi.ValidateExternalID("external volume ID", v.ExternalID); err != nil {
			return fmt.Errorf("volume %s: %w", volName(v.Namespace, v.ID), err)
		}
	}
	if v.Source != nil {
		if err := v.Source.Validate(); err != nil {
			return fmt.Errorf("volume %s: Source: %w", volName(v.Namespace, v.ID), err)
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

func normalizeMountOptions(o *csi.MountOptions) {
	if o != nil && o.MountFlags != nil && len(o.MountFlags) == 0 {
		o.MountFlags = nil
	}
}

// editable returns a shallow copy of v whose claim and attachment maps
// may be changed. The claims and attachments in them stay shared with
// v: replace one with a changed copy, never modify it. Every edit
// copies, of a volume this write already inserted too: a volume in the
// transaction is the stored row, and may share its maps with the
// version it replaced (an update keeps its claims), which reads of
// older states still hold.
func editable(v *csi.Volume) *csi.Volume {
	c := *v
	c.ReadClaims = maps.Clone(v.ReadClaims)
	c.WriteClaims = maps.Clone(v.WriteClaims)
	c.PastClaims = maps.Clone(v.PastClaims)
	c.Attachments = maps.Clone(v.Attachments)
	return &c
}

// RegisterVolume registers a new volume (registerNew) or updates a
// registered one (updateRegistration). What the store derives is
// reset from the command: claims and attachments come from the stored
// volume, the plugin's fields from the plugin at each read.
func (c RegisterVolume) apply(w *writer) error {
	v := c.Volume.Copy()
	if err := validateVolume(v); err != nil {
		return err
	}
	v.ReadClaims, v.WriteClaims, v.PastClaims, v.Attachments = nil, nil, nil, nil
	// Expansions and modifies change only through their commands.
	v.Expansion, v.ModifyingParameters = nil, nil
	v.ControllerRequired, v.Schedulable = false, false
	v.ControllersHealthy, v.ControllersExpected, v.NodesHealthy, v.NodesExpected = 0, 0, 0, 0
	old, err := w.volume(v.Namespace, v.ID)
	if err != nil {
		return err
	}
	if old == nil {
		return w.registerNew(v)
	}
	return w.updateRegistration(old, v)
}

// registerNew writes v, a volume new to the store. Its plugin must
// exist (the plugin's provider fills an empty one and must match a
// given one), and its backing volume must not be registered as another
// volume; a creation intent has no external ID to check yet.
func (w *writer) registerNew(v *csi.Volume) error {
	p, err := getPlugin(w.txn, v.PluginID)
	if err != nil {
		return err
	}
	if p == nil {
		return fmt.Errorf("register volume %s: %w", volName(v.Namespace, v.ID), pluginNotFound(v.PluginID))
	}
	switch {
	case v.Provider == "":
		v.Provider = p.Provider
	case p.Provider != "" && v.Provider != p.Provider:
		return fmt.Errorf("%w: volume %s names provider %q but plugin %s is provider %q; fix the provider or leave it empty",
			csi.ErrInvalidRequest, volName(v.Namespace, v.ID), v.Provider, v.PluginID, p.Provider)
	}
	if v.Deleting {
		return fmt.Errorf("%w: volume %s is not registered, so it cannot be marked Deleting", csi.ErrVolumeNotFound, volName(v.Namespace, v.ID))
	}
	if !v.Creating {
		if err := w.checkExternalFree(v); err != nil {
			return err
		}
	}
	v.CreateIndex = w.index
	return w.putVolume(v)
}

// updateRegistration replaces old, a registered volume, with v, keeping
// old's claims and attachments. It refuses a change of plugin, provider
// or external ID (but for a creation that completes), a return to
// Creating, and capabilities that drop one a live claim uses. An update
// that changes nothing writes nothing.
func (w *writer) updateRegistration(old, v *csi.Volume) error {
	name := volName(v.Namespace, v.ID)
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
	if v.Deleting && !old.Deleting && old.InUse() {
		return fmt.Errorf("%w: volume %s has claims or attachments; delete it once they are released",
			csi.ErrVolumeInUse, name)
	}
	if completes {
		// The creation's outcome: its external ID is new to the store.
		if err := w.checkExternalFree(v); err != nil {
			return err
		}
	}
	// Sorted, so that a volume with several such claims names the same
	// one on every replica.
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
	v.Expansion, v.ModifyingParameters = old.Expansion, old.ModifyingParameters
	normalizeVolume(v)
	if reflect.DeepEqual(v, old) {
		return nil
	}
	return w.putVolume(v)
}

// DeregisterVolume removes a volume. Without Force it refuses one that
// is in use: a claim, live or past, or an attachment, which the release
// worker has yet to detach.
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

// checkExternalFree refuses a volume v, new or completing its creation,
// whose backing volume is registered as another volume
// (*ExternalIDTakenError). Any other update needs no check: it cannot
// change PluginID or ExternalID.
func (w *writer) checkExternalFree(v *csi.Volume) error {
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
