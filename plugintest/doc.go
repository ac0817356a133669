// Package plugintest is a harness for CSI plugin authors: it drives a
// plugin through the orchestrator's whole lifecycle with the real csikit
// stack, in-process, and checks what the CSI spec requires of every
// answer. It runs in an ordinary go test (no Ginkgo), and csicheck runs
// the same checks from the command line.
//
// # Usage
//
// Start the plugin on a unix socket, then call Run from a test:
//
//	func TestMyPlugin(t *testing.T) {
//		sock := startMyPlugin(t) // serves until the test ends
//		plugintest.Run(t, plugintest.Config{
//			Endpoint:   "unix://" + sock,
//			Parameters: map[string]string{"pool": "fast"},
//			// A node-only plugin cannot create volumes: give it one.
//			// VolumeID: "disk-42",
//		})
//	}
//
// Every failed check is a t.Errorf, so one run lists every failure. Run
// may be called many times in one test binary, from parallel tests.
// Outside a test, Check runs the same lifecycle against any Reporter: a
// *Recorder keeps the results for assertions or a table; csicheck prints
// them.
//
// # The lifecycle
//
// Each run builds its own stack: a state.MemStore with a LocalApplier, an
// rpcshim Router and Server over an InmemTransport, one node with a
// fingerprint.Manager (the plugin registered as its instances), a
// mounter.Mounter and an rpcshim NodeEndpoint, and a claimgc.Worker. Then,
// in order (step names in quotes):
//
//  1. "fingerprint": Probe (waiting for ready), GetPluginInfo,
//     GetPluginCapabilities, the capability calls and NodeGetInfo. A
//     plugin that advertises CONTROLLER_SERVICE is a monolith, one that
//     does not is node-only; ControllerEndpoint and NodeEndpoint name the
//     halves of a split plugin.
//  2. "register plugin on the node": the node's registry fingerprints the
//     plugin and the store sees it healthy.
//  3. "create volume" through the server and router (when the plugin
//     advertises CREATE_DELETE_VOLUME and Config.VolumeID is empty), or
//     "register volume" for the pre-provisioned Config.VolumeID
//     (ValidateVolumeCapabilities when the plugin has a controller).
//  4. "claim (allocation 1)", a write claim: ControllerPublishVolume when
//     the plugin advertises PUBLISH_UNPUBLISH_VOLUME. "claim (allocation
//     2)", a read claim, shares the attachment.
//  5. "mount (allocation 1)" stages (STAGE_UNSTAGE_VOLUME) and publishes;
//     "mount (allocation 2)" publishes from the same stage, read-only.
//  6. "data": a file written through allocation 1's target is read back
//     through every target (Config.DataCheck).
//     Then, for each operation the plugin advertises, through the csikit
//     server and with the volume mounted: "expand online (data kept)"
//     (ExpandVolume: ControllerExpandVolume, then NodeExpandVolume on the
//     node; a file written before is read back; skipped for an
//     offline-only plugin), "snapshot" (CreateSnapshot, ready to use),
//     "restore snapshot (read back)" and "clone volume (read back)" (a
//     new volume from the snapshot or the run's volume, claimed and
//     mounted for an allocation of its own, the file read back with
//     DataShared, then unmounted, released and deleted), and "modify
//     volume" (ModifyVolume with Config.MutableParameters; skipped
//     without them). Their calls are not part of "order of calls".
//  7. "unmount (allocation 2)", then "unmount (allocation 1)", which also
//     unstages. The spec makes the plugin delete what it created at each
//     target_path; a target left in place fails the step.
//  8. "release": the allocations stop and the claim release worker frees
//     the claims (ControllerUnpublishVolume, free). The harness reports
//     the node step of each allocation it unmounted as done with the
//     stop, as a node agent does; the worker detaches on the node only
//     an allocation that may still have a mount.
//  9. "delete volume" (or "deregister volume" for a pre-provisioned one).
//  10. "order of calls" and "nothing left behind" check the run itself.
//
// A single-node-single-writer volume gets one allocation. A plugin that
// refuses the second target of a volume in a single-node mode with
// FailedPrecondition, as the spec's NodePublishVolume table allows, gets
// one too, and the step says so.
//
// # What is checked
//
// Every step's result. Each failure names the step, the CSI call, the
// gRPC code received and what the spec expects, with the facts the
// harness knows:
//
//	step "publish (idempotent repeat)": NodePublishVolume returned AlreadyExists; the spec requires OK when the volume is already published at target_path with identical arguments
//
// Idempotency: each mutating call the stack made is repeated directly
// through a csi/plugin client with identical arguments. CreateVolume must
// return the same volume, ControllerPublishVolume the same publish
// context; NodeStageVolume and NodePublishVolume must succeed; the
// teardown calls (NodeUnpublishVolume, NodeUnstageVolume,
// ControllerUnpublishVolume, DeleteVolume) repeated on what is already
// gone must answer OK, or NotFound where the spec allows it.
//
// Refusals the spec mandates: ControllerPublishVolume and
// NodePublishVolume of an unknown volume ID (shaped like the real one)
// must answer NotFound; CreateVolume without a name,
// ControllerPublishVolume without a node ID, NodeStageVolume without a
// staging path and NodePublishVolume without a target path must answer
// InvalidArgument.
//
// Order. The spec puts the duty of ordering on the CO, so the harness
// reads "the order of calls" two ways. It checks that the csikit stack
// called the plugin in the spec's order, each call once (a guard on the
// harness, so that every verdict rests on a correct lifecycle). And it
// holds the plugin to the order its own capabilities announce: a plugin
// that does not advertise STAGE_UNSTAGE_VOLUME but refuses
// NodePublishVolume as "not staged", one that refuses NodeStageVolume
// for want of a ControllerPublishVolume it did not ask for, or one that
// refuses NodeUnstageVolume after every NodeUnpublishVolume returned OK,
// fails with a message naming the mismatch. With Config.StrictUnstage the
// harness also probes NodeUnstageVolume while the volume is still
// published and requires FailedPrecondition: the spec does not demand
// that refusal, but a plugin whose unstage would pull storage from under
// live publications should make it (csitest's fake tolerates such an
// unstage; the hostpath example refuses it). The harness stages the
// volume again after a probe that succeeded.
//
// # Coverage per RPC
//
// Besides the lifecycle, the harness checks the spec's rules for every
// call the plugin advertises, one row of a table each, named after the
// call ("ListVolumes (paging)", "CreateSnapshot (errors)"): ListVolumes
// with max_entries and starting_token (an invalid token must answer
// Aborted), GetCapacity, ControllerGetVolume, ValidateVolumeCapabilities,
// a 128-byte volume name, DeleteVolume of an unknown volume, snapshots
// with ListSnapshots paging, restore and clone, ControllerExpandVolume,
// ControllerModifyVolume, the attach limit (max_volumes_per_node filled,
// then ResourceExhausted), NodeGetVolumeStats (usage, and NotFound for an
// unknown volume or path) and NodeExpandVolume, each with the codes the
// spec requires for missing fields and unknown IDs. A row whose
// capability is not advertised is reported skipped with the reason.
// Rows that need volumes or snapshots of their own make and delete them
// (the cleanups delete what a failed row left). Config.RunChecks and
// SkipChecks select the rows by regular expression. A call that keeps
// answering Unavailable fails its row after a few tries; the other rows
// still run.
//
// # Faults
//
// With Config.Faults the harness also plays an orchestrator that fails:
// it restarts its own node agent (the mounter and node endpoint) from
// the state directory after the first mount, between the unmounts and
// before the release, and the lifecycle must go on from the node state
// on disk, the plugin seeing each call once ("order of calls" holds it
// to that); and it sends each ControllerPublishVolume, NodeStageVolume
// and NodePublishVolume again with a 50 ms deadline, then retries it,
// and the retry must succeed. Config.RestartPlugin (csicheck's
// --restart-cmd) restarts the plugin itself after the first mount: the
// harness waits for Probe, and the publish calls repeated then must
// succeed.
//
// Config.SecondNodeEndpoint names the plugin's node service on a second
// node, for which the stack runs a second node agent (registry, mounter,
// node endpoint) as a host runs one on each node. After the release,
// step "second node (hand-over)" goes through it: an allocation on the
// second node claims the volume through the server (ControllerPublish
// to that node), the second mounter stages and publishes it and
// unmounts it, and the claim release worker detaches it once the
// allocation stops; meanwhile ControllerPublishVolume to the first node
// must be refused with FailedPrecondition (for a single-node mode).
//
// # Setup
//
// Before any step, the harness connects once to each socket (within two
// seconds). A missing socket, a file that is not a stream socket, a
// refused connection or a denied permission is ErrCannotConnect, not a
// failure of the plugin: Run fails the test with it and Check returns it.
// Messages that say which setting to change name it as
// Config.SettingNames does (csicheck's flags).
//
// # Stopping and cleaning up
//
// A failure that later steps depend on (a claim that failed, a mount
// that failed) stops the lifecycle: the remaining steps are reported
// skipped, and Run ends the test with t.FailNow. Independent checks
// (repeats, refusals, data) never stop it.
//
// Whatever happened, the undo of every step taken runs in reverse order
// at the end: unmount what the mounter may still have published, release
// the claims through the worker (or, when that fails, detach the volume
// directly and drop the claims), delete the volume the run created, and
// undo anything a probe created by mistake. A cleanup that fails is
// reported as a failure too. Cleanups run before Run returns, not only
// through t.Cleanup (where Run registers them as well), so that they run
// while the plugin certainly still serves, even when the test stops it
// with a deferred call, and so that the test can inspect the plugin
// afterwards.
//
// # What it does not do
//
// The csikit stack runs at most two nodes; no topology or health
// calls; no data check on block devices. The harness runs in
// the plugin's mount namespace (in-process or on the same host), since it
// reads and writes the published paths itself.
package plugintest
