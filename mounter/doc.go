// Package mounter is the node side of a volume's lifecycle: the
// VolumeMounter that stages and publishes CSI volumes for allocations
// through the node plugin, and unpublishes and unstages them again, with
// a usage tracker that survives restarts of the node agent.
//
// # What it does
//
// A Usage is (claim mode, access mode, attachment mode). MountVolume
// calls NodeStageVolume once per (volume, usage) on the node when the
// plugin advertises STAGE_UNSTAGE_VOLUME, then NodePublishVolume once per
// allocation, read-only for read claims. UnmountVolume calls
// NodeUnpublishVolume for the allocation, and NodeUnstageVolume only when
// the last allocation of that (volume, usage) is gone.
//
// Paths live under Config.Root and are built only from validated IDs:
//
//	<root>/staging/<namespace>/<volume>/<usage>       staging directory (created by the mounter)
//	<root>/per-alloc/<allocation>/<volume>/<usage>    target (created by the plugin; its parent by the mounter)
//
// Staging once per usage is csikit's design. Note that the CSI spec says
// "The CO SHALL ensure that there is only one `staging_target_path` per
// volume": two usages of one volume on one node at the same time (say a
// read claim and a write claim of a multi-writer volume) are staged at
// two paths, which a plugin may refuse, and csitest's lifecycle checker
// reports unstaging one of them while the other is published. A host that
// wants strict conformance places at most one usage of a staged volume on
// a node at a time; the Mounter does not refuse it.
//
// # State and crashes
//
// The tracker keeps one file per volume under Config.StateDir, replaced
// atomically (temporary file, fsync, rename, fsync of the directory), so
// operations on different volumes never wait for each other's writes.
// Before each plugin call the mounter makes its intent durable
// ("staging", "publishing", "unpublishing", "unstaging"):
//
//   - a first mount writes before NodeStageVolume, then writes the stage's
//     success together with the publish intent before NodePublishVolume;
//   - a later mount of a staged volume writes once, before the publish;
//   - an unmount writes once, with the intents of NodeUnpublishVolume and
//     (for the last user) NodeUnstageVolume, before either call.
//
// A full stage–publish–unpublish–unstage cycle thus makes three writes
// for four plugin calls (0.75 file-data fsyncs and 1.5 fsyncs in all per
// call, Stats counts them). Outcomes that narrow what may be mounted (a
// publish or teardown that succeeded) are not synced on their own: they
// reach the disk with the volume's next write, and the file of a volume
// that is fully torn down is removed. After a crash a new Mounter reads
// the files back and treats every intent as "may have happened": a
// volume staged before the restart is not staged again and is unstaged
// when its last user goes; an interrupted publish is re-issued by the
// next mount and undone by the unmount; interrupted teardowns are
// finished by the next call on the volume. A file it cannot read fails
// New with ErrCorruptState: it never starts from an empty state while
// mounts may exist.
//
// # Usage
//
// The host (the node agent) drives the Mounter:
//
//  1. Create it once at start with New, giving a mount root, a state
//     directory that survives restarts, and the node's plugin registry
//     (fingerprint.Manager satisfies Plugins). Do not share the state
//     directory between two Mounters.
//  2. When an allocation placed on the node needs a volume, after its
//     claim was written (and ControllerPublishVolume returned a publish
//     context, if the plugin needs one), build a request with
//     NewMountRequest(volume, claim) and call MountVolume. Hand the
//     returned MountInfo.Path (a directory, or a device file for a block
//     claim) to the workload.
//  3. If MountVolume fails with a Retryable or Uncertain error
//     (csi.IsRetryable), retry it later with the same request; a Final
//     error will fail again.
//  4. When the allocation stops (or its mount failed and the host gives
//     up), call UnmountVolume for it — always, even after a failed
//     mount: an uncertain publish is tracked as mounted and only an
//     unmount cleans it up. Retry it until it succeeds; it is
//     idempotent, and works after a restart.
//  5. Use HasMount to ask whether an allocation may still have a volume
//     published, for example before reporting its node step done.
package mounter
