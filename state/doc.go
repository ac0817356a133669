// Package state is the server's source of truth for CSI volumes, plugins,
// nodes, allocations and claims.
//
// Store is the contract: small reader interfaces (VolumeReader,
// PluginReader, NodeReader, AllocationReader, Watcher) for the parts that
// only read, and Apply, which takes a Command. MemStore implements it in
// memory on hashicorp/go-memdb; package statetest checks any
// implementation against the whole contract, so a host that keeps CSI
// state in its own database can bring its own Store.
//
// # Commands
//
// Every write is a Command value (RegisterVolume, ClaimVolume,
// UpsertNodePlugins, UpsertAllocations, CheckpointClaim, …) applied at a
// log index. Commands are deterministic, carry their timestamps, and
// encode to a JSON envelope {"kind": ..., "body": ...} with
// EncodeCommand and DecodeCommand, so a replicated host (Raft) can put
// them in its log and apply the same command at the same index on every
// replica. A command is applied whole or not at all: a refused command
// returns an error matching a csi sentinel (errors.Is) and leaves the
// store, table indexes included, as it was. Batch groups commands into
// one atomic write at one index.
//
// The claim rules are checked and the claim written in one transaction
// (ClaimVolume), before any plugin call. An allocation that becomes
// terminal (UpsertAllocations) turns its claims into past claims in the
// same transaction, so "every claim of a terminal allocation is a past
// claim" always holds; the claim release worker then walks each past
// claim forward (CheckpointClaim) and frees it (FreeClaim).
//
// # Reads
//
// Reads return copies that the caller owns; stored objects are never
// changed in place. A volume read carries its plugin's provider, whether
// it needs a controller, whether it is schedulable, and its health
// counts. A plugin read carries its controller and node instances by
// node, and the running allocations that run it. Blocking queries use
// Watcher: read Index, read the data, then Wait for the index to move.
// A store may also offer PastClaimWatcher (MemStore does): an index
// that moves only with writes to volumes holding past claims, which the
// claim release worker waits on so that claims and publishes do not
// wake it.
//
// MemStore keeps the table indexes beside the database, not in a memdb
// table, and writes to a memdb that notifies no memdb watch (nothing in
// the store waits on one): a write costs the rows it changes and little
// more. Every command writes straight into its memdb transaction (a
// Batch's commands share one), which reads its own writes, so each
// command of a batch sees what the earlier ones wrote. Volumes and
// allocations have one memdb index each, by ID; the other lookups (by
// plugin, node, allocation, past claims) are rows of tables of their
// own, written only when a key appears or goes, so a write that moves
// no key (a checkpoint, an attachment's state) writes the row alone,
// however many claims its volume has. A lookup by plugin, node or
// allocation reads each row it yields by ID. refs.go gives the figures
// that chose this over memdb's own indexes.
//
// # Usage
//
// The host's duties, in order:
//
//  1. Build the store with NewMemStore (or bring a Store of its own
//     that passes statetest.Run), and an Applier: NewLocalApplier for a
//     single process; for a replicated host, an Applier that appends
//     EncodeCommand's bytes to the log and whose state machine calls
//     store.Apply(entryIndex, DecodeCommand(entry)) on every replica.
//     On a Raft snapshot, call Snapshot; on install, Restore.
//  2. Report each node's plugin fingerprints as UpsertNodePlugins (the
//     full set for that node each time), and DeleteNode when a node
//     leaves for good.
//  3. Report allocations as UpsertAllocations: each new allocation, and
//     each allocation that becomes terminal, with ReleasedAt set. Plugin
//     allocations list the plugins they run. A terminal allocation whose
//     volumes the node has already unmounted can carry that in the same
//     write: a Batch of the upsert and a CheckpointClaim to
//     csi.ClaimNodeDetached for each of its claims, so the claim release
//     worker skips the node step.
//  4. Register volumes with RegisterVolume; remove them with
//     DeregisterVolume once they have no claims.
//  5. Before an allocation uses a volume, apply ClaimVolume; continue
//     with the plugin calls only if it succeeded. The claim writes, in
//     the same transaction, the volume's attachment to the claim's node
//     (csi.Attachment), or joins the one there; Result.Attachment says
//     whether it is Attached already. For one still Attaching, the
//     claim flow calls ControllerPublishVolume (if the plugin needs it)
//     and records the result with AttachVolume, or applies RemoveClaim
//     when ControllerPublish failed for good. Attachments, not publish
//     contexts, say what is attached: a context may be empty.
//  6. Run the claim release worker (package claimgc) on the Reader: it
//     waits for the volumes with past claims (PastClaimVolumeIDs) to
//     change and applies CheckpointClaim, RecordClaimError,
//     DetachVolume (before ControllerUnpublishVolume), RemoveAttachment
//     and FreeClaim through the Applier.
//  7. Run the capacity refresher (package capacity) on the leader: it
//     applies SetCapacity with what each controller's GetCapacity
//     reported, and the Capacity read serves it to placement.
//  8. Serve reads (volume and plugin status) from the Reader; use Wait
//     for blocking queries instead of polling.
//
// # Upgrading across attachment records
//
// Snapshots of every earlier version restore (version 1 derives the
// attachments from its claims), but log entries written before
// attachments were records do not all replay the same: an old release
// freed the last claim on a node without removing its attachment, which
// FreeClaim now refuses. Before upgrading a replicated host, take a
// snapshot on every server so that no older entry is left to replay,
// and upgrade all servers together; a rolling upgrade across this
// change is not supported.
package state
