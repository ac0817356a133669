// Package mounter is the node side of a volume's lifecycle: the
// VolumeMounter that stages and publishes CSI volumes for allocations
// through the node plugin, and tears them down again, with a usage
// tracker that survives restarts of the node agent.
//
// # Paths
//
// Paths are built only from validated IDs, under Config.Root (or
// StagingRoot and TargetRoot):
//
//	<root>/staging/<namespace>/<volume>/<stage usage>  staging directory (made by the mounter), e.g. .../snw-fs
//	<root>/per-alloc/<allocation>/<volume>/<usage>     target (made by the plugin; its parent by the mounter), e.g. .../w-snw-fs
//
// No element beneath the root is reached through a symbolic link: a
// link planted there (<root>/per-alloc/<allocation> pointing at /etc,
// say) would take the mounter's mkdir and rmdir, and the plugin's mount
// or delete, wherever it points. Such a link fails the call with
// ErrUnsafePath (Final) before the plugin call that would use the path.
// Exempt are the plugin's own mount points, which it may make links of:
// the staging directory once a stage may have been sent, the target
// once a publish was. The mounter's directories are made 0750.
//
// # One stage per volume
//
// The CSI spec says "The CO SHALL ensure that there is only one
// `staging_target_path` per volume", and NodeStageVolume has no
// read-only flag, so the readers and the writers of a volume on one
// node share one stage (per StageUsage, made with the options and
// secrets of the mount that staged it), each published at a target of
// its own. While allocations use a stage, a mount under another
// StageUsage fails with csi.ErrVolumeInUse (Retryable); a stage that no
// allocation uses any more is torn down first instead.
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
// staged or published, and before an unmount's calls, the intent is
// committed to mounter.db, synced, then to the notes. A first mount
// saves once, before NodeStageVolume, with the publish intent; a later
// mount once, before NodePublishVolume; an unmount once for all its
// calls, which also keeps an unmount that returned from being undone.
// So a mount–unmount cycle syncs twice (Stats.Syncs), and volumes that
// save at once share one sync through bbolt's Batch. A failed save (a
// full disk) fails the call before the plugin call, Retryable. An
// intent withdrawn after the plugin refused a first mount is saved too:
// no later write of the host's would carry it.
//
// Outcomes are notes: a change that narrows what may be mounted (a
// stage or publish that succeeded, a teardown done) goes to the notes
// only, and to mounter.db with its next commit, of any volume, or at
// Close. bbolt cannot skip the sync of one commit safely (after an OS
// crash it may point at pages that never reached the disk), so unsynced
// writes go to a database of their own, read only in the boot that
// wrote it, whose page cache holds every write whole. Without a boot ID
// (/proc/sys/kernel/random/boot_id) every write is saved. A note lost
// to an OS crash is safe: the record it replaced is more pessimistic,
// so the next call repeats an idempotent plugin call.
//
// New loads this boot's notes if mounter.db's last commit is its own (an
// agent restarted); otherwise (a reboot, or an older version wrote
// mounter.db since) it starts from mounter.db. An intent loaded counts
// as "may have happened": the next mount re-issues it, the unmount
// undoes it (a plugin answers OK or NotFound for a target it never
// published), and the next call on the volume finishes interrupted
// teardowns. A mounter.db that bbolt cannot open or check, or a record
// not valid in version 3, fails New with ErrCorruptState: it never
// starts empty while mounts may exist. Files of older versions are
// imported once, then removed (import.go). To repair a volume's state
// by hand, stop the agent, remove the notes, and edit its key in
// mounter.db.
//
// # Usage
//
// The host (the node agent) drives the Mounter:
//
//  1. Create it once at start with New, giving a mount root, a state
//     directory of its own that survives restarts, and the node's plugin
//     registry (fingerprint.Manager satisfies Plugins).
//  2. When an allocation placed on the node needs a volume, after its
//     claim was written (and ControllerPublishVolume returned, if the
//     plugin needs it), call MountVolume with NewMountRequest(volume,
//     claim), and hand MountInfo.Path to the workload.
//  3. Retry a Retryable or Uncertain error (csi.IsRetryable) later with
//     the same request; a Final one fails again. csi.ErrVolumeInUse
//     clears once the volume's allocations in another mode have stopped
//     (or place the allocation elsewhere); ErrUnsafePath needs an
//     operator.
//  4. When the allocation stops, or the host gives up on its mount,
//     call UnmountVolume until it succeeds, even after a failed mount:
//     an uncertain publish is tracked as mounted and only an unmount
//     cleans it up.
//  5. Use HasMount to ask whether an allocation may still have a volume
//     published, for example before reporting its node step done.
//  6. When the agent stops, once no call is running, call Close.
package mounter
