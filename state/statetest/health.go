package statetest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// health checks SetVolumeHealth, the Health reads and the drift
// commands FlagAttachmentVanished and AdoptAttachment.
func (s suite) health(t *testing.T) {
	t1 := t0.Add(time.Minute)
	bad := &state.Condition{Abnormal: true, Message: "disk lost"}
	ctrl := func(vol string, c *state.Condition, missing bool, at time.Time) state.HealthReport {
		return state.HealthReport{Namespace: nsDefault, VolumeID: vol, Condition: c, Missing: missing, At: at}
	}
	node := func(vol, n string, c *state.Condition, used int64, at time.Time) state.HealthReport {
		return state.HealthReport{Namespace: nsDefault, VolumeID: vol, NodeID: n, Condition: c,
			Usage: state.Usage{BytesUsed: used, BytesTotal: 100}, At: at}
	}
	set := func(r ...state.HealthReport) state.SetVolumeHealth { return state.SetVolumeHealth{Reports: r} }
	read := func(t *testing.T, w *world, vol string) *state.VolumeHealth {
		t.Helper()
		h, err := w.s.Health(nsDefault, vol)
		if err != nil {
			t.Fatalf("Health(%s): %v", vol, err)
		}
		return h
	}

	t.Run("WrittenAndRead", func(t *testing.T) {
		w := s.standard(t)
		if h := read(t, w, "data"); h != nil {
			t.Errorf("before any report: %s, want none", toJSON(h))
		}
		before := w.index(t, state.TableVolumes)
		w.must(t, set(ctrl("data", bad, false, t0), node("data", "n1", nil, 40, t0)))
		if after := w.index(t, state.TableVolumes); after <= before {
			t.Errorf("TableVolumes index %d after a health write, was %d", after, before)
		}
		h := read(t, w, "data")
		if h == nil || *h.Condition != *bad || !h.SeenAt.Equal(t0) || h.Nodes["n1"] == nil || h.Nodes["n1"].Usage.BytesUsed != 40 || !h.Abnormal() {
			t.Fatalf("Health = %s", toJSON(h))
		}
		h.Condition.Message = "changed"
		if read(t, w, "data").Condition.Message != bad.Message {
			t.Errorf("changing a returned record changed the store")
		}
		all, err := w.s.Healths()
		if err != nil || len(all) != 1 || all[0].VolumeID != "data" {
			t.Errorf("Healths = %s, %v", toJSON(all), err)
		}
	})

	t.Run("SameValueChangesNothing", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, set(ctrl("data", bad, false, t0), node("data", "n1", bad, 40, t0)))
		w.noop(t, set(ctrl("data", bad, false, t1), node("data", "n1", bad, 40, t1)))
		w.noop(t, set(ctrl("solo", nil, false, t1), state.HealthReport{Namespace: nsDefault, VolumeID: "solo", NodeID: "n2", At: t1})) // nothing for nothing
		if h := read(t, w, "data"); !h.SeenAt.Equal(t0) || !h.Nodes["n1"].SeenAt.Equal(t0) {
			t.Errorf("SeenAt moved on a repeated report: %s", toJSON(h))
		}
		w.must(t, set(node("data", "n1", bad, 41, t1)))
		if h := read(t, w, "data"); !h.Nodes["n1"].SeenAt.Equal(t1) || !h.SeenAt.Equal(t0) {
			t.Errorf("after a node change: %s", toJSON(h))
		}
	})

	t.Run("EmptiedRecordRemoved", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, set(ctrl("data", bad, false, t0), node("data", "n1", nil, 40, t0)))
		w.must(t, set(state.HealthReport{Namespace: nsDefault, VolumeID: "data", NodeID: "n1", At: t1}))
		if h := read(t, w, "data"); h == nil || h.Nodes != nil {
			t.Errorf("after the node's removal: %s", toJSON(h))
		}
		w.must(t, set(ctrl("data", nil, false, t1)))
		if h := read(t, w, "data"); h != nil {
			t.Errorf("an empty record stays: %s", toJSON(h))
		}
	})

	t.Run("MissingAndDeletedWithVolume", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, set(ctrl("data", nil, true, t0)))
		if h := read(t, w, "data"); h == nil || !h.Missing || !h.Abnormal() {
			t.Fatalf("Health = %s, want missing", toJSON(h))
		}
		w.must(t, state.DeregisterVolume{Namespace: nsDefault, VolumeID: "data"})
		if _, err := w.s.Health(nsDefault, "data"); !errors.Is(err, csi.ErrVolumeNotFound) {
			t.Errorf("Health of a deleted volume: %v", err)
		}
		if all, _ := w.s.Healths(); len(all) != 0 {
			t.Errorf("the record outlived its volume: %s", toJSON(all))
		}
		w.noop(t, set(ctrl("data", bad, false, t1))) // deleted meanwhile: skipped
	})

	t.Run("BadReportsRefused", func(t *testing.T) {
		w := s.standard(t)
		w.refuse(t, set(ctrl("data", bad, false, t0), state.HealthReport{Namespace: nsDefault, VolumeID: "data", NodeID: "n1", Missing: true}),
			csi.ErrInvalidRequest, "n1")
		w.refuse(t, set(node("data", "n1", nil, -1, t0)), csi.ErrInvalidRequest, "negative")
		w.refuse(t, set(ctrl("../x", nil, true, t0)), csi.ErrInvalidID)
	})

	t.Run("FlagVanished", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		flag := state.FlagAttachmentVanished{Namespace: nsDefault, VolumeID: "data", NodeID: "n1"}
		w.noop(t, flag) // Attaching already
		w.must(t, state.AttachVolume{Namespace: nsDefault, VolumeID: "data", NodeID: "n1", PublishContext: map[string]string{"dev": "x"}})
		w.must(t, flag)
		a := w.volume(t, nsDefault, "data").Attachments["n1"]
		if a.State != csi.AttachmentAttaching || a.PublishContext != nil {
			t.Fatalf("flagged attachment = %s, want Attaching without a context", toJSON(a))
		}
		// The claim repeated sees Attaching, so its flow publishes again.
		res := w.noop(t, claimCmd(nsDefault, "data", claim("web-1", "n1", csi.ClaimWrite, fsSNW)))
		if res.Attachment == nil || res.Attachment.State != csi.AttachmentAttaching {
			t.Errorf("repeated claim's attachment = %s", toJSON(res.Attachment))
		}
		w.refuse(t, state.FlagAttachmentVanished{Namespace: nsDefault, VolumeID: "data", NodeID: "n2"}, csi.ErrAttachmentNotFound)
	})

	t.Run("AdoptLeak", func(t *testing.T) {
		w := s.standard(t)
		adopt := func(vol, n string) state.AdoptAttachment {
			return state.AdoptAttachment{Namespace: nsDefault, VolumeID: vol, NodeID: n, ExternalNodeID: "ext-" + n}
		}
		w.must(t, claimCmd(nsDefault, "shared", claim("web-1", "n1", csi.ClaimWrite, fsMNMW)))
		w.refuse(t, adopt("shared", "n1"), csi.ErrVolumeInUse, "n1") // a claim and its record: an attach in flight
		w.must(t, state.ReleaseClaims{AllocationID: "web-1", ReleasedAt: t0})
		w.must(t, state.CheckpointClaim{Namespace: nsDefault, VolumeID: "shared", AllocationID: "web-1", State: csi.ClaimNodeDetached})
		w.must(t, state.RemoveAttachment{Namespace: nsDefault, VolumeID: "shared", NodeID: "n1"})
		w.refuse(t, adopt("shared", "n1"), csi.ErrVolumeInUse, "claim") // a past claim still releasing

		w.must(t, adopt("data", "n2"))
		a := w.volume(t, nsDefault, "data").Attachments["n2"]
		if a == nil || a.State != csi.AttachmentDetaching || a.ExternalNodeID != "ext-n2" {
			t.Fatalf("adopted attachment = %s", toJSON(a))
		}
		w.refuse(t, adopt("data", "n2"), csi.ErrVolumeInUse)
		err := w.refuseErr(t, claimCmd(nsDefault, "data", claim("web-2", "n2", csi.ClaimWrite, fsSNW)), csi.ErrVolumeInUse)
		if csi.Classify(err) != csi.ClassRetryable {
			t.Errorf("a claim during the leak's detach: class %s, want retryable", csi.Classify(err))
		}
		w.must(t, state.RemoveAttachment{Namespace: nsDefault, VolumeID: "data", NodeID: "n2"})
		w.must(t, claimCmd(nsDefault, "data", claim("web-2", "n2", csi.ClaimWrite, fsSNW)))
	})

	t.Run("SnapshotKeepsThem", func(t *testing.T) {
		w := s.standard(t)
		w.must(t, set(ctrl("data", bad, false, t0), node("logs", "n2", bad, 7, t0)))
		sn := snapshotter(t, w)
		snap := snapshot(t, sn)
		r := s.standard(t)
		if err := snapshotter(t, r).Restore(context.Background(), bytes.NewReader(snap)); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		a, _ := w.s.Healths()
		b, _ := r.s.Healths()
		if toJSON(a) != toJSON(b) || len(b) != 2 {
			t.Errorf("restored health %s, want %s", toJSON(b), toJSON(a))
		}
	})
}
