package state_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// TestMemStore_PastClaimsIndex follows PastClaimsIndex through the
// commands of a lifecycle: it moves with each write to a volume that
// holds past claims before or after the write, and with nothing else.
func TestMemStore_PastClaimsIndex(t *testing.T) {
	s := newMemStore(t)
	cmds := lifecycleCommands()
	moves := map[state.Kind][]bool{
		// By kind, in the order they come in lifecycleCommands.
		"upsert-node-plugins": {false},
		"upsert-allocations":  {false, true}, // workloads placed, then stopped: claims become past claims
		"register-volume":     {false},
		"claim-volume":        {false, false},
		"set-publish-context": {false, false},
		"checkpoint-claim":    {true, true},
		"detach-volume":       {true},  // the volume holds past claims
		"batch":               {true},  // the attachment's removal and the frees of the last past claims
		"deregister-volume":   {false}, // no past claim left
	}
	seen := map[state.Kind]int{}
	for i, cmd := range cmds {
		idx := uint64(i + 1)
		before := pastIndex(t, s)
		if _, err := s.Apply(idx, cmd); err != nil {
			t.Fatalf("apply %s: %v", cmd.Kind(), err)
		}
		want := moves[cmd.Kind()][seen[cmd.Kind()]]
		seen[cmd.Kind()]++
		got := pastIndex(t, s)
		switch {
		case want && got != idx:
			t.Errorf("after %s (index %d): PastClaimsIndex %d, want %d", cmd.Kind(), idx, got, idx)
		case !want && got != before:
			t.Errorf("after %s (index %d): PastClaimsIndex moved from %d to %d", cmd.Kind(), idx, before, got)
		}
		if vi, _ := s.Index(state.TableVolumes); got > vi {
			t.Errorf("after %s: PastClaimsIndex %d above the volume table's %d", cmd.Kind(), got, vi)
		}
	}
}

// TestMemStore_PastClaimsIndex_OtherChanges: a change to a volume that
// holds a past claim moves the index even when the change is about a
// live claim (the release worker waits for such changes), and so does
// a forced deregistration of such a volume.
func TestMemStore_PastClaimsIndex_OtherChanges(t *testing.T) {
	cmds := lifecycleCommands()
	const ns, vol = "plugintest", "vol-34236e4a732a"
	setup := func(t *testing.T) (*state.MemStore, uint64) {
		s := newMemStore(t)
		// Up to the two claims, then stop only alloc-1.
		idx := uint64(0)
		for _, cmd := range cmds[:7] {
			idx++
			if _, err := s.Apply(idx, cmd); err != nil {
				t.Fatal(err)
			}
		}
		idx++
		stop := state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "alloc-1", Namespace: ns, NodeID: "plugintest-node", JobID: "plugintest", Terminal: true}}, ReleasedAt: time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)}
		if _, err := s.Apply(idx, stop); err != nil {
			t.Fatal(err)
		}
		if got := pastIndex(t, s); got != idx {
			t.Fatalf("PastClaimsIndex %d after the release, want %d", got, idx)
		}
		return s, idx + 1
	}
	for _, tc := range []struct {
		name string
		cmd  state.Command
	}{
		{"live claim's publish context", state.SetPublishContext{Namespace: ns, VolumeID: vol, AllocationID: "alloc-2", PublishContext: map[string]string{"k": "v"}}},
		{"forced deregistration", state.DeregisterVolume{Namespace: ns, VolumeID: vol, Force: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, idx := setup(t)
			if _, err := s.Apply(idx, tc.cmd); err != nil {
				t.Fatal(err)
			}
			if got := pastIndex(t, s); got != idx {
				t.Errorf("PastClaimsIndex %d, want %d", got, idx)
			}
		})
	}
}

// TestMemStore_WaitPastClaims: a wait returns for a write that moves
// PastClaimsIndex and for a restore, not for other writes, and with
// ctx's error when ctx ends.
func TestMemStore_WaitPastClaims(t *testing.T) {
	cmds := lifecycleCommands()
	s := newMemStore(t)
	for i, cmd := range cmds[:7] { // up to the claims: nothing past
		if _, err := s.Apply(uint64(i+1), cmd); err != nil {
			t.Fatal(err)
		}
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if idx, err := s.WaitPastClaims(ended, 0); !errors.Is(err, context.Canceled) || idx != 0 {
		t.Fatalf("WaitPastClaims after writes without past claims = %d, %v; want 0 and ctx's error", idx, err)
	}

	// A waiter blocked before the release wakes up with it.
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	type result struct {
		idx uint64
		err error
	}
	woke := make(chan result, 1)
	go func() {
		idx, err := s.WaitPastClaims(ctx, 0)
		woke <- result{idx, err}
	}()
	if _, err := s.Apply(8, cmds[7]); err != nil { // the allocations stop
		t.Fatal(err)
	}
	if r := <-woke; r.err != nil || r.idx != 8 {
		t.Fatalf("WaitPastClaims = %d, %v; want 8", r.idx, r.err)
	}
	if idx, err := s.WaitPastClaims(ended, 7); err != nil || idx != 8 {
		t.Fatalf("WaitPastClaims(7) = %d, %v; want 8 at once", idx, err)
	}

	// A restore wakes a waiter, with the restored index.
	var snap bytes.Buffer
	if err := s.Snapshot(ctx, &snap); err != nil {
		t.Fatal(err)
	}
	go func() {
		idx, err := s.WaitPastClaims(ctx, 8)
		woke <- result{idx, err}
	}()
	// The waiter may start before or after any one restore; restoring
	// until it returns needs no timing assumption.
	for {
		if err := s.Restore(ctx, bytes.NewReader(snap.Bytes())); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-woke:
			if r.err != nil || r.idx != 8 {
				t.Fatalf("WaitPastClaims across a restore = %d, %v; want 8 (the restored volume table's index)", r.idx, r.err)
			}
			return
		default:
			runtime.Gosched()
		}
	}
}

func pastIndex(t *testing.T, s *state.MemStore) uint64 {
	t.Helper()
	idx, err := s.PastClaimsIndex()
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// TestMemStore_Restore_TableIndexes restores a version 1 snapshot
// written by hand, as an older csikit wrote them (the table index rows
// first, by table name): every table's Index, PastClaimsIndex and the
// next write's index come from those rows, and a snapshot of the
// restored store writes the same rows, in the current version.
func TestMemStore_Restore_TableIndexes(t *testing.T) {
	body := `{"format":"csikit-state","version":1}
{"table":"index","row":{"Table":"allocations","Index":7}}
{"table":"index","row":{"Table":"nodes","Index":3}}
{"table":"index","row":{"Table":"plugins","Index":4}}
{"table":"index","row":{"Table":"volumes","Index":9}}
`
	snap := body + fmt.Sprintf(`{"end":true,"rows":4,"crc32":%d}`+"\n", crc32.ChecksumIEEE([]byte(body)))
	s := newMemStore(t)
	if err := s.Restore(context.Background(), strings.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	for table, want := range map[state.Table]uint64{
		state.TableAllocations: 7, state.TableNodes: 3, state.TablePlugins: 4, state.TableVolumes: 9,
	} {
		if got, err := s.Index(table); err != nil || got != want {
			t.Errorf("Index(%s) = %d, %v; want %d", table, got, err, want)
		}
	}
	if got := pastIndex(t, s); got != 9 {
		t.Errorf("PastClaimsIndex = %d, want 9 (the volume table's)", got)
	}
	if got := s.LastIndex(); got != 9 {
		t.Errorf("LastIndex = %d, want 9", got)
	}
	var out bytes.Buffer
	if err := s.Snapshot(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	body2 := strings.Replace(body, `"version":1`, `"version":2`, 1)
	want := body2 + fmt.Sprintf(`{"end":true,"rows":4,"crc32":%d}`+"\n", crc32.ChecksumIEEE([]byte(body2)))
	if out.String() != want {
		t.Errorf("snapshot of the restored store:\n%s\nwant:\n%s", out.String(), want)
	}
}
