// Package mounter is the node side of a volume's lifecycle: the
// VolumeMounter that stages and publishes CSI volumes for allocations
// through the node plugin, and unpublishes and unstages them again, with
// a usage tracker that survives restarts of the node agent.
//
// # What it does
//
// A Usage is how an allocation uses a volume: (claim mode, access mode,
// attachment mode). Its StageUsage leaves out the claim mode. MountVolume
// calls NodeStageVolume once per volume on the node when the plugin
// advertises STAGE_UNSTAGE_VOLUME, then NodePublishVolume once per
// allocation, read-only for read claims. UnmountVolume calls
// NodeUnpublishVolume for the allocation, and NodeUnstageVolume only when
// the last allocation published from that stage is gone.
//
// Paths live under Config.Root and are built only from validated IDs
// (New creates the root and the staging and per-alloc directories; a
// mount creates what lies below them):
//
//	<root>/staging/<namespace>/<volume>/<stage usage>  staging directory (created by the mounter), e.g. .../snw-fs
//	<root>/per-alloc/<allocation>/<volume>/<usage>     target (created by the plugin; its parent by the mounter), e.g. .../w-snw-fs
//
// No element beneath the root is reached through a symbolic link. ID
// validation keeps every path lexically inside the root, but a link
// planted beneath it (<root>/per-alloc/<allocation> pointing at /etc,
// say) would take the mounter's mkdir and rmdir, and the plugin's mount,
// unmount or delete, wherever it points. So the mounter creates, checks
// and removes its directories without following links: with openat2(2)
// and RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS on Linux 5.6 and later, else
// by opening one element at a time with O_NOFOLLOW. A link on the way
// to the staging or target path fails MountVolume with ErrUnsafePath
// (an *UnsafePathError naming the link; Final, and matching
// csi.ErrInvalidRequest) before any plugin call or state write; an
// UnmountVolume whose path passes through one fails the same way before
// the plugin call that would use it, keeping the teardown recorded for
// a retry once the link is gone, and its directory removal never goes
// through a link, nor removes one; New refuses a link at <root>/staging
// or <root>/per-alloc. The staging directory itself, once the plugin
// may have staged on it, and the target, once a publish was sent, are
// the plugin's mount points, and a plugin may make them links of its
// own (the hostpath example's symlink mode does): they are held to the
// rule only until then. The root itself is resolved once, at New: a link in
// Config.Root is the host's, and the paths handed to the plugin and in
// MountInfo are built on the resolved root. The checks cannot close the
// window between a check and the plugin's use of a path; the mounter's
// directories are made 0750, so that only the node's administrator or
// a plugin can write in them.
//
// A mount that stages creates the target's parent while the plugin
// stages, and the unmount that unstages removes it while the plugin
// unstages: on a busy file system a mkdir or rmdir can take as long as a
// plugin call.
//
// # One stage per volume
//
// The CSI spec (csi.proto, NodeStageVolumeRequest.staging_target_path)
// says: "The CO SHALL ensure that there is only one
// `staging_target_path` per volume." NodeStageVolume has no read-only
// flag (read-only is NodePublishVolume's choice), so the mounter stages
// a volume per (access mode, attachment mode), not per claim mode: the
// readers and the writers of a multi-writer volume on one node share one
// stage and one staging path, and are published from it at targets of
// their own, the readers read-only. The stage is made with the mount
// options, secrets and contexts of the mount that staged it; later
// mounts pass theirs to NodePublishVolume only.
//
// A volume staged under one StageUsage cannot at the same time be staged
// under another (a read claim with MULTI_NODE_READER_ONLY beside a write
// claim with MULTI_NODE_MULTI_WRITER, or a block claim beside a
// file-system one): MountVolume refuses such a mount with
// csi.ErrVolumeInUse, which is Retryable, before any plugin call or
// write, and names the allocations using the current stage. Once they
// have all unmounted, the volume is unstaged and the other mode mounts.
// A stage that no allocation uses any more (left by a failed mount or an
// interrupted unmount) does not block: the next mount under another mode
// tears it down first. A plugin that does not stage has no staging path,
// so any modes may then be published side by side.
//
// # Failed plugin calls
//
// gRPC reports a connection lost in the middle of a call as Unavailable,
// although the plugin may have acted. So only a Final error from
// NodeStageVolume or NodePublishVolume (InvalidArgument,
// FailedPrecondition, Internal, …: the plugin refused) is taken to mean
// that the call did nothing (this trusts a plugin that answers, say,
// Internal to have left nothing behind); after a Retryable or Uncertain
// one the volume stays recorded as possibly staged, and possibly
// published for the allocation, until an UnmountVolume has torn it down
// (NodeUnpublishVolume and NodeUnstageVolume are idempotent, and
// NotFound counts as done).
//
// # State and crashes
//
// The tracker keeps one record per volume in a bbolt database,
// Config.StateDir/mounter.db, which New opens and holds locked until
// Close (a second Mounter on the same directory fails New). Its layout:
//
//	bucket "volumes"
//	  key    "<namespace>/<volume ID>" (IDs never hold a '/')
//	  value  the volume's record in JSON: {"Version":3, "Namespace", "VolumeID",
//	         "ExternalID", "PluginID", "Stages": {<stage usage>: {"Stage",
//	         "StagingPath", "Writers"/"Readers": {<allocation>: {"State",
//	         "TargetPath"}}}}}
//
// A volume that tracks nothing has no key. Before each plugin call that
// may widen what is staged or published, and before an unmount's calls,
// the mounter commits its intent ("staging", "publishing",
// "unpublishing", "unstaging"), and the commit is synced before the call
// is made:
//
//   - a first mount writes once, before NodeStageVolume, with the stage
//     intent and the publish intent together (the publish follows at
//     once);
//   - a later mount of a staged volume writes once, before the publish;
//   - an unmount writes once, with the intents of NodeUnpublishVolume and
//     (for the last user) NodeUnstageVolume, before either call. That
//     write is also what keeps an unmount that returned success from
//     being undone by an OS crash.
//
// Outcomes that narrow what may be mounted (a stage or publish that
// succeeded, a teardown done, the volume's removal) are committed the
// same way, but their failure is only logged: a record that is more
// pessimistic than the truth only makes the next call repeat an
// idempotent plugin call. They are synced all the same because bbolt
// has no per-transaction way to skip the sync that is safe: an unsynced
// commit followed by an OS crash may leave the database corrupt, not
// merely old. A full stage–publish–unpublish–unstage cycle commits five
// times for four plugin calls (Stats counts the synced commits).
//
// Operations on different volumes share bbolt's one writer: a write
// that finds another in flight joins bbolt's Batch, which commits the
// writes of every volume waiting at that moment in one transaction and
// one sync, so that many volumes mounted or released at once cost far
// fewer syncs than writes.
//
// After a crash a new Mounter reads the records back and treats every
// intent as "may have happened": a volume staged before the restart is
// not staged again and is unstaged when its last user goes; an
// interrupted publish is re-issued by the next mount and undone by the
// unmount; a publish intent whose NodePublishVolume never ran (the agent
// died during the stage) is undone by NodeUnpublishVolume like any
// other, which the plugin answers OK or NotFound; interrupted teardowns
// are finished by the next call on the volume. A database that bbolt
// cannot open or check, or a record that is not a valid record of
// version 3, fails New with ErrCorruptState: it never starts from an
// empty state while mounts may exist. A write that fails (a full disk)
// fails the mount or unmount before its plugin call, Retryable.
//
// Older versions kept a file per volume (versions 1 and 2, plain JSON
// under StateDir/volumes/<namespace>/<volume>.json; version 3, slot
// files under StateDir/records/<n>.state). New imports them once into
// the database, in one synced transaction, then removes them (see
// import.go); a file it cannot read fails New with ErrCorruptState and
// nothing is imported. An operator who must repair a volume's state by
// hand can stop the agent and edit its key with any bbolt tool.
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
//     releases the state database for the next agent.
package mounter
