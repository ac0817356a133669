// Package csitest is an in-process fake CSI plugin for tests. It serves
// the CSI Identity, Controller and Node services on a real unix socket,
// so the code under test talks gRPC exactly as it would to a real plugin,
// and it records what it was asked so the test can check it.
//
// # Usage
//
//  1. Start a fake with Start(t, Config{…}) (or New and Plugin.Start, then
//     Stop). Config picks the plugin type (controller, node or monolith),
//     its advertised capabilities, and its node ID, max volumes and
//     topology, and the form of its optional answers (see Shapes). By
//     default it listens on csi.sock in a fresh, short temporary
//     directory; Endpoint and Addr say where.
//  2. Point the code under test at Addr() (for grpc.NewClient) or
//     Endpoint() (the bare socket path).
//  3. Optionally seed the model (AddVolume) and set fault knobs.
//  4. Drive the code under test, then assert on the model (Volume,
//     Volumes, Attachments, Snapshot), the call log (Calls, CallCount,
//     Methods, RequireSequence) and the lifecycle checker
//     (RequireNoViolations).
//
// # Model
//
// The fake keeps, in memory, the volumes (ID, capacity, context,
// parameters, accessible topology, pool, condition), their
// ControllerPublish attachments by CSI node ID, their
// staging paths and published target paths (each with its readonly flag,
// capability and the publish and volume contexts the call received), and
// snapshots. Every RPC a CO uses is implemented and follows the spec's
// validation and idempotency rules: a missing field is InvalidArgument, an
// unknown volume NotFound (teardown calls on unknown volumes or paths
// succeed), a repeated identical request succeeds, a conflicting one is
// AlreadyExists, and a single-node volume published to a second node is
// FailedPrecondition. An RPC whose capability is not advertised, or whose
// service the plugin type does not serve, answers Unimplemented, as do the
// CSI 1.13 health RPCs. ControllerPublishVolume returns the publish
// context {"devicePath": "/dev/fake-<volume ID>"} unless
// Config.PublishContext says otherwise, and records the attachment
// whatever the context: Attachments lists them, volume by volume, for a
// test to compare with a CO's attachment records.
//
// Capacity comes from pools. By default there is one,
// Config.AvailableCapacity, accessible from wherever CreateVolume asks:
// a volume takes the first preferred topology of its request, else the
// first requisite one, else the fake's node's. Config.Pools gives
// storage per topology and parameters class instead (zone a 10 GiB, zone
// b none): CreateVolume honours accessibility_requirements as the spec
// says, preferred topologies first, then requisite ones, and refuses
// with ResourceExhausted when no pool accessible from a requisite
// topology has room, or OutOfRange when the size is outside a pool's
// volume size bounds. GetCapacity answers per topology and class, with
// maximum and minimum volume size only where a pool sets them. Every
// volume draws from its pool; DeleteVolume gives the room back and
// ControllerExpandVolume takes more. ControllerGetVolume reports the
// volume with a status of its published nodes; Config.VolumeStatus
// leaves the status out or adds the volume condition (SetVolumeCondition)
// that plugins of CSI 1.12 and earlier send.
//
// On disk, NodeStageVolume writes MarkerFile (holding the volume ID) into
// the staging directory and NodeUnstageVolume removes it.
// NodePublishVolume creates the target, a directory holding MarkerFile for
// a mount or an empty file for a block device, inside a parent directory
// the CO must have created; NodeUnpublishVolume removes the target.
//
// # Shapes
//
// Where the spec lets a plugin choose, Config chooses, one knob per
// choice: PublishContext and VolumeContext (a context set, empty or
// absent), UnknownCapacity (capacity_bytes 0), RequiresTopologies and
// Topology (volumes and the node with or without accessible topology),
// Controller.GetCapacity and Pools (capacity per topology, with or
// without volume size bounds), Controller.GetVolume and VolumeStatus
// (a ControllerGetVolume status with or without a condition, or none),
// Node.StageUnstageVolume (staging or not),
// Controller.PublishUnpublishVolume (a controller that needs the node's
// ID or not) and Type (a controller or none). Shapes lists the legal
// combinations a CO must handle as named changes to a base Config, so
// that an end-to-end test can run claim, mount and release over each:
//
//	for _, s := range csitest.Shapes() {
//		t.Run(s.Name, func(t *testing.T) {
//			cfg := base
//			s.Apply(&cfg)
//			p := csitest.Start(t, cfg)
//			// … claim, mount, release; compare p.Attachments() with
//			// the CO's attachment records; p.RequireNoViolations(t).
//		})
//	}
//
// The model and the lifecycle checker hold for every shape: an
// attachment is an attachment whatever its publish context, and the
// checks that need staging or ControllerPublishVolume apply only where
// the plugin advertises them.
//
// # Fault knobs
//
// Every knob is per RPC name (a Method… constant). SetLatency delays a call
// (ending early with the call's context), FailNext queues failures with a
// gRPC code, FailAlways fails every call, SetHook runs a function that
// sees the live request and may fail the call or block it, and Hold
// installs a Gate that holds each call until the test releases it. They
// apply in that order, before the fake handles the call; HoldReplies
// installs a Gate that holds replies after it. A gate makes a plugin as
// slow as the test wants without a clock or a sleep, and a test that
// releases a later call before an earlier one gets out-of-order answers.
// ClearFaults removes every knob, opening the gates.
// SetProbeReady, SetCapabilities, SetNodeInfo and SetVolumeCondition
// change what the plugin reports, and Stop and Restart simulate a crash: in-flight calls fail,
// the socket goes away, and the model, knobs and logs survive. A panic in
// a handler or hook answers Internal instead of crashing the test.
// SetNodeVolumeCondition and SetVolumeUsage change what NodeGetVolumeStats
// reports, and AttachOutOfBand and DropAttachment make the backend's
// attachments drift from the CO's records: a leak, or one that vanished.
//
// # Call log
//
// Every call is logged in arrival order, failed ones too, with a copy of
// its request in which every field the spec marks csi_secret is cleared:
// the log, like the Logger, never holds a secret. By default the log keeps
// every call; Config.MaxCalls keeps only the most recent ones, for long
// benchmarks and soak tests, while CallCount still counts every call.
//
// # Lifecycle checker
//
// The fake records a Violation when a CO breaks the CSI lifecycle:
// NodePublish before NodeStage, NodePublish with the wrong staging path,
// NodeUnstage while still published, ControllerUnpublish while the fake's
// node still has the volume staged or published, DeleteVolume of a volume
// in use, a second publish that the access mode forbids, relative staging
// or target paths, a target whose parent directory is missing, and (on a
// monolith advertising PUBLISH_UNPUBLISH_VOLUME) node calls before
// ControllerPublish or with a publish context other than the one it
// returned. Each kind has a Rule… constant. A violation fails the call
// only where the spec requires an error or the call cannot proceed; the
// Rule constants say which.
//
// # What it does not do
//
// It mounts nothing and needs no root: "staged" and "published" are
// entries in the model plus the marker files above. It does not format or
// store data, enforce topology on node calls, expire snapshots, or check
// secrets (a hook can). One fake is one node; test several nodes with
// several fakes (AdmitUnknownVolumes helps node-only fakes paired with a
// separate controller). It serves no GroupController or SnapshotMetadata
// service.
package csitest
