// Package hostpath is a small, real CSI plugin (CSI spec v1.13) whose
// volumes are directories under a data dir. csikit's reference server,
// its tests and its plugin-author harness run it, in-process through this
// package or as the hostpathplugin command. It is a demo and a test
// subject, not production storage: capacities are recorded numbers, not
// quotas, and all volumes share the data dir's file system.
//
// # Services
//
// Identity is served in every Mode. Controller (ModeController,
// ModeMonolith) creates and deletes volumes as directories, records
// ControllerPublish attachments, validates capabilities, lists volumes,
// gets one volume, expands a volume's recorded capacity and modifies its
// one mutable parameter (LabelParameter). Node (ModeNode, ModeMonolith)
// stages, publishes, unpublishes and unstages with real bind mounts or
// symbolic links (see MountMethod), records expansions, and reports
// NodeGetInfo and volume statistics from statfs(2).
// Config.ControllerPublish and Config.Staging switch the optional
// PUBLISH_UNPUBLISH_VOLUME and STAGE_UNSTAGE_VOLUME capabilities, so that
// every path of a CO can be exercised.
//
// Only file-system (mount) attachment is supported: a block capability is
// refused with InvalidArgument by CreateVolume, ValidateVolumeCapabilities
// and the node calls.
//
// # Usage
//
//  1. Build a Config: DataDir is required; pick a Mode, NodeID,
//     capability switches and a MountMethod (MountSymlink in tests that
//     run as a normal user).
//  2. Call New. It validates the Config and resolves MountAuto by trying
//     a bind mount; it starts nothing.
//  3. Call Run(ctx) to serve on Config.Endpoint, or Serve(ctx, lis) to
//     serve on a listener of your own. Both return when ctx ends, after
//     a graceful stop bounded by Config.ShutdownTimeout.
//  4. Dial the socket with any CSI client. Run creates the socket and then
//     opens the data dir, so the first call should wait for the socket
//     (grpc.WaitForReady) or be retried; once Probe answers, the plugin
//     holds its locks and has loaded its state.
//
// # Data dir
//
// DataDir/volumes/<volume ID> holds each volume. DataDir/controller.json
// holds the controller's volumes (ID, name, capacity, capabilities,
// parameters, published nodes), and DataDir/node-<digest>.json each node
// plugin's staged and published paths. Both are replaced atomically
// (temporary file, fsync, rename) and guarded by a lock file, so a
// restarted plugin keeps its volumes and two plugins never write the same
// state. Controller and node plugins that share volumes share the data
// dir. Volume IDs are "vol-" and 32 random hex digits; an ID received
// from a caller is used in a path only after it is checked against that
// format.
//
// # Errors
//
// The plugin follows the spec's error tables: missing fields are
// InvalidArgument, unknown volumes NotFound (but DeleteVolume,
// ControllerUnpublishVolume, NodeUnpublishVolume and NodeUnstageVolume of
// something unknown succeed), repeated calls with the same arguments
// succeed and with other arguments answer AlreadyExists, a single-node
// volume published to a second node answers FailedPrecondition, and a
// node beyond Config.MaxVolumes ResourceExhausted. ControllerPublish to
// a node ID that no node plugin has registered in the data dir (see
// Config.NodeID) is NotFound.
package hostpath
