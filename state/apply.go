// apply.go owns the write path every command shares: Apply runs one
// command, or one Batch, in one go-memdb write transaction, commits it
// only if the whole command succeeded, and then moves the marks that
// Wait and WaitPastClaims watch. The commands themselves live in a file
// per concept: apply_volumes.go, apply_claims.go, apply_releases.go,
// apply_attachments.go, apply_nodes.go, apply_plugins.go and
// apply_allocations.go.
//
// Rules for changing a command:
//
//   - Write through the writer (w.insert, w.delete, w.putVolume), never
//     with txn.Insert: the writer records the tables a command changed,
//     and keeps the lookup tables of refs.go in step. A command that
//     changes no table commits nothing and reports Changed false.
//   - Writes go straight into the transaction, which reads its own
//     writes: a later read in the same command or batch, by ID or
//     through any lookup, sees them. There is nothing to flush.
//   - A row read in the transaction is shared with every reader of an
//     older state: copy it before changing it (editable for a volume,
//     Copy for the rest), then write the copy. Replace, never modify.
//   - A refused command may return its error at any point, after
//     writes too: the transaction is aborted and nothing is kept.
//   - Plugin rows are the one thing a command does not write at once:
//     it records what it changed about instances and allocations
//     (w.plugin), and run writes the plugin rows after the command
//     (finishPlugins in apply_plugins.go).
//   - Commands are deterministic: no clock, no map order, no random.
//     Iterate maps in sorted order wherever the order can reach an
//     error, a row or a count.

package state

import (
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/hashicorp/go-memdb"
)

// Apply implements Store. It runs cmd in one memdb write transaction and
// commits only if the whole command succeeded.
func (s *MemStore) Apply(index uint64, cmd Command) (Result, error) {
	if isNil(cmd) {
		return Result{}, fmt.Errorf("%w: apply a nil command", csi.ErrInvalidRequest)
	}
	if index == 0 {
		return Result{}, fmt.Errorf("%w: apply %s at index 0; log indexes start at 1", csi.ErrInvalidRequest, cmd.Kind())
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if index < s.last {
		return Result{}, fmt.Errorf("%w: apply %s at index %d, below the store's last write at %d; apply commands in log order",
			csi.ErrInvalidRequest, cmd.Kind(), index, s.last)
	}
	gen := s.gen.Load()
	txn := gen.db.Txn(true)
	defer txn.Abort() // no-op after Commit
	w := &writer{txn: txn, index: index}
	if err := w.run(cmd); err != nil {
		return Result{}, err
	}
	res := Result{Index: index, Claim: w.claim, Attachment: w.attachment}
	if w.touched == ([numTables]bool{}) {
		// A valid command with nothing to change (a repeated claim):
		// no index moves, so no blocking query wakes for it.
		return res, nil
	}
	txn.Commit()
	s.last = index
	// After the commit: a reader that sees a new mark sees the write.
	for slot, moved := range w.touched {
		if moved {
			gen.move(slot, index)
		}
	}
	if w.past {
		gen.move(pastSlot, index)
	}
	res.Changed = true
	return res, nil
}

// writer is one command's write transaction.
type writer struct {
	txn   *memdb.Txn
	index uint64 // the command's log index: every row written gets it as ModifyIndex
	// touched says which public tables the command changed, by
	// tableSlot; Apply moves their marks after the commit.
	touched [numTables]bool
	// plugins collects, per plugin ID, what the command changed about
	// its instances and allocations; finishPlugins writes the plugin rows.
	plugins map[string]*pluginChange
	// claim and attachment are ClaimVolume's Result fields: copies the
	// caller owns. A Batch clears them.
	claim      *csi.Claim
	attachment *csi.Attachment
	// past: the command wrote or removed a volume that holds past
	// claims before or after it (PastClaimsIndex moves).
	past bool
}

// run applies one command and then writes the plugin rows it changed,
// so that the next command of a batch, and the commit, see the plugins
// as this command left them.
func (w *writer) run(cmd Command) error {
	if err := cmd.apply(w); err != nil {
		return err
	}
	return w.finishPlugins()
}

// insert writes obj, a row the writer owns, into table, replacing the
// row with its ID, and marks the table changed.
func (w *writer) insert(table string, obj any) error {
	if err := put(w.txn, table, obj); err != nil {
		return dbErr("write "+table, err)
	}
	w.touched[tableSlot(tableOf(table))] = true
	return nil
}

// delete removes obj, the row as this write left it so far, from
// table, and marks the table changed.
func (w *writer) delete(table string, obj any) error {
	if err := remove(w.txn, table, obj); err != nil {
		return dbErr("delete from "+table, err)
	}
	w.touched[tableSlot(tableOf(table))] = true
	return nil
}

// Batch applies its commands in order in the one transaction: each sees
// what the earlier ones wrote, and the first refusal aborts them all.
// Result.Claim and Result.Attachment are ClaimVolume's only: a batch
// reports neither, even if it holds one claim.
func (b Batch) apply(w *writer) error {
	for i, c := range b.Commands {
		if isNil(c) {
			return fmt.Errorf("%w: batch command %d is nil", csi.ErrInvalidRequest, i)
		}
		if isBatch(c) {
			return fmt.Errorf("batch command %d: %w", i, errNestedBatch)
		}
		if err := w.run(c); err != nil {
			return fmt.Errorf("batch command %d (%s): %w", i, c.Kind(), err)
		}
	}
	w.claim, w.attachment = nil, nil
	return nil
}

// volName names a volume in errors. It allocates: call it on the way to
// an error, not on the path of a command that succeeds.
func volName(ns, id string) string { return ns + "/" + id }

// nilIfEmpty and nilIfEmptySlice store empty collections as nil, so
// that a row reads the same before and after a JSON round trip
// (snapshots, replicated logs).
func nilIfEmpty[M ~map[K]V, K comparable, V any](m M) M {
	if len(m) == 0 {
		return nil
	}
	return m
}

func nilIfEmptySlice[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}
