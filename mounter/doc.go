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
// # State and crashes
//
// The tracker keeps one file per volume under Config.StateDir, replaced
// atomically (temporary file, fsync, rename, fsync of the directory).
// Before a plugin call the mounter writes its intent ("staging",
// "publishing", "unpublishing", "unstaging"); the intents of the calls
// one operation makes go in a single write, so an operation writes and
// syncs once. Outcomes that narrow what may be mounted are not synced on
// their own: they reach the disk with the volume's next write. After a
// crash a new Mounter reads the files back and treats every intent as
// "may have happened": a volume staged before the restart is not staged
// again and is unstaged when its last user goes; an interrupted publish
// is re-issued by the next mount and undone by the unmount; interrupted
// teardowns are finished by the next call on the volume. A file it
// cannot read fails New with ErrCorruptState: it never starts from an
// empty state while mounts may exist.
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
