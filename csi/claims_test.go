package csi_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
)

func TestCheckClaim_Rules(t *testing.T) {
	mnsw := csi.AccessModeMultiNodeSingleWriter
	snw := csi.AccessModeSingleNodeWriter
	cases := []struct {
		name     string
		vol      func() *csi.Volume
		claim    *csi.Claim
		want     error
		mentions []string
	}{
		{
			name:  "repeated identical claim is idempotent",
			vol:   func() *csi.Volume { return volumeWith(mnsw, claimOn("a1", "n1", csi.ClaimWrite, mnsw)) },
			claim: claimOn("a1", "n1", csi.ClaimWrite, mnsw),
		},
		{
			name:     "same allocation asking differently is refused",
			vol:      func() *csi.Volume { return volumeWith(mnsw, claimOn("a1", "n1", csi.ClaimRead, mnsw)) },
			claim:    claimOn("a1", "n1", csi.ClaimWrite, mnsw),
			want:     csi.ErrInvalidRequest,
			mentions: []string{"a1", "release it"},
		},
		{
			name: "allocation with a past claim cannot claim again",
			vol: func() *csi.Volume {
				v := volumeWith(mnsw)
				c := claimOn("a1", "n1", csi.ClaimWrite, mnsw)
				c.State = csi.ClaimUnpublishing
				v.PastClaims["a1"] = c
				return v
			},
			claim: claimOn("a1", "n1", csi.ClaimWrite, mnsw),
			want:  csi.ErrAllocationTerminal,
		},
		{
			name:     "capability the volume does not allow",
			vol:      func() *csi.Volume { return volumeWith(mnsw) },
			claim:    &csi.Claim{AllocationID: "a1", NodeID: "n1", Mode: csi.ClaimRead, AccessMode: mnsw, AttachmentMode: csi.AttachmentModeBlockDevice},
			want:     csi.ErrAccessModeNotAllowed,
			mentions: []string{"vol", "multi-node-single-writer/file-system", "block-device"},
		},
		{
			name:     "max claims message names the holders",
			vol:      func() *csi.Volume { return volumeWith(mnsw, claimOn("holder-1", "n1", csi.ClaimWrite, mnsw)) },
			claim:    claimOn("a2", "n2", csi.ClaimWrite, mnsw),
			want:     csi.ErrMaxClaims,
			mentions: []string{"volume vol", "holder-1", "a2"},
		},
		{
			name: "single node: an attachment left by a past claim elsewhere blocks",
			vol: func() *csi.Volume {
				v := volumeWith(snw)
				c := claimOn("old", "n1", csi.ClaimWrite, snw)
				c.State = csi.ClaimNodeDetached
				v.PastClaims["old"] = c
				v.Attachments = map[string]*csi.Attachment{"n1": {NodeID: "n1", State: csi.AttachmentAttached}}
				return v
			},
			claim:    claimOn("a2", "n2", csi.ClaimWrite, snw),
			want:     csi.ErrAttachedElsewhere,
			mentions: []string{"node n1 (attached", "being released", "a2"},
		},
		{
			name: "single node: a detaching attachment elsewhere blocks",
			vol: func() *csi.Volume {
				v := volumeWith(snw)
				v.Attachments = map[string]*csi.Attachment{"n1": {NodeID: "n1", State: csi.AttachmentDetaching}}
				return v
			},
			claim:    claimOn("a2", "n2", csi.ClaimWrite, snw),
			want:     csi.ErrAttachedElsewhere,
			mentions: []string{"node n1 (detaching"},
		},
		{
			name: "single node: past claim detached from its controller does not block",
			vol: func() *csi.Volume {
				v := volumeWith(snw)
				c := claimOn("old", "n1", csi.ClaimWrite, snw)
				c.State = csi.ClaimControllerDetached
				v.PastClaims["old"] = c
				return v
			},
			claim: claimOn("a2", "n2", csi.ClaimWrite, snw),
		},
		{
			name: "a past writer detached from its node does not count as a writer",
			vol: func() *csi.Volume {
				v := volumeWith(mnsw)
				c := claimOn("old", "n1", csi.ClaimWrite, mnsw)
				c.State = csi.ClaimNodeDetached
				v.PastClaims["old"] = c
				return v
			},
			claim: claimOn("a2", "n2", csi.ClaimWrite, mnsw),
		},
		{
			name: "a past writer still published on its node keeps the write",
			vol: func() *csi.Volume {
				v := volumeWith(mnsw)
				c := claimOn("old", "n1", csi.ClaimWrite, mnsw)
				c.State = csi.ClaimUnpublishing
				v.PastClaims["old"] = c
				return v
			},
			claim:    claimOn("a2", "n2", csi.ClaimWrite, mnsw),
			want:     csi.ErrVolumeInUse,
			mentions: []string{"volume vol", "old", "node n1", "unpublishing", "a2", "retry"},
		},
		{
			name: "a past writer still published does not keep readers out",
			vol: func() *csi.Volume {
				v := volumeWith(mnsw)
				c := claimOn("old", "n1", csi.ClaimWrite, mnsw)
				c.State = csi.ClaimUnpublishing
				v.PastClaims["old"] = c
				return v
			},
			claim: claimOn("a2", "n2", csi.ClaimRead, mnsw),
		},
		{
			name: "existing single-node claim constrains a multi-node newcomer",
			vol: func() *csi.Volume {
				v := volumeWith(snw, claimOn("a1", "n1", csi.ClaimWrite, snw))
				v.Capabilities = append(v.Capabilities, csi.Capability{AccessMode: csi.AccessModeMultiNodeMultiWriter, AttachmentMode: csi.AttachmentModeFileSystem})
				return v
			},
			claim: claimOn("a2", "n2", csi.ClaimRead, csi.AccessModeMultiNodeMultiWriter),
			want:  csi.ErrAttachedElsewhere,
		},
		{
			name: "a node the volume is being detached from refuses a new claim",
			vol: func() *csi.Volume {
				v := volumeWith(mnsw)
				c := claimOn("old", "n1", csi.ClaimWrite, mnsw)
				c.State = csi.ClaimNodeDetached
				v.PastClaims["old"] = c
				v.Attachments = map[string]*csi.Attachment{"n1": {NodeID: "n1", State: csi.AttachmentDetaching}}
				return v
			},
			claim:    claimOn("a2", "n1", csi.ClaimRead, mnsw),
			want:     csi.ErrVolumeInUse,
			mentions: []string{"being detached from node n1", "old", "retry"},
		},
		{
			name: "a node whose attachment is still attached takes a claim while another releases",
			vol: func() *csi.Volume {
				v := volumeWith(mnsw)
				c := claimOn("old", "n1", csi.ClaimWrite, mnsw)
				c.State = csi.ClaimNodeDetached
				v.PastClaims["old"] = c
				v.Attachments = map[string]*csi.Attachment{"n1": {NodeID: "n1", State: csi.AttachmentAttached}}
				return v
			},
			claim: claimOn("a2", "n1", csi.ClaimRead, mnsw),
		},
		{
			name: "a live claim on the node keeps the attachment, so a new claim there is fine",
			vol: func() *csi.Volume {
				v := volumeWith(mnsw, claimOn("live", "n1", csi.ClaimRead, mnsw))
				c := claimOn("old", "n1", csi.ClaimWrite, mnsw)
				c.State = csi.ClaimNodeDetached
				v.PastClaims["old"] = c
				return v
			},
			claim: claimOn("a2", "n1", csi.ClaimRead, mnsw),
		},
		{
			name: "a past claim still unpublishing or already controller-detached does not block its node",
			vol: func() *csi.Volume {
				v := volumeWith(mnsw)
				c := claimOn("old", "n1", csi.ClaimWrite, mnsw)
				c.State = csi.ClaimUnpublishing
				v.PastClaims["old"] = c
				d := claimOn("older", "n1", csi.ClaimWrite, mnsw)
				d.State = csi.ClaimControllerDetached
				v.PastClaims["older"] = d
				return v
			},
			claim: claimOn("a2", "n1", csi.ClaimRead, mnsw),
		},
		{
			name: "a detaching past claim on another node does not block",
			vol: func() *csi.Volume {
				v := volumeWith(mnsw)
				c := claimOn("old", "n2", csi.ClaimWrite, mnsw)
				c.State = csi.ClaimNodeDetached
				v.PastClaims["old"] = c
				return v
			},
			claim: claimOn("a2", "n1", csi.ClaimRead, mnsw),
		},
		{
			name:  "invalid allocation ID",
			vol:   func() *csi.Volume { return volumeWith(mnsw) },
			claim: claimOn("../x", "n1", csi.ClaimRead, mnsw),
			want:  csi.ErrInvalidID,
		},
		{
			name:  "undefined access mode",
			vol:   func() *csi.Volume { return volumeWith(mnsw) },
			claim: claimOn("a1", "n1", csi.ClaimRead, csi.AccessMode(42)),
			want:  csi.ErrInvalidRequest,
		},
		{
			name:  "missing volume",
			vol:   func() *csi.Volume { return nil },
			claim: claimOn("a1", "n1", csi.ClaimRead, mnsw),
			want:  csi.ErrVolumeNotFound,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.vol()
			var before *csi.Volume
			if v != nil {
				before = v.Copy()
			}
			err := csi.CheckClaim(v, tc.claim)
			if tc.want == nil && err != nil {
				t.Fatalf("CheckClaim = %v, want allowed", err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("CheckClaim = %v, want %v", err, tc.want)
			}
			for _, m := range tc.mentions {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
			if v != nil && len(v.ReadClaims)+len(v.WriteClaims)+len(v.PastClaims) != len(before.ReadClaims)+len(before.WriteClaims)+len(before.PastClaims) {
				t.Fatal("CheckClaim changed the volume")
			}
		})
	}
}

func TestIsRepeatClaim(t *testing.T) {
	m := csi.AccessModeMultiNodeMultiWriter
	v := volumeWith(m, claimOn("a1", "n1", csi.ClaimWrite, m))
	if !csi.IsRepeatClaim(v, claimOn("a1", "n1", csi.ClaimWrite, m)) {
		t.Fatal("identical claim not seen as repeat")
	}
	if csi.IsRepeatClaim(v, claimOn("a1", "n2", csi.ClaimWrite, m)) {
		t.Fatal("claim on another node seen as repeat")
	}
	if csi.IsRepeatClaim(v, claimOn("a2", "n1", csi.ClaimWrite, m)) {
		t.Fatal("another allocation seen as repeat")
	}
}

func TestVolume_CopyIsDeep(t *testing.T) {
	m := csi.AccessModeMultiNodeMultiWriter
	v := volumeWith(m, claimOn("a1", "n1", csi.ClaimWrite, m))
	v.Secrets = csi.Secrets{"k": "v"}
	v.Context = map[string]string{"c": "1"}
	v.MountOptions = &csi.MountOptions{MountFlags: []string{"ro"}}
	v.Topologies = []*csi.Topology{{Segments: map[string]string{"zone": "a"}}}
	v.Source = &csi.ContentSource{SnapshotID: "snap-1"}
	c := v.Copy()
	c.Source.SnapshotID = "changed"
	c.WriteClaims["a1"].NodeID = "changed"
	c.Secrets["k"] = "changed"
	c.Context["c"] = "changed"
	c.MountOptions.MountFlags[0] = "changed"
	c.Topologies[0].Segments["zone"] = "changed"
	c.Capabilities[0].AccessMode = csi.AccessModeSingleNodeWriter
	if v.WriteClaims["a1"].NodeID != "n1" || v.Secrets["k"] != "v" || v.Context["c"] != "1" ||
		v.MountOptions.MountFlags[0] != "ro" || v.Topologies[0].Segments["zone"] != "a" || v.Capabilities[0].AccessMode != m ||
		v.Source.SnapshotID != "snap-1" {
		t.Fatal("Copy shares storage with the original")
	}
}

func TestPluginInfo_SameAs(t *testing.T) {
	base := &csi.PluginInfo{PluginID: "p", Healthy: true, NodeInfo: &csi.NodeInfo{ID: "n", AccessibleTopology: &csi.Topology{Segments: map[string]string{"z": "a"}}}}
	same := base.Copy()
	same.UpdateTime = same.UpdateTime.AddDate(1, 0, 0)
	if !base.SameAs(same) {
		t.Fatal("UpdateTime alone must not count as a change")
	}
	capChange := base.Copy()
	capChange.NodeInfo.Capabilities.StageUnstageVolume = true
	topoChange := base.Copy()
	topoChange.NodeInfo.AccessibleTopology.Segments["z"] = "b"
	health := base.Copy()
	health.Healthy = false
	ctrl := base.Copy()
	ctrl.ControllerInfo = &csi.ControllerInfo{}
	for name, o := range map[string]*csi.PluginInfo{"capability": capChange, "topology": topoChange, "health": health, "controller": ctrl} {
		if base.SameAs(o) {
			t.Errorf("%s change not detected", name)
		}
	}
}

func TestModes_TextRoundTrip(t *testing.T) {
	for m := csi.AccessModeSingleNodeWriter; m <= csi.AccessModeSingleNodeMultiWriter; m++ {
		b, _ := m.MarshalText()
		var got csi.AccessMode
		if err := got.UnmarshalText(b); err != nil || got != m {
			t.Fatalf("access mode %v round trip: %v, %v", m, got, err)
		}
	}
	for _, m := range []csi.AttachmentMode{csi.AttachmentModeFileSystem, csi.AttachmentModeBlockDevice} {
		b, _ := m.MarshalText()
		var got csi.AttachmentMode
		if err := got.UnmarshalText(b); err != nil || got != m {
			t.Fatalf("attachment mode %v round trip: %v, %v", m, got, err)
		}
	}
	for s := csi.ClaimTaken; s <= csi.ClaimReadyToFree; s++ {
		b, _ := s.MarshalText()
		var got csi.ClaimState
		if err := got.UnmarshalText(b); err != nil || got != s {
			t.Fatalf("claim state %v round trip: %v, %v", s, got, err)
		}
	}
	var m csi.AccessMode
	if err := m.UnmarshalText([]byte("bogus")); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("bogus access mode: %v", err)
	}
}

// TestCheckClaim_ReleasedClaimStillPublished is the regression of the
// bug the simulation found (internal/sim): a past claim whose node step
// is not done is still published on its node, and CheckClaim let a
// second holder in beside it. Each case failed before the fix.
func TestCheckClaim_ReleasedClaimStillPublished(t *testing.T) {
	snsw := csi.AccessModeSingleNodeSingleWriter
	snw := csi.AccessModeSingleNodeWriter
	mnsw := csi.AccessModeMultiNodeSingleWriter
	past := func(am csi.AccessMode, mode csi.ClaimMode, st csi.ClaimState) *csi.Volume {
		v := volumeWith(am)
		c := claimOn("old", "n1", mode, am)
		c.State = st
		v.PastClaims["old"] = c
		v.Attachments = map[string]*csi.Attachment{"n1": {NodeID: "n1", State: csi.AttachmentAttached}}
		return v
	}
	for _, tc := range []struct {
		name  string
		vol   *csi.Volume
		claim *csi.Claim
		want  error
	}{
		{"single-node-single-writer, same node, writer after writer",
			past(snsw, csi.ClaimWrite, csi.ClaimUnpublishing), claimOn("new", "n1", csi.ClaimWrite, snsw), csi.ErrVolumeInUse},
		{"single-node-single-writer, same node, reader after writer",
			past(snsw, csi.ClaimWrite, csi.ClaimUnpublishing), claimOn("new", "n1", csi.ClaimRead, snsw), csi.ErrVolumeInUse},
		{"single-node-single-writer, same node, writer after reader",
			past(snsw, csi.ClaimRead, csi.ClaimUnpublishing), claimOn("new", "n1", csi.ClaimWrite, snsw), csi.ErrVolumeInUse},
		{"single-node-writer, same node, writer after writer",
			past(snw, csi.ClaimWrite, csi.ClaimUnpublishing), claimOn("new", "n1", csi.ClaimWrite, snw), csi.ErrVolumeInUse},
		{"multi-node-single-writer, other node, writer after writer",
			past(mnsw, csi.ClaimWrite, csi.ClaimUnpublishing), claimOn("new", "n2", csi.ClaimWrite, mnsw), csi.ErrVolumeInUse},
		{"single-node-single-writer, once node-detached",
			past(snsw, csi.ClaimWrite, csi.ClaimNodeDetached), claimOn("new", "n1", csi.ClaimWrite, snsw), nil},
		{"single-node-writer, reader beside a releasing writer",
			past(snw, csi.ClaimWrite, csi.ClaimUnpublishing), claimOn("new", "n1", csi.ClaimRead, snw), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := csi.CheckClaim(tc.vol, tc.claim)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("CheckClaim = %v, want allowed", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("CheckClaim = %v, want %v", err, tc.want)
			}
			if csi.Classify(err) != csi.ClassRetryable {
				t.Errorf("CheckClaim = %v: class %v, want retryable", err, csi.Classify(err))
			}
		})
	}
}
