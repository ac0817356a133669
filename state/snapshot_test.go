package state_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
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
		{"Version2", strings.Replace(header, `"version":1`, `"version":2`, 1) + "\n" + rest, "version 2"},
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
	if lines[0] != `{"format":"csikit-state","version":1}` {
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
