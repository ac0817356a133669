package statetest

import (
	"errors"
	"maps"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// attachments checks the attachment records: written with the first
// claim on a node, shared by every later claim there, never inferred
// from a publish context, and detached only once no claim on the node
// needs them.
func (s suite) attachments(t *testing.T) {
	att := func(t *testing.T, w *world, vol, node string) *csi.Attachment {
		t.Helper()
		return w.volume(t, nsDefault, vol).Attachments[node]
	}
	detach := func(vol, node string) state.DetachVolume {
		return state.DetachVolume{Namespace: nsDefault, VolumeID: vol, NodeID: node}
	}
	removeAtt := func(vol, node string) state.RemoveAttachment {
		return state.RemoveAttachment{Namespace: nsDefault, VolumeID: vol, NodeID: node}
	}
	attach := func(vol, node string, pc map[string]string) state.AttachVolume {
		return state.AttachVolume{Namespace: nsDefault, VolumeID: vol, NodeID: node, PublishContext: pc}
	}
	release := func(t *testing.T, w *world, alloc string, to csi.ClaimState) {
		t.Helper()
		w.must(t, state.ReleaseClaims{AllocationID: alloc, ReleasedAt: t0})
		if to > csi.ClaimUnpublishing {
			w.must(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: alloc, State: to})
		}
	}

	t.Run("FirstClaimMakesIt", func(t *testing.T) {
		w := s.standard(t)
		res := w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		a := att(t, w, "data", "n1")
		if a == nil {
			t.Fatalf("no attachment to n1 after the first claim: %s", toJSON(w.volume(t, nsDefault, "data")))
		}
		want := csi.Attachment{NodeID: "n1", ExternalNodeID: "ext-n1", State: csi.AttachmentAttaching, CreateIndex: res.Index, ModifyIndex: res.Index}
		if toJSON(a) != toJSON(&want) {
			t.Errorf("attachment = %s, want %s", toJSON(a), toJSON(&want))
		}
		if toJSON(res.Attachment) != toJSON(a) {
			t.Errorf("Result.Attachment = %s, want the stored %s", toJSON(res.Attachment), toJSON(a))
		}
		// A repeated claim returns the same record.
		res = w.noop(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		if res.Attachment == nil || res.Attachment.State != csi.AttachmentAttaching {
			t.Errorf("repeated claim's Result.Attachment = %s", toJSON(res.Attachment))
		}
	})

	t.Run("EmptyPublishContextIsAttached", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimWrite, fsMNMW)))
		w.must(t, attach("shared", "n1", map[string]string{}))
		a := att(t, w, "shared", "n1")
		if a.State != csi.AttachmentAttached || a.PublishContext != nil {
			t.Fatalf("attachment after AttachVolume with {} = %s, want attached with no context", toJSON(a))
		}
		w.noop(t, attach("shared", "n1", nil))
		// A second claim on the node joins the attachment as it is.
		res := w.must(t, claimCmd(nsDefault, "shared", claim("web-3", "n1", csi.ClaimWrite, fsMNMW)))
		if res.Attachment == nil || res.Attachment.State != csi.AttachmentAttached || res.Attachment.CreateIndex != a.CreateIndex {
			t.Errorf("second claim's Result.Attachment = %s, want the first one's, attached", toJSON(res.Attachment))
		}
		// Another node gets its own.
		res = w.must(t, claimCmd(nsDefault, "shared", claim("web-2", "n2", csi.ClaimWrite, fsMNMW)))
		if res.Attachment == nil || res.Attachment.State != csi.AttachmentAttaching || res.Attachment.NodeID != "n2" {
			t.Errorf("claim on n2: Result.Attachment = %s, want a new attaching one", toJSON(res.Attachment))
		}
	})

	t.Run("PublishContext", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		pc := map[string]string{"device": "/dev/xvdf"}
		w.must(t, attach("data", "n1", pc))
		pc["device"] = "changed"
		if got := att(t, w, "data", "n1").PublishContext; !maps.Equal(got, map[string]string{"device": "/dev/xvdf"}) {
			t.Errorf("PublishContext = %v, want the one given (copied)", got)
		}
		w.noop(t, attach("data", "n1", map[string]string{"device": "/dev/xvdf"}))
		w.refuse(t, attach("data", "n2", pc), csi.ErrAttachmentNotFound, "n2")
		w.refuse(t, attach("missing", "n1", pc), csi.ErrVolumeNotFound)
		w.refuse(t, attach("data", "", pc), csi.ErrInvalidID)
		// The command of logs written before attachment records.
		w.must(t, state.SetPublishContext{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1", PublishContext: map[string]string{"lun": "3"}})
		if a := att(t, w, "data", "n1"); a.State != csi.AttachmentAttached || !maps.Equal(a.PublishContext, map[string]string{"lun": "3"}) {
			t.Errorf("after SetPublishContext: %s", toJSON(a))
		}
		w.refuse(t, state.SetPublishContext{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-3"}, csi.ErrClaimNotFound, "web-3")
	})

	t.Run("DetachOnlyWhenNoClaimNeedsIt", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimWrite, fsMNMW)))
		w.must(t, attach("shared", "n1", nil))
		w.refuse(t, detach("shared", "n1"), csi.ErrVolumeInUse, "web-1", "n1")
		w.refuse(t, removeAtt("shared", "n1"), csi.ErrVolumeInUse, "web-1")
		release(t, w, "web-1", csi.ClaimUnpublishing)
		// The node step is not done: the volume may still be mounted.
		w.refuse(t, detach("shared", "n1"), csi.ErrVolumeInUse, "web-1")
		w.must(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-1", State: csi.ClaimNodeDetached})
		// The last claim on the node cannot be freed while attached.
		w.refuse(t, state.FreeClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-1"}, csi.ErrVolumeInUse, "n1")
		w.must(t, detach("shared", "n1"))
		w.noop(t, detach("shared", "n1"))
		if a := att(t, w, "shared", "n1"); a == nil || a.State != csi.AttachmentDetaching {
			t.Fatalf("attachment = %s, want detaching", toJSON(a))
		}
		// A claim on a node being detached is refused, as retryable.
		err := w.refuseErr(t, claimCmd(nsDefault, "shared", claim("web-3", "n1", csi.ClaimWrite, fsMNMW)), csi.ErrVolumeInUse, "n1", "web-1")
		if !csi.IsRetryable(err) {
			t.Errorf("claim on a detaching node: %v is not retryable", err)
		}
		w.refuse(t, attach("shared", "n1", nil), csi.ErrVolumeInUse, "n1")
		// Elsewhere is fine.
		w.must(t, claimCmd(nsDefault, "shared", claim("web-2", "n2", csi.ClaimWrite, fsMNMW)))
		w.must(t, state.Batch{Commands: []state.Command{
			removeAtt("shared", "n1"),
			state.FreeClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-1"},
		}})
		v := w.volume(t, nsDefault, "shared")
		if v.Attachments["n1"] != nil || v.PastClaims["web-1"] != nil {
			t.Errorf("after the detach and free: %s", toJSON(v))
		}
		w.noop(t, removeAtt("shared", "n1"))
		w.refuse(t, detach("shared", "n1"), csi.ErrAttachmentNotFound, "n1")
		w.must(t, claimCmd(nsDefault, "shared", claim("web-3", "n1", csi.ClaimWrite, fsMNMW)))
	})

	t.Run("ClaimJoinsWhileAnotherReleases", func(t *testing.T) {
		// A claim released on a node whose attachment is still attached
		// (its detach not decided) does not keep a new claim out: the
		// new one joins, and the detach is then refused.
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimWrite, fsMNMW)))
		w.must(t, attach("shared", "n1", map[string]string{"lun": "1"}))
		release(t, w, "web-1", csi.ClaimNodeDetached)
		res := w.must(t, claimCmd(nsDefault, "shared", claim("web-3", "n1", csi.ClaimWrite, fsMNMW)))
		if res.Attachment == nil || res.Attachment.State != csi.AttachmentAttached || res.Attachment.PublishContext["lun"] != "1" {
			t.Errorf("claim joining an attached node: Result.Attachment = %s", toJSON(res.Attachment))
		}
		w.refuse(t, detach("shared", "n1"), csi.ErrVolumeInUse, "web-3")
		// The released claim is freed at once: only the detach waits.
		w.must(t, state.FreeClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-1"})
		if a := att(t, w, "shared", "n1"); a == nil || a.State != csi.AttachmentAttached {
			t.Errorf("attachment after freeing one of two claims = %s, want it kept", toJSON(a))
		}
	})

	t.Run("RemoveClaim", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimWrite, fsMNMW)))
		w.must(t, claimCmd(nsDefault, "shared", claim("web-3", "n1", csi.ClaimWrite, fsMNMW)))
		// Not the last claim there: the attachment stays.
		w.must(t, state.RemoveClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-3"})
		if att(t, w, "shared", "n1") == nil {
			t.Fatal("attachment gone with one of two claims")
		}
		// The last, while attaching: nothing was attached, it goes too.
		w.must(t, state.RemoveClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-1"})
		if v := w.volume(t, nsDefault, "shared"); v.InUse() {
			t.Errorf("volume in use after removing its only claim: %s", toJSON(v))
		}
		// The last, once attached: refused, it must be detached.
		w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimWrite, fsMNMW)))
		w.must(t, attach("shared", "n1", nil))
		w.refuse(t, state.RemoveClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-1"}, csi.ErrVolumeInUse, "n1")
	})

	t.Run("SingleNodeStaysUntilDetached", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		w.must(t, attach("data", "n1", nil))
		w.must(t, state.ReleaseClaims{AllocationID: "web-1", ReleasedAt: t0})
		w.must(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1", State: csi.ClaimNodeDetached})
		err := w.refuseErr(t, claimCmd(nsDefault, "data", claim("web-2", "n2", csi.ClaimWrite, fsSNW)), csi.ErrAttachedElsewhere, "n1", "web-2")
		if errors.Is(err, csi.ErrMaxClaims) {
			t.Errorf("%v", err)
		}
		w.must(t, detach("data", "n1"))
		w.refuse(t, claimCmd(nsDefault, "data", claim("web-2", "n2", csi.ClaimWrite, fsSNW)), csi.ErrAttachedElsewhere, "n1")
		w.must(t, state.Batch{Commands: []state.Command{
			removeAtt("data", "n1"),
			state.FreeClaim{Namespace: nsDefault, VolumeID: "data", AllocationID: "web-1"},
		}})
		w.must(t, claimCmd(nsDefault, "data", claim("web-2", "n2", csi.ClaimWrite, fsSNW)))
	})

	t.Run("DeregisterWhileAttached", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimWrite, fsMNMW)))
		w.must(t, attach("shared", "n1", nil))
		release(t, w, "web-1", csi.ClaimNodeDetached)
		w.must(t, detach("shared", "n1"))
		w.must(t, state.Batch{Commands: []state.Command{
			removeAtt("shared", "n1"),
			state.FreeClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-1"},
		}})
		w.must(t, state.DeregisterVolume{Namespace: nsDefault, VolumeID: "shared"})
	})
}
