package state_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// smallCluster returns a store with a plugin, two allocations, a volume
// and a claim, and the index of its last write.
func smallCluster(t testing.TB) (*state.MemStore, uint64) {
	t.Helper()
	s := newMemStore(t)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fs := csi.Capability{AccessMode: csi.AccessModeMultiNodeMultiWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	cmds := []state.Command{
		state.UpsertAllocations{Allocations: []csi.Allocation{
			{ID: "hp-1", Namespace: "default", NodeID: "n1", Plugins: []csi.AllocPlugin{{PluginID: "hp", Type: csi.PluginTypeMonolith}}},
			{ID: "web-1", Namespace: "default", NodeID: "n1"},
		}},
		state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{{
			PluginID: "hp", AllocationID: "hp-1", Type: csi.PluginTypeMonolith, Healthy: true, UpdateTime: at,
			ControllerInfo: &csi.ControllerInfo{}, NodeInfo: &csi.NodeInfo{ID: "csi-n1"},
		}}},
		state.RegisterVolume{Volume: csi.Volume{ID: "v1", Namespace: "default", ExternalID: "x1", PluginID: "hp",
			Capabilities: []csi.Capability{fs}, Secrets: csi.Secrets{"token": "hunter2-secret"}}},
		state.ClaimVolume{Namespace: "default", VolumeID: "v1", Claim: csi.Claim{AllocationID: "web-1", NodeID: "n1",
			Mode: csi.ClaimWrite, AccessMode: fs.AccessMode, AttachmentMode: fs.AttachmentMode}},
	}
	for i, c := range cmds {
		if _, err := s.Apply(uint64(i+1), c); err != nil {
			t.Fatalf("apply %s: %v", c.Kind(), err)
		}
	}
	return s, uint64(len(cmds))
}

func snapshotBytes(t testing.TB, s *state.MemStore) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := s.Snapshot(context.Background(), &b); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	return b.Bytes()
}

// TestMemStore_Restore_EveryTruncation cuts a snapshot at every byte:
// each cut is refused and leaves the store as it was.
func TestMemStore_Restore_EveryTruncation(t *testing.T) {
	src, _ := smallCluster(t)
	snap := snapshotBytes(t, src)
	dst := newMemStore(t)
	if _, err := dst.Apply(1, state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "keep", Namespace: "default", NodeID: "n9"}}}); err != nil {
		t.Fatal(err)
	}
	before := snapshotBytes(t, dst)
	for n := range len(snap) {
		if err := dst.Restore(context.Background(), bytes.NewReader(snap[:n])); !errors.Is(err, state.ErrBadSnapshot) {
			t.Fatalf("Restore of the first %d of %d bytes: %v, want ErrBadSnapshot", n, len(snap), err)
		}
	}
	if after := snapshotBytes(t, dst); !bytes.Equal(after, before) {
		t.Errorf("failed restores changed the store")
	}
	if err := dst.Restore(context.Background(), bytes.NewReader(snap)); err != nil {
		t.Fatalf("Restore of the whole snapshot: %v", err)
	}
	if got := snapshotBytes(t, dst); !bytes.Equal(got, snap) {
		t.Errorf("restored store snapshots differently")
	}
	if got := dst.LastIndex(); got != 4 {
		t.Errorf("LastIndex after restore = %d, want 4", got)
	}
}

func TestMemStore_Restore_Refused(t *testing.T) {
	src, _ := smallCluster(t)
	snap := string(snapshotBytes(t, src))
	header, rest, _ := strings.Cut(snap, "\n")
	for _, tc := range []struct {
		name, data, mention string
	}{
		{"Version3", strings.Replace(header, `"version":2`, `"version":3`, 1) + "\n" + rest, "version 3"},
		{"Version0", strings.Replace(header, `"version":2`, `"version":0`, 1) + "\n" + rest, "version 0"},
		{"OtherFormat", strings.Replace(header, `csikit-state`, `other-state`, 1) + "\n" + rest, "other-state"},
		{"UnknownTable", header + "\n" + `{"table":"secrets","row":{}}` + "\n" + rest, "secrets"},
		{"TwoSnapshots", snap + snap, "after the trailer"},
		{"NoNewlineAtEnd", strings.TrimSuffix(snap, "\n"), "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := newMemStore(t)
			err := dst.Restore(context.Background(), strings.NewReader(tc.data))
			if !errors.Is(err, state.ErrBadSnapshot) || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("Restore: %v, want ErrBadSnapshot naming %q", err, tc.mention)
			}
			if vols, _ := dst.Volumes("", ""); len(vols) != 0 {
				t.Errorf("a refused restore left %d volumes", len(vols))
			}
		})
	}
}

type failingReader struct{ after int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.after <= 0 {
		return 0, errors.New("disk on fire")
	}
	n := min(len(p), r.after)
	for i := range n {
		p[i] = ' '
	}
	r.after -= n
	return n, nil
}

func TestMemStore_Restore_ReaderError(t *testing.T) {
	s, _ := smallCluster(t)
	before := snapshotBytes(t, s)
	err := s.Restore(context.Background(), &failingReader{after: 10})
	if err == nil || errors.Is(err, state.ErrBadSnapshot) || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("Restore from a failing reader: %v, want the reader's error, not ErrBadSnapshot", err)
	}
	if !bytes.Equal(snapshotBytes(t, s), before) {
		t.Errorf("failed restore changed the store")
	}
}

func TestMemStore_Snapshot_ContextDone(t *testing.T) {
	s, _ := smallCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Snapshot(ctx, io.Discard); !errors.Is(err, context.Canceled) {
		t.Errorf("Snapshot with a canceled ctx: %v", err)
	}
	snap := snapshotBytes(t, s)
	dst := newMemStore(t)
	if err := dst.Restore(ctx, bytes.NewReader(snap)); !errors.Is(err, context.Canceled) {
		t.Errorf("Restore with a canceled ctx: %v", err)
	}
	if vols, _ := dst.Volumes("", ""); len(vols) != 0 {
		t.Errorf("canceled restore left %d volumes", len(vols))
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("pipe closed") }

func TestMemStore_Snapshot_WriterError(t *testing.T) {
	s, _ := smallCluster(t)
	if err := s.Snapshot(context.Background(), failingWriter{}); err == nil || !strings.Contains(err.Error(), "pipe closed") {
		t.Errorf("Snapshot to a failing writer: %v", err)
	}
}

// TestMemStore_Snapshot_Format pins the header and trailer so that a
// change of format is a deliberate version bump.
func TestMemStore_Snapshot_Format(t *testing.T) {
	s := newMemStore(t)
	lines := strings.Split(strings.TrimSuffix(string(snapshotBytes(t, s)), "\n"), "\n")
	if lines[0] != `{"format":"csikit-state","version":2}` {
		t.Errorf("header = %s", lines[0])
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, `{"end":true,"rows":4,"crc32":`) {
		t.Errorf("trailer = %s, want 4 rows (the table indexes)", last)
	}
}

// resealed rebuilds a snapshot's trailer for body lines (the header
// included), so that a test can change the rows and still pass the
// checksum: what Restore then refuses, it refuses for the content.
func resealed(lines []string) string {
	body := strings.Join(lines, "\n") + "\n"
	return body + fmt.Sprintf(`{"end":true,"rows":%d,"crc32":%d}`, len(lines)-1, crc32.ChecksumIEEE([]byte(body))) + "\n"
}

// TestMemStore_Restore_RefusedRows restores snapshots whose checksum is
// right but whose rows the store cannot hold: each is refused with
// ErrBadSnapshot, without a panic, and the store is left as it was.
func TestMemStore_Restore_RefusedRows(t *testing.T) {
	src, _ := smallCluster(t)
	lines := strings.Split(strings.TrimSuffix(string(snapshotBytes(t, src)), "\n"), "\n")
	lines = lines[:len(lines)-1] // the trailer
	if got := resealed(lines); got != string(snapshotBytes(t, src)) {
		t.Fatalf("resealed does not rebuild the snapshot it was given:\n%s", got)
	}
	edit := func(table, old, new string) []string {
		out := slices.Clone(lines)
		for i, l := range out {
			if strings.HasPrefix(l, `{"table":"`+table+`"`) && strings.Contains(l, old) {
				out[i] = strings.Replace(l, old, new, 1)
				return out
			}
		}
		t.Fatalf("no %s row holds %s", table, old)
		return nil
	}
	for _, tc := range []struct {
		name    string
		lines   []string
		mention string
	}{
		{"NullClaim", edit("volumes", `"WriteClaims":{"web-1":{`, `"WriteClaims":{"web-1":null,"x":{`), "null claim"},
		{"NullPluginInstance", edit("nodes", `"Plugins":[`, `"Plugins":[null,`), "null plugin instance"},
		{"IndexOfUnknownTable", edit("index", `"Table":"nodes"`, `"Table":"secrets"`), `unknown table "secrets"`},
		{"NullAttachment", edit("volumes", `"Attachments":{"n1":{`, `"Attachments":{"n0":null,"n1":{`), `bad attachment to node "n0"`},
		{"AttachmentOfOtherNode", edit("volumes", `"Attachments":{"n1":{"NodeID":"n1"`, `"Attachments":{"n1":{"NodeID":"n2"`), `bad attachment to node "n1"`},
		{"UnknownAttachmentState", edit("volumes", `"State":"attached"`, `"State":"glued"`), "glued"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst, _ := smallCluster(t)
			before := snapshotBytes(t, dst)
			err := dst.Restore(context.Background(), strings.NewReader(resealed(tc.lines)))
			if !errors.Is(err, state.ErrBadSnapshot) || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("Restore: %v, want ErrBadSnapshot naming %q", err, tc.mention)
			}
			if !bytes.Equal(snapshotBytes(t, dst), before) {
				t.Errorf("a refused restore changed the store")
			}
		})
	}
}

// TestMemStore_Restore_Version1 restores a version 1 snapshot
// (testdata/snapshot-v1.jsonl, written by hand; csikit's last version 1
// store restores it and snapshots it back byte for byte), in which each
// claim kept its publish context and no attachment was a record. The
// attachments are derived as upgradeVolumeV1 says: one per node with a
// claim not yet ControllerDetached; Attached, with the first non-empty
// publish context there (live claims first, then by allocation ID),
// or else Attaching; at the volume's ModifyIndex.
func TestMemStore_Restore_Version1(t *testing.T) {
	v1, err := os.ReadFile("testdata/snapshot-v1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	s := newMemStore(t)
	if err := s.Restore(context.Background(), bytes.NewReader(v1)); err != nil {
		t.Fatalf("Restore of a version 1 snapshot: %v", err)
	}
	vol := func(id string) *csi.Volume {
		t.Helper()
		v, err := s.Volume("default", id)
		if err != nil {
			t.Fatalf("Volume(%s): %v", id, err)
		}
		return v
	}
	att := func(node, ext string, st csi.AttachmentState, pc map[string]string) *csi.Attachment {
		return &csi.Attachment{NodeID: node, ExternalNodeID: ext, State: st, PublishContext: pc, CreateIndex: 12, ModifyIndex: 12}
	}
	want := map[string]*csi.Attachment{
		// web-1 (live) before old-1 (past), though old-1 sorts first.
		"n1": att("n1", "csi-n1", csi.AttachmentAttached, map[string]string{"lun": "3"}),
		// web-2 (node-detached) before web-5 (unpublishing), by ID.
		"n2": att("n2", "csi-n2", csi.AttachmentAttached, map[string]string{"lun": "5"}),
		// A live claim that had no publish context yet.
		"n3": att("n3", "csi-n3", csi.AttachmentAttaching, nil),
		// n4: web-4 controller-detached, web-6 ready-to-free: detached.
	}
	multi := vol("multi")
	if got := snapJSON(t, multi.Attachments); got != snapJSON(t, want) {
		t.Errorf("derived attachments of default/multi:\n%s\nwant:\n%s", got, snapJSON(t, want))
	}
	if idle := vol("idle"); idle.Attachments != nil || len(idle.PastClaims) != 1 {
		t.Errorf("default/idle (a ready-to-free claim only) = %s, want its claim and no attachment", snapJSON(t, idle))
	}
	// The claims themselves are as they were, without the context.
	wantClaim := &csi.Claim{AllocationID: "web-2", NodeID: "n2", ExternalNodeID: "csi-n2", Mode: csi.ClaimWrite,
		AccessMode: csi.AccessModeMultiNodeMultiWriter, AttachmentMode: csi.AttachmentModeFileSystem,
		State: csi.ClaimNodeDetached, ReleasedAt: time.Date(2026, 1, 1, 0, 0, 6, 0, time.UTC)}
	if got := multi.PastClaims["web-2"]; snapJSON(t, got) != snapJSON(t, wantClaim) {
		t.Errorf("claim of web-2 = %s, want %s", snapJSON(t, got), snapJSON(t, wantClaim))
	}
	if n := len(multi.ReadClaims) + len(multi.WriteClaims) + len(multi.PastClaims); n != 7 {
		t.Errorf("default/multi holds %d claims, want the snapshot's 7", n)
	}
	if got := s.LastIndex(); got != 12 {
		t.Errorf("LastIndex = %d, want 12", got)
	}

	// Snapshotted again, it is version 2 and restores as it is.
	v2 := snapshotBytes(t, s)
	if !bytes.HasPrefix(v2, []byte(`{"format":"csikit-state","version":2}`+"\n")) {
		t.Errorf("snapshot of the restored store starts %q", v2[:min(len(v2), 40)])
	}
	again := newMemStore(t)
	if err := again.Restore(context.Background(), bytes.NewReader(v2)); err != nil {
		t.Fatalf("Restore of the version 2 snapshot: %v", err)
	}
	if got := snapshotBytes(t, again); !bytes.Equal(got, v2) {
		t.Errorf("version 2 round trip differs:\n%s\nwant:\n%s", got, v2)
	}

	// The release goes on under the new contract.
	idx := s.LastIndex()
	apply := func(cmd state.Command) error {
		t.Helper()
		idx++
		_, err := s.Apply(idx, cmd)
		return err
	}
	free := func(alloc string) state.FreeClaim {
		return state.FreeClaim{Namespace: "default", VolumeID: "multi", AllocationID: alloc}
	}
	for _, a := range []string{"web-4", "web-6", "web-5"} { // detached, or not the last on n2
		if err := apply(free(a)); err != nil {
			t.Errorf("free %s: %v", a, err)
		}
	}
	if err := apply(free("web-2")); !errors.Is(err, csi.ErrVolumeInUse) {
		t.Errorf("free of the last claim on n2, attached: %v, want ErrVolumeInUse", err)
	}
	if err := apply(state.DetachVolume{Namespace: "default", VolumeID: "multi", NodeID: "n1"}); !errors.Is(err, csi.ErrVolumeInUse) ||
		!strings.Contains(err.Error(), "old-1, web-1") {
		t.Errorf("detach from n1 with web-1 live and old-1 unpublishing: %v, want ErrVolumeInUse naming both", err)
	}
	if err := apply(state.DetachVolume{Namespace: "default", VolumeID: "multi", NodeID: "n2"}); err != nil {
		t.Errorf("detach from n2: %v", err)
	}
	if err := apply(state.Batch{Commands: []state.Command{
		state.RemoveAttachment{Namespace: "default", VolumeID: "multi", NodeID: "n2"}, free("web-2"),
	}}); err != nil {
		t.Errorf("remove the attachment to n2 and free web-2: %v", err)
	}
	if got := vol("multi"); got.Attachments["n2"] != nil || got.PastClaims["web-2"] != nil || len(got.Attachments) != 2 {
		t.Errorf("after the release on n2: %s", snapJSON(t, got.Attachments))
	}
}

// TestMemStore_Restore_Version1Refused: a version 1 row that holds what
// version 1 never wrote is refused.
func TestMemStore_Restore_Version1Refused(t *testing.T) {
	v1, err := os.ReadFile("testdata/snapshot-v1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(v1), "\n"), "\n")
	lines = lines[:len(lines)-1] // the trailer
	if got := resealed(lines); got != string(v1) {
		t.Fatalf("resealed does not rebuild the fixture:\n%s", got)
	}
	edit := func(old, new string) []string {
		out := slices.Clone(lines)
		for i, l := range out {
			if strings.Contains(l, old) {
				out[i] = strings.Replace(l, old, new, 1)
				return out
			}
		}
		t.Fatalf("no line holds %s", old)
		return nil
	}
	for _, tc := range []struct {
		name    string
		lines   []string
		mention string
	}{
		{"Attachments", edit(`"CreateIndex":4,`, `"Attachments":{"n1":{"NodeID":"n1","ExternalNodeID":"csi-n1","State":"attached","CreateIndex":4,"ModifyIndex":4}},"CreateIndex":4,`), "version 1 volume has no attachments"},
		{"NullClaim", edit(`"PastClaims":{"web-7":{`, `"PastClaims":{"web-0":null,"web-7":{`), "null claim"},
		{"UnknownClaimField", edit(`"PublishContext":{"lun":"1"}`, `"PublishContext":{"lun":"1"},"Glue":true`), "Glue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newMemStore(t)
			err := s.Restore(context.Background(), strings.NewReader(resealed(tc.lines)))
			if !errors.Is(err, state.ErrBadSnapshot) || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("Restore: %v, want ErrBadSnapshot naming %q", err, tc.mention)
			}
			if vols, _ := s.Volumes("", ""); len(vols) != 0 {
				t.Errorf("a refused restore left %d volumes", len(vols))
			}
		})
	}
}

func snapJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
