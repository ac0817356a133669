package raftstate_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/raftstate"
)

func newFSM(t *testing.T) (*raftstate.FSM, *state.MemStore) {
	t.Helper()
	store, err := state.NewMemStore(state.Config{})
	must(t, err)
	f, err := raftstate.NewFSM(store, nil)
	must(t, err)
	return f, store
}

func commandLog(t *testing.T, index uint64, cmd state.Command) *raft.Log {
	t.Helper()
	b, err := state.EncodeCommand(cmd)
	must(t, err)
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: b}
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	closed, canceled bool
}

func (s *memSink) ID() string    { return "test" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.canceled = true; return nil }

func TestFSM_Apply_Entries(t *testing.T) {
	f, store := newFSM(t)
	resp := f.Apply(commandLog(t, 3, allocsCmd("web-1")))
	r, ok := resp.(*raftstate.Response)
	if !ok || r.Err != nil || r.Result.Index != 3 || !r.Result.Changed {
		t.Fatalf("Apply answered %#v", resp)
	}
	expectEqual(t, f.AppliedIndex(), uint64(3))
	a, err := store.Allocation("web-1")
	must(t, err)
	expectEqual(t, a.ModifyIndex, uint64(3))

	t.Run("refused command", func(t *testing.T) {
		r := f.Apply(commandLog(t, 4, claimCmd("nope", "web-1"))).(*raftstate.Response)
		expectIs(t, r.Err, csi.ErrVolumeNotFound)
		expectEqual(t, f.AppliedIndex(), uint64(4))
		expectEqual(t, indexes(t, store)[state.TableVolumes], uint64(0))
	})
	t.Run("other entry types", func(t *testing.T) {
		if got := f.Apply(&raft.Log{Index: 5, Type: raft.LogConfiguration}); got != nil {
			t.Errorf("a configuration entry answered %#v", got)
		}
	})
	t.Run("entry that is no command diverges the replica", func(t *testing.T) {
		before := snapshotOf(t, store)
		if f.Err() != nil {
			t.Fatalf("the FSM diverged before: %v", f.Err())
		}
		// Waits blocked when the FSM diverges end with its error, not
		// with their ctx: the store will not change again.
		vols, err := store.Index(state.TableVolumes)
		must(t, err)
		past, err := f.Reader().PastClaimsIndex()
		must(t, err)
		waits, started := make(chan error, 2), make(chan struct{}, 2)
		for _, wait := range []func() error{
			func() error { _, err := f.Reader().Wait(context.Background(), state.TableVolumes, vols); return err },
			func() error { _, err := f.Reader().WaitPastClaims(context.Background(), past); return err },
		} {
			go func() {
				started <- struct{}{}
				waits <- wait()
			}()
		}
		<-started
		<-started
		r := f.Apply(&raft.Log{Index: 6, Type: raft.LogCommand, Data: []byte(`{"kind":"from-the-future","body":{}}`)}).(*raftstate.Response)
		expectIs(t, r.Err, raftstate.ErrStateDiverged)
		expectIs(t, r.Err, csi.ErrInvalidRequest)
		select {
		case <-f.Failed():
		default:
			t.Error("Failed is not closed after the FSM diverged")
		}
		// A good entry after it is refused too: skipping one entry
		// would leave this store unlike the others for good.
		r = f.Apply(commandLog(t, 7, allocsCmd("web-2"))).(*raftstate.Response)
		expectIs(t, r.Err, raftstate.ErrStateDiverged)
		expectEqual(t, f.AppliedIndex(), uint64(4))
		if !bytes.Equal(snapshotOf(t, store), before) {
			t.Error("the store changed after the FSM diverged")
		}
		var d *raftstate.DivergedError
		if !errors.As(f.Err(), &d) || d.Index != 6 {
			t.Errorf("Err is %v, want a *DivergedError at index 6", f.Err())
		}
		if _, err := f.Reader().Allocation("web-1"); !errors.Is(err, raftstate.ErrStateDiverged) {
			t.Errorf("a read after the FSM diverged: %v, want ErrStateDiverged", err)
		}
		if _, err := f.Snapshot(); !errors.Is(err, raftstate.ErrStateDiverged) {
			t.Errorf("a snapshot after the FSM diverged: %v, want ErrStateDiverged", err)
		}
		if err := f.WaitApplied(context.Background(), 7); !errors.Is(err, raftstate.ErrStateDiverged) {
			t.Errorf("WaitApplied after the FSM diverged: %v, want ErrStateDiverged", err)
		}
		for range 2 {
			select {
			case err := <-waits:
				if !errors.Is(err, raftstate.ErrStateDiverged) {
					t.Errorf("a Wait blocked when the FSM diverged: %v, want ErrStateDiverged", err)
				}
			case <-waitCtx(t).Done():
				t.Fatal("a Wait blocked when the FSM diverged still waits")
			}
		}
		if err := f.Restore(io.NopCloser(strings.NewReader("not a snapshot"))); !errors.Is(err, raftstate.ErrStateDiverged) {
			t.Errorf("a restore after the FSM diverged: %v, want ErrStateDiverged before the snapshot is read", err)
		}
		if _, err := f.Reader().PastClaimsIndex(); !errors.Is(err, raftstate.ErrStateDiverged) {
			t.Errorf("PastClaimsIndex after the FSM diverged: %v, want ErrStateDiverged", err)
		}
		if _, err := f.Reader().Wait(context.Background(), state.TableVolumes, 0); !errors.Is(err, raftstate.ErrStateDiverged) {
			t.Errorf("a Wait after the FSM diverged: %v, want ErrStateDiverged", err)
		}
	})
}

// TestFSM_Reader_BeforeDivergence reads through the FSM's Reader: the
// store's answers, unchanged.
func TestFSM_Reader_BeforeDivergence(t *testing.T) {
	f, _ := newFSM(t)
	f.Apply(commandLog(t, 1, allocsCmd("web-1")))
	r := f.Reader()
	a, err := r.Allocation("web-1")
	must(t, err)
	expectEqual(t, a.ID, "web-1")
	idx, err := r.Index(state.TableAllocations)
	must(t, err)
	expectEqual(t, idx, uint64(1))
	if _, err := r.Volume("default", "nope"); !errors.Is(err, csi.ErrVolumeNotFound) {
		t.Errorf("read of a missing volume: %v", err)
	}
}

func TestNewFSM_Refused(t *testing.T) {
	used, err := state.NewMemStore(state.Config{})
	must(t, err)
	apply(t, state.NewLocalApplier(used), allocsCmd("web-1"))
	for name, store := range map[string]state.Store{"nil": nil, "not a snapshotter": storeOnly{used}, "not empty": used} {
		t.Run(name, func(t *testing.T) {
			_, err := raftstate.NewFSM(store, nil)
			expectIs(t, err, csi.ErrInvalidRequest)
		})
	}
}

// TestFSM_Snapshot_RoundTrip checks that a snapshot holds the state as of
// the Snapshot call, even when entries are applied before it is
// persisted, and restores into another FSM whole.
func TestFSM_Snapshot_RoundTrip(t *testing.T) {
	f, store := newFSM(t)
	f.Apply(commandLog(t, 1, fingerprintCmd()))
	f.Apply(commandLog(t, 2, allocsCmd("web-1")))
	f.Apply(commandLog(t, 3, volumeCmd("db")))
	want := snapshotOf(t, store)
	snap, err := f.Snapshot()
	must(t, err)
	f.Apply(commandLog(t, 4, claimCmd("db", "web-1"))) // after the snapshot point
	var sink memSink
	must(t, snap.Persist(&sink))
	snap.Release()
	if !sink.closed || sink.canceled {
		t.Fatalf("sink closed %v, canceled %v", sink.closed, sink.canceled)
	}

	g, restored := newFSM(t)
	must(t, g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))))
	if !bytes.Equal(snapshotOf(t, restored), want) {
		t.Error("the restored store differs from the state at the snapshot")
	}
	expectEqual(t, g.AppliedIndex(), uint64(3))
	must(t, g.WaitApplied(context.Background(), 3))
	// It goes on from there.
	r := g.Apply(commandLog(t, 4, claimCmd("db", "web-1"))).(*raftstate.Response)
	must(t, r.Err)
}

func TestFSM_Restore_BadSnapshot(t *testing.T) {
	f, _ := newFSM(t)
	f.Apply(commandLog(t, 1, allocsCmd("web-1")))
	snap, err := f.Snapshot()
	must(t, err)
	var sink memSink
	must(t, snap.Persist(&sink))
	good := sink.Bytes()
	header, body, _ := bytes.Cut(good, []byte("\n"))

	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"header is not JSON", []byte("csikit\n")},
		{"no newline in the header bound", bytes.Repeat([]byte("x"), 5000)},
		{"unknown version", append([]byte(`{"format":"csikit-raftstate","version":9,"applied":1}`+"\n"), body...)},
		{"other format", append([]byte(`{"format":"other","version":1,"applied":1}`+"\n"), body...)},
		{"store snapshot truncated", append(append(bytes.Clone(header), '\n'), body[:len(body)/2]...)},
		{"store snapshot missing", append(bytes.Clone(header), '\n')},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, target := newFSM(t)
			g.Apply(commandLog(t, 7, volumeCmd("db")))
			before := snapshotOf(t, target)
			err := g.Restore(io.NopCloser(bytes.NewReader(tt.data)))
			expectIs(t, err, state.ErrBadSnapshot)
			if !bytes.Equal(snapshotOf(t, target), before) {
				t.Error("a failed restore changed the store")
			}
			expectEqual(t, g.AppliedIndex(), uint64(7))
		})
	}
}

// failSink fails every write.
type failSink struct{ memSink }

func (s *failSink) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestFSMSnapshot_Persist_WriteFails(t *testing.T) {
	f, _ := newFSM(t)
	snap, err := f.Snapshot()
	must(t, err)
	var sink failSink
	err = snap.Persist(&sink)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Persist: %v", err)
	}
	if !sink.canceled || sink.closed {
		t.Errorf("sink canceled %v, closed %v; want canceled only", sink.canceled, sink.closed)
	}
}

func TestFSM_WaitApplied_CtxEnds(t *testing.T) {
	f, _ := newFSM(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	expectIs(t, f.WaitApplied(ctx, 1), context.Canceled)
	must(t, f.WaitApplied(ctx, 0))
}
