// Package mounter is the node side of a volume's lifecycle: the
// VolumeMounter that stages and publishes CSI volumes for allocations
// through the node plugin, and unpublishes and unstages them again, with
// a usage tracker that survives restarts of the node agent.
//
// # What it does
//
// A Usage is how an allocation uses a volume: (claim mode, access mode,
// attachment mode); its StageUsage leaves out the claim mode.
// MountVolume calls NodeStageVolume once per volume on the node when the
// plugin advertises STAGE_UNSTAGE_VOLUME, then NodePublishVolume once per
// allocation, read-only for read claims. UnmountVolume calls
// NodeUnpublishVolume for the allocation, and NodeUnstageVolume only when
// the last allocation published from that stage is gone. Paths live
// under Config.Root and are built only from validated IDs:
//
//	<root>/staging/<namespace>/<volume>/<stage usage>  staging directory (made by the mounter), e.g. .../snw-fs
//	<root>/per-alloc/<allocation>/<volume>/<usage>     target (made by the plugin; its parent by the mounter), e.g. .../w-snw-fs
//
// With Config.StagingRoot and TargetRoot, the staging directories live
// under the first and the targets under the second, each root made,
// checked and cleaned as Root is.
//
// No element beneath the root is reached through a symbolic link: a
// link planted there (<root>/per-alloc/<allocation> pointing at /etc,
// say) would take the mounter's mkdir and rmdir, and the plugin's mount
// or delete, wherever it points (tree.go). A link on the way to a
// staging or target path fails the call with ErrUnsafePath (Final)
// before the plugin call that would use the path. The staging directory
// once the plugin may have staged on it, and the target once a publish
// was sent, are the plugin's mount points, which it may make links of
// its own. The mounter's directories are made 0750.
//
// # One stage per volume
//
// The CSI spec says "The CO SHALL ensure that there is only one
// `staging_target_path` per volume", and NodeStageVolume has no
// read-only flag, so the readers and the writers of a volume on one
// node share one stage (per StageUsage, made with the options and
// secrets of the mount that staged it), and are published from it at
// targets of their own. While allocations use a stage, a mount under
// another StageUsage is refused with csi.ErrVolumeInUse (Retryable); a
// stage that no allocation uses any more is torn down first instead.
//
// # Failed plugin calls
//
// gRPC reports a connection lost in the middle of a call as Unavailable,
// although the plugin may have acted. So only a Final error from
// NodeStageVolume or NodePublishVolume (the plugin refused) is taken to
// mean that the call did nothing; after any other, the volume stays
// recorded as possibly staged and published until an UnmountVolume has
// torn it down (NotFound counts as done).
//
// # State
//
// The tracker keeps one record per volume in two bbolt databases in
// Config.StateDir, held locked from New until Close:
//
//	mounter.db          synced: what an OS crash must not lose
//	notes-<boot>.db     never synced: every write, for a restart in the same boot
//
// In each, bucket "volumes" maps "<namespace>/<volume ID>" (IDs hold no
// '/') to the volume's record in JSON: {"Version":3, "Namespace",
// "VolumeID", "ExternalID", "PluginID", "Stages": {<stage usage>:
// {"Stage", "StagingPath", "Writers"/"Readers": {<allocation>: {"State",
// "TargetPath"}}}}}; a volume that tracks nothing has no key. Bucket
// "own" of mounter.db holds the ID of the last commit this version made.
//
// Intents are durable: before each plugin call that may widen what is
// staged or published, and before an unmount's calls, the intent
// ("staging", "publishing", "unpublishing", "unstaging") is committed to
// mounter.db, synced, then to the notes. A first mount saves once, before
// NodeStageVolume, with the publish intent (the publish follows at once);
// a later mount once, before NodePublishVolume; an unmount once for all
// its calls, which also keeps an unmount that returned from being undone.
// So a mount–unmount cycle syncs twice (Stats.Syncs), and volumes that
// save at once share one sync through bbolt's Batch. A failed save (a
// full disk) fails the call before the plugin call, Retryable. A
// withdrawn intent (the plugin refused a first mount's call) is saved
// too: no later write of the host's would carry it.
//
// Outcomes are notes: a change that narrows what may be mounted (a stage
// or publish that succeeded, a teardown done, a volume's removal) goes
// to the notes only, and to mounter.db with its next commit, of any
// volume, or at Close. bbolt cannot skip the sync of one commit safely
// (after an OS crash it may point at pages that never reached the
// disk), so unsynced writes go to a database of their own, read only in
// the boot that wrote it, whose page cache holds every write whole.
// (Without a boot ID, /proc/sys/kernel/random/boot_id on Linux, every
// write is saved.) A note lost to an OS crash is safe: the record it
// replaced is more pessimistic, so the next call repeats an idempotent
// plugin call, and HasMount may report an allocation whose unmount had
// succeeded until an UnmountVolume for it.
//
// New loads this boot's notes if mounter.db's last commit is its own (an
// agent restarted); otherwise (a reboot, or an older version wrote
// mounter.db since) it drops them and starts from mounter.db, always a
// safe start. An intent loaded counts as "may have happened": the next
// mount re-issues it, the unmount undoes it (a plugin answers OK or
// NotFound for a target it never published), and the next call on the
// volume finishes interrupted teardowns. A mounter.db that bbolt cannot
// open or check, or a record not valid in version 3, fails New with
// ErrCorruptState: it never starts empty while mounts may exist. Files
// of older versions (JSON, then slot files) are imported once, then
// removed (import.go). To repair a volume's state by hand, stop the
// agent, remove the notes, and edit its key in mounter.db.
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
//     error will fail again. csi.ErrVolumeInUse means the volume is
//     staged on the node in another access or attachment mode for other
//     allocations: retry once they have stopped, or place the
//     allocation on another node. ErrUnsafePath (Final) means a
//     symbolic link beneath the mount root: it needs an operator.
//  4. When the allocation stops (or its mount failed and the host gives
//     up), call UnmountVolume for it — always, even after a failed
//     mount: an uncertain publish is tracked as mounted and only an
//     unmount cleans it up. Retry it until it succeeds; it is
//     idempotent, and works after a restart.
//  5. Use HasMount to ask whether an allocation may still have a volume
//     published, for example before reporting its node step done.
//  6. When the agent stops, once no call is running, call Close: it
//     writes the last notes into mounter.db and releases the state for
//     the next agent.
package mounter
