package raftstate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/sealed"
)

// FSM is hashicorp/raft's state machine over a csikit state.Store: each
// committed log entry is a command encoded with state.EncodeCommand,
// which FSM decodes and applies to the store at the entry's raft index.
// Server builds one; a host that runs its own raft.Raft may use FSM
// directly.
//
// raft calls Apply, Snapshot and Restore from its FSM goroutine, one at
// a time; FSMSnapshot.Persist runs on another goroutine, concurrently
// with Apply. Reads of the store and AppliedIndex and WaitApplied are
// safe from any goroutine.
type FSM struct {
	store  state.Store
	snap   state.Snapshotter
	logger hclog.Logger
	// keyring opens sealed entries and snapshots and seals snapshots;
	// nil for clear ones (sealed ones are then refused).
	keyring *sealed.Keyring

	mu      sync.Mutex
	applied uint64        // raft index of the last command applied, or of the restored snapshot
	moved   chan struct{} // closed and replaced when applied moves
	// restoreErr is the last Restore's error, which raft logs but does
	// not return from NewRaft.
	restoreErr error

	// diverged is the *DivergedError once an entry could not be
	// applied; failed is closed then. An atomic, so that every guarded
	// read checks it without a lock.
	diverged atomic.Pointer[DivergedError]
	failed   chan struct{}
}

var _ raft.FSM = (*FSM)(nil)

// Response is what FSM.Apply returns for a command entry, and so what
// raft's ApplyFuture.Response holds on the server that appended it:
// the store's Result, or its error as the store returned it (a csi
// sentinel matches with errors.Is, since the value never left the
// process).
type Response struct {
	Result state.Result
	Err    error
}

// NewFSM returns an FSM applying to store, which must also be a
// state.Snapshotter (state.MemStore is) and must be empty: raft rebuilds
// it from the latest snapshot and the log. A nil logger logs nothing.
func NewFSM(store state.Store, logger hclog.Logger) (*FSM, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: raftstate: the store is nil; pass a fresh *state.MemStore", csi.ErrInvalidRequest)
	}
	snap, ok := store.(state.Snapshotter)
	if !ok {
		return nil, fmt.Errorf("%w: raftstate: store %T cannot snapshot (it is not a state.Snapshotter); raft needs snapshots to compact its log, use *state.MemStore",
			csi.ErrInvalidRequest, store)
	}
	for _, t := range state.Tables() {
		idx, err := store.Index(t)
		if err != nil {
			return nil, fmt.Errorf("raftstate: read the store's %s index: %w", t, err)
		}
		if idx != 0 {
			return nil, fmt.Errorf("%w: raftstate: the store already holds writes (table %s at index %d); raft replays the whole state into the store, so give it a new, empty one",
				csi.ErrInvalidRequest, t, idx)
		}
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &FSM{store: store, snap: snap, logger: logger, moved: make(chan struct{}), failed: make(chan struct{})}, nil
}

// Apply implements raft.FSM. It applies a command entry at its raft
// index and returns a *Response; other entry types are not commands and
// return nil. An entry that does not open or decode (sealed with a key
// this keyring lacks, altered, a command of a newer build) cannot be
// skipped without the store going its own way: the FSM diverges
// (ErrStateDiverged). It answers that entry and every later one with
// the *DivergedError, applies nothing more, and its Reader refuses
// every read; the Server shuts raft down.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if err := f.Err(); err != nil {
		return &Response{Err: err}
	}
	data, err := openEntry(f.keyring, l.Data)
	var cmd state.Command
	if err == nil {
		cmd, err = state.DecodeCommand(data)
	}
	if err != nil {
		return &Response{Err: f.diverge(l.Index, err)}
	}
	resp := &Response{}
	resp.Result, resp.Err = f.store.Apply(l.Index, cmd)
	f.setApplied(l.Index)
	return resp
}

// diverge records that the entry at index cannot be applied, once, and
// returns the error every later call answers with.
func (f *FSM) diverge(index uint64, cause error) error {
	d := &DivergedError{Index: index, Err: cause}
	if f.diverged.CompareAndSwap(nil, d) {
		f.logger.Error("log entry cannot be applied; this replica stops applying and serving", "index", index, "error", cause)
		close(f.failed)
	}
	return f.Err()
}

// Err returns the *DivergedError once the FSM diverged
// (ErrStateDiverged), else nil.
func (f *FSM) Err() error {
	if d := f.diverged.Load(); d != nil {
		return d
	}
	return nil
}

// Failed is closed when the FSM diverges; Err then says why.
func (f *FSM) Failed() <-chan struct{} { return f.failed }

func (f *FSM) setApplied(idx uint64) {
	f.mu.Lock()
	f.applied = idx
	close(f.moved)
	f.moved = make(chan struct{})
	f.mu.Unlock()
}

// AppliedIndex returns the raft index of the last command applied to the
// store, or of the snapshot it was last restored from.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

// WaitApplied blocks until AppliedIndex is at least index, and returns
// nil; or returns ctx.Err() when ctx ends first.
func (f *FSM) WaitApplied(ctx context.Context, index uint64) error {
	return f.waitApplied(ctx, index, nil)
}

// waitApplied is WaitApplied that also gives up when
// stop is closed.
func (f *FSM) waitApplied(ctx context.Context, index uint64, stop <-chan struct{}) error {
	for {
		f.mu.Lock()
		applied, moved := f.applied, f.moved
		f.mu.Unlock()
		if applied >= index {
			return nil
		}
		select {
		case <-moved:
		case <-f.failed:
			return f.Err()
		case <-stop:
			return errNotRunning("wait for the store to apply the write")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// The raft snapshot is one header line, then the store's own snapshot
// (state.Snapshotter's format), unchanged in version 1 and sealed whole
// with the FSM's keyring in version 2:
//
//	{"format":"csikit-raftstate","version":1,"applied":N}
//	... the store's snapshot ...
//
// N is AppliedIndex when the snapshot was taken, so that a replica
// restored from it knows which writes its store holds. Restore reads
// both versions.
const (
	snapshotFormat  = "csikit-raftstate"
	snapshotVersion = 1
	sealedVersion   = 2
	// maxHeader bounds the header line read back, so a corrupt snapshot
	// cannot make Restore buffer without end.
	maxHeader = 4096
)

type snapshotHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Applied uint64 `json:"applied"`
}

// Snapshot implements raft.FSM. raft records the snapshot as of the
// entries applied so far, and Apply goes on while Persist writes it, so
// the state is captured here, whole, in memory: the store's snapshot of
// a later state would hold entries that raft replays again after a
// restore. The cost is one copy of the encoded state for the time of
// the snapshot (two with a keyring), and Apply waits while it is
// encoded.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.Err(); err != nil {
		// The store stopped short of the entries raft would record as
		// in the snapshot.
		return nil, err
	}
	var body bytes.Buffer
	if err := f.snap.Snapshot(context.Background(), &body); err != nil {
		return nil, fmt.Errorf("raftstate: snapshot the store: %w", err)
	}
	hdr := snapshotHeader{Format: snapshotFormat, Version: snapshotVersion, Applied: f.AppliedIndex()}
	data := body.Bytes()
	if f.keyring != nil {
		sealedBody, err := f.keyring.Seal(data)
		if err != nil {
			return nil, fmt.Errorf("raftstate: seal the snapshot: %w", err)
		}
		hdr.Version, data = sealedVersion, sealedBody
	}
	h, err := json.Marshal(hdr)
	if err != nil {
		return nil, fmt.Errorf("raftstate: encode snapshot header: %w", err)
	}
	out := make([]byte, 0, len(h)+1+len(data))
	out = append(append(append(out, h...), '\n'), data...)
	return &fsmSnapshot{data: out}, nil
}

// Restore implements raft.FSM: it replaces the store's whole state with
// the snapshot's. A snapshot that is not one FSM wrote, that the
// keyring does not open, or that the store refuses, is an error
// matching state.ErrBadSnapshot, and the store is unchanged.
func (f *FSM) Restore(rc io.ReadCloser) error {
	if err := f.Err(); err != nil {
		rc.Close()
		return err
	}
	err := f.restore(rc)
	f.mu.Lock()
	f.restoreErr = err
	f.mu.Unlock()
	return err
}

func (f *FSM) restore(rc io.ReadCloser) error {
	defer rc.Close()
	br := bufio.NewReader(io.LimitReader(rc, maxHeader))
	line, err := br.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("%w: raftstate: snapshot header: %v", state.ErrBadSnapshot, err)
	}
	var h snapshotHeader
	if err := json.Unmarshal(line, &h); err != nil {
		return fmt.Errorf("%w: raftstate: snapshot header: %v", state.ErrBadSnapshot, err)
	}
	if h.Format != snapshotFormat || (h.Version != snapshotVersion && h.Version != sealedVersion) {
		return fmt.Errorf("%w: raftstate: snapshot is %q version %d; this server reads %q versions %d and %d",
			state.ErrBadSnapshot, h.Format, h.Version, snapshotFormat, snapshotVersion, sealedVersion)
	}
	// What the header read buffered past its line belongs to the store's
	// snapshot, followed by the rest of the stream.
	rest := io.MultiReader(bytes.NewReader(bufferedRest(br)), rc)
	if h.Version == sealedVersion {
		if rest, err = f.openSnapshot(rest); err != nil {
			return err
		}
	}
	if err := f.snap.Restore(context.Background(), rest); err != nil {
		return fmt.Errorf("raftstate: restore the store: %w", err)
	}
	f.setApplied(h.Applied)
	f.logger.Info("restored state from a raft snapshot", "applied_index", h.Applied)
	return nil
}

// openSnapshot reads a sealed snapshot body whole and opens it.
func (f *FSM) openSnapshot(r io.Reader) (io.Reader, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%w: raftstate: read the sealed snapshot: %v", state.ErrBadSnapshot, err)
	}
	if !sealed.IsSealed(b) {
		return nil, fmt.Errorf("%w: raftstate: the snapshot says it is sealed and is not", state.ErrBadSnapshot)
	}
	plain, err := openEntry(f.keyring, b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", state.ErrBadSnapshot, err)
	}
	return bytes.NewReader(plain), nil
}

// restoreError returns the last Restore's error, or nil.
func (f *FSM) restoreError() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restoreErr
}

// bufferedRest returns the bytes br has read ahead and not handed out.
func bufferedRest(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return bytes.Clone(b)
}

type fsmSnapshot struct {
	data []byte
}

// Persist implements raft.FSMSnapshot.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s.data); err != nil {
		sink.Cancel()
		return fmt.Errorf("raftstate: write snapshot: %w", err)
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() {}
