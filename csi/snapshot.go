package csi

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"time"
)

// KindSnapshot names a csikit snapshot ID in IDError messages.
const KindSnapshot IDKind = "snapshot ID"

// ValidateSnapshotID validates a csikit snapshot ID (not the plugin's
// external snapshot ID).
func ValidateSnapshotID(s string) error { return ValidateID(KindSnapshot, s) }

// Snapshot is a CSI snapshot known to the orchestrator: a point-in-time
// copy of a volume that a new volume can be restored from.
//
// A snapshot lives in a namespace, like its source volume, and outlives
// it: deleting the source volume leaves the snapshot (SourceVolumeID
// then names a volume that is gone). What a state.Reader returns is a
// deep copy the caller owns.
type Snapshot struct {
	Namespace string
	ID        string
	// SourceVolumeID is the csikit ID of the snapshotted volume, in the
	// same namespace; empty for a snapshot registered from the plugin
	// whose source volume csikit does not know.
	SourceVolumeID string `json:",omitempty"`
	// SourceExternalID is the plugin's ID of the snapshotted volume.
	SourceExternalID string `json:",omitempty"`
	// ExternalID is the plugin's snapshot ID; empty while Creating.
	ExternalID string `json:",omitempty"`
	PluginID   string
	// Creating marks the intent of a CreateSnapshot written before the
	// plugin is called. Repeating the create (with the same
	// deterministic CSI name, SnapshotName) completes it.
	Creating bool `json:",omitempty"`
	// Deleting marks the intent of a DeleteSnapshot written before the
	// plugin is called: the snapshot may no longer be restored from,
	// and repeating the delete completes it.
	Deleting bool `json:",omitempty"`
	// Size in bytes as the plugin reported it; 0 means unknown.
	Size int64 `json:",omitempty"`
	// CreatedAt is the plugin's creation time (UTC).
	CreatedAt time.Time `json:",omitzero"`
	// ReadyToUse: the plugin reported the snapshot can be restored.
	ReadyToUse bool `json:",omitempty"`
	// Parameters were given to CreateSnapshot.
	Parameters map[string]string `json:",omitempty"`
	// Secrets are passed to DeleteSnapshot; never logged or shown.
	Secrets Secrets `json:",omitempty"`

	CreateIndex uint64
	ModifyIndex uint64
}

// Copy returns a deep copy of s; nil stays nil.
func (s *Snapshot) Copy() *Snapshot {
	if s == nil {
		return nil
	}
	c := *s
	c.Parameters = maps.Clone(s.Parameters)
	c.Secrets = s.Secrets.Copy()
	return &c
}

// SnapshotName is the deterministic CSI name of the snapshot ID of
// namespace: "csikit-" and the first 32 hex digits of the SHA-256 of
// "namespace/id". A create retried or resumed after a crash asks the
// plugin for the same name, so the plugin returns the snapshot it made
// the first time instead of making a second one. The name fits every
// plugin's length limit and holds no namespace or ID in clear.
func SnapshotName(namespace, id string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + id))
	return "csikit-" + hex.EncodeToString(sum[:16])
}
