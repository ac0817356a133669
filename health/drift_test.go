package health_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/health"
	"github.com/csikit/csikit/state"
)

func TestMonitor_Pass_LeakDetachedAfterGraceNotBefore(t *testing.T) {
	for name, caps := range map[string]csi.ControllerCapabilities{
		"ListVolumes": listVolume,
		"GetVolume":   {PublishUnpublishVolume: true, GetVolume: true, ListVolumesPublishedNodes: true},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, options{ctrl: caps})
			h.volume("v1")
			h.fake.AttachOutOfBand("ext-v1", "csi-n2")
			h.pass() // first seen
			h.clock.Advance(grace - time.Second)
			h.pass()
			if v, _ := h.fake.Volume("ext-v1"); len(v.Attachments) != 1 || h.fake.CallCount(csitest.MethodControllerUnpublishVolume) != 0 {
				t.Fatalf("detached before the grace period: %v", v.Attachments)
			}
			if evs := h.drain(); len(evs) != 0 {
				t.Fatalf("events before the grace period: %s", kinds(evs))
			}
			h.clock.Advance(time.Second)
			h.pass()
			if v, _ := h.fake.Volume("ext-v1"); len(v.Attachments) != 0 {
				t.Fatalf("leak still attached after the grace period: %v", v.Attachments)
			}
			if got := h.volumeRec("v1").Attachments; len(got) != 0 {
				t.Errorf("records left: %v", got)
			}
			if got := kinds(h.drain()); got != "leak:v1@n2 leak-detached:v1@n2" {
				t.Errorf("events = %s", got)
			}
			if logs := h.logs.String(); !strings.Contains(logs, "detaching a leaked attachment") || !strings.Contains(logs, "node=n2") {
				t.Errorf("the decision is not logged with its node:\n%s", logs)
			}
			if v := h.fake.Violations(); len(v) != 0 {
				t.Errorf("violations: %v", v)
			}
		})
	}
}

func TestMonitor_Pass_LeakGoneBeforeGraceForgotten(t *testing.T) {
	h := newHarness(t, options{ctrl: listVolume})
	h.volume("v1")
	h.fake.AttachOutOfBand("ext-v1", "csi-n2")
	h.pass()
	h.fake.DropAttachment("ext-v1", "csi-n2")
	h.clock.Advance(grace)
	h.pass()
	h.fake.AttachOutOfBand("ext-v1", "csi-n2") // again: a new grace period
	h.clock.Advance(time.Second)
	h.pass()
	if h.fake.CallCount(csitest.MethodControllerUnpublishVolume) != 0 {
		t.Error("a leak seen again was detached without a new grace period")
	}
}

func TestMonitor_Pass_AttachInFlightNeverUndone(t *testing.T) {
	t.Run("RecordedBeforeTheRead", func(t *testing.T) {
		h := newHarness(t, options{ctrl: listVolume})
		h.volume("v1")
		// The claim flow wrote the claim and its Attaching record, and
		// ControllerPublishVolume went through; AttachVolume is not
		// written yet.
		h.apply(state.ClaimVolume{Namespace: ns, VolumeID: "v1", Claim: csi.Claim{AllocationID: "a2", NodeID: "n2", Mode: csi.ClaimWrite,
			AccessMode: fsSNW.AccessMode, AttachmentMode: fsSNW.AttachmentMode}})
		h.fake.AttachOutOfBand("ext-v1", "csi-n2")
		for range 3 {
			h.pass()
			h.clock.Advance(grace)
		}
		if h.fake.CallCount(csitest.MethodControllerUnpublishVolume) != 0 || h.volumeRec("v1").Attachments["n2"].State != csi.AttachmentAttaching {
			t.Fatalf("an attach in flight was undone: %+v", h.volumeRec("v1").Attachments)
		}
	})
	t.Run("ClaimedAfterTheRead", func(t *testing.T) {
		// The Monitor reads the volumes, then a claim comes (its record
		// and publish) before the Monitor acts: AdoptAttachment, checked
		// in the store's transaction, must refuse.
		var claimNow bool
		h := newHarness(t, options{ctrl: listVolume, wrap: func(h *harness, s health.Store) health.Store {
			return staleStore{Store: s, after: func() {
				if claimNow {
					claimNow = false
					h.apply(state.ClaimVolume{Namespace: ns, VolumeID: "v1", Claim: csi.Claim{AllocationID: "a2", NodeID: "n2", Mode: csi.ClaimWrite,
						AccessMode: fsSNW.AccessMode, AttachmentMode: fsSNW.AttachmentMode}})
				}
			}}
		}})
		h.volume("v1")
		h.fake.AttachOutOfBand("ext-v1", "csi-n2")
		h.pass()
		h.clock.Advance(grace)
		claimNow = true
		h.pass()
		if h.fake.CallCount(csitest.MethodControllerUnpublishVolume) != 0 {
			t.Fatal("the Monitor detached an attachment a claim took meanwhile")
		}
		if a := h.volumeRec("v1").Attachments["n2"]; a == nil || a.State != csi.AttachmentAttaching {
			t.Fatalf("the claim's record = %+v", a)
		}
		if evs := h.drain(); len(evs) != 0 {
			t.Errorf("events = %s", kinds(evs))
		}
	})
}

// staleStore returns the volumes as they were before after runs, as when
// a claim lands between the Monitor's read and its decision.
type staleStore struct {
	health.Store
	after func()
}

func (s staleStore) VolumesByPlugin(id string) ([]*csi.Volume, error) {
	vols, err := s.Store.VolumesByPlugin(id)
	s.after()
	return vols, err
}

func TestMonitor_Pass_LeakDetachResumed(t *testing.T) {
	h := newHarness(t, options{ctrl: listVolume})
	h.volume("v1")
	h.fake.AttachOutOfBand("ext-v1", "csi-n2")
	h.pass()
	h.clock.Advance(grace)
	h.fake.FailNext(csitest.MethodControllerUnpublishVolume, codes.Unavailable, 1)
	h.pass()
	if a := h.volumeRec("v1").Attachments["n2"]; a == nil || a.State != csi.AttachmentDetaching {
		t.Fatalf("after a failed unpublish the record = %+v, want Detaching", a)
	}
	h.pass()
	if v, _ := h.fake.Volume("ext-v1"); len(v.Attachments) != 0 || len(h.volumeRec("v1").Attachments) != 0 {
		t.Fatalf("the detach was not resumed: backend %v, records %v", v.Attachments, h.volumeRec("v1").Attachments)
	}
}

func TestMonitor_Pass_VanishedFlagged(t *testing.T) {
	h := newHarness(t, options{ctrl: listVolume})
	h.volume("v1")
	h.claim("v1", "a1", "n1")
	h.pass()
	if a := h.volumeRec("v1").Attachments["n1"]; a.State != csi.AttachmentAttached {
		t.Fatalf("a present attachment was flagged: %+v", a)
	}
	h.fake.DropAttachment("ext-v1", "csi-n1")
	h.pass()
	if a := h.volumeRec("v1").Attachments["n1"]; a.State != csi.AttachmentAttaching {
		t.Fatalf("vanished attachment record = %+v, want Attaching", a)
	}
	if got := kinds(h.drain()); got != "vanished:v1@n1" {
		t.Errorf("events = %s", got)
	}
	h.pass() // flagged once
	if evs := h.drain(); len(evs) != 0 {
		t.Errorf("events on the next pass = %s", kinds(evs))
	}
}

func TestMonitor_Pass_NoDriftWithoutPublishedNodes(t *testing.T) {
	h := newHarness(t, options{ctrl: csi.ControllerCapabilities{PublishUnpublishVolume: true, ListVolumes: true}})
	h.volume("v1")
	h.claim("v1", "a1", "n1")
	h.fake.DropAttachment("ext-v1", "csi-n1")
	h.fake.AttachOutOfBand("ext-v1", "csi-n2")
	h.pass()
	h.clock.Advance(grace)
	h.pass()
	atts := h.volumeRec("v1").Attachments
	if atts["n1"].State != csi.AttachmentAttached || atts["n2"] != nil || h.fake.CallCount(csitest.MethodControllerUnpublishVolume) != 0 {
		t.Errorf("drift acted without LIST_VOLUMES_PUBLISHED_NODES: %+v", atts)
	}

}
