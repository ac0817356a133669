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
// Config.StateDir, which New opens and holds locked until Close:
//
//	mounter.db          synced: what an OS crash must not lose
//	notes-<boot>.db     never synced: every write, for a restart in the same boot
//
// Each holds a bucket "volumes": the key is "<namespace>/<volume ID>"
// (IDs never hold a '/'), the value the volume's record in JSON,
// {"Version":3, "Namespace", "VolumeID", "ExternalID", "PluginID",
// "Stages": {<stage usage>: {"Stage", "StagingPath", "Writers"/"Readers":
// {<allocation>: {"State", "TargetPath"}}}}}. A volume that tracks
// nothing has no key. mounter.db also holds a bucket "own", with the ID
// of the last commit this version made.
//
// Intents are durable. Before each plugin call that may widen what is
// staged or published, and before an unmount's calls, the mounter saves
// its intent ("staging", "publishing", "unpublishing", "unstaging"): a
// commit to mounter.db, synced, then one to the notes, before the call.
// A first mount saves once, before NodeStageVolume, with the publish
// intent too (the publish follows at once); a later mount once, before
// NodePublishVolume; an unmount once, for all its calls, which also keeps
// an unmount that returned from being undone. A mount–unmount cycle thus
// syncs twice (Stats.Syncs), and volumes that save at once share one
// sync through bbolt's Batch. A save that fails (a full disk) fails the
// call before the plugin call, Retryable. A withdrawn intent (the plugin
// refused a first mount's call) is saved too: no later write of the
// host's would carry it.
//
// Outcomes are notes. A change that narrows what may be mounted (a stage
// or publish that succeeded, a teardown done, a volume's removal) is
// written to the notes only; mounter.db gets it with its next commit,
// of any volume, or at Close. bbolt cannot skip the sync of one commit
// safely (after an OS crash, an unsynced commit may point at pages that
// never reached the disk), so the unsynced writes go to a database of
// their own, which is read only in the boot that wrote it: there the
// page cache holds every write whole, synced or not. (Without a boot ID,
// /proc/sys/kernel/random/boot_id on Linux, there are no notes and
// every write is saved.) Losing a note, as
// an OS crash may, is safe: the record it replaced is more pessimistic,
// so the next call repeats an idempotent plugin call (stages again,
// tears down again), and HasMount may report an allocation whose
// unmount had succeeded until an UnmountVolume for it.
//
// New loads this boot's notes if mounter.db's last commit is its own
// (an agent restarted); otherwise (a reboot, or an older version that
// wrote mounter.db since) it drops them and starts from mounter.db,
// which is always safe to start from. Every intent loaded counts as
// "may have happened": the next mount re-issues it, the unmount undoes
// it (a plugin answers OK or NotFound for a target it never published),
// and interrupted teardowns are finished by the next call on the
// volume. A mounter.db that bbolt cannot open or check, or a record that
// is not a valid record of version 3, fails New with ErrCorruptState:
// it never starts from an empty state while mounts may exist. The files
// of older versions (JSON, then slot files) are imported once, then
// removed (import.go). To repair a volume's state by hand, stop the
// agent, remove the notes, and edit the key in mounter.db.
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
