package state_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"hash/crc32"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/csikit/csikit/state"
)

// TestMemStore_Restore_Health: snapshots written before health records
// existed (version 1, and version 2 without health rows) restore with
// none; records written since round-trip; a row the store would not
// write is refused.
func TestMemStore_Restore_Health(t *testing.T) {
	ctx := context.Background()
	v1, err := os.ReadFile("testdata/snapshot-v1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	old := newMemStore(t)
	if err := old.Restore(ctx, bytes.NewReader(v1)); err != nil {
		t.Fatalf("Restore v1: %v", err)
	}
	if hs, err := old.Healths(); err != nil || len(hs) != 0 {
		t.Errorf("v1: Healths = %v, %v; want none", hs, err)
	}

	r := newRegistry(t)
	v2 := snapshotBytes(t, r.s)
	if bytes.Contains(v2, []byte(`"table":"health"`)) {
		t.Fatalf("a store without health records wrote a health row:\n%s", v2)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.must(state.SetVolumeHealth{Reports: []state.HealthReport{{Namespace: "default", VolumeID: "backing-db",
		Condition: &state.Condition{Abnormal: true, Message: "lost"}, At: at}}})
	snap := snapshotBytes(t, r.s)
	s := newMemStore(t)
	if err := s.Restore(ctx, bytes.NewReader(snap)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	h, err := s.Health("default", "backing-db")
	if err != nil || h == nil || !h.Abnormal() || !h.SeenAt.Equal(at) {
		t.Fatalf("restored health = %+v, %v", h, err)
	}

	// A row the store would not write, in a snapshot whose checksum is
	// right, is refused by the row check.
	bad := resum(t, strings.Replace(string(snap), `"VolumeID":"backing-db"`, `"VolumeID":"../x"`, 1))
	err = newMemStore(t).Restore(ctx, strings.NewReader(bad))
	if !errors.Is(err, state.ErrBadSnapshot) || !strings.Contains(err.Error(), "health") {
		t.Errorf("a health row with a bad volume ID restored: %v", err)
	}
}

// resum rewrites a snapshot's trailer for its edited body.
func resum(t *testing.T, snap string) string {
	t.Helper()
	body := snap[:strings.LastIndex(strings.TrimSuffix(snap, "\n"), "\n")+1]
	var tr map[string]any
	if err := json.Unmarshal([]byte(snap[len(body):]), &tr); err != nil {
		t.Fatal(err)
	}
	tr["crc32"] = crc32.ChecksumIEEE([]byte(body))
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	return body + string(b) + "\n"
}
