// Command csicheck drives a CSI plugin through the orchestrator's
// lifecycle with the csikit stack and prints a pass/fail table: the
// checks of package plugintest (results, idempotency, the refusals the
// spec mandates, the order of calls, cleanup), from the command line.
//
// # Usage
//
//  1. Start the plugin on a unix socket on this host: one socket for a
//     monolith or node-only plugin, two for a split one.
//  2. Run csicheck (see the examples below) where the plugin's mounts are visible, with
//     the rights the plugin's node service needs (often root): it stages
//     and publishes under a temporary mount root (or --mount-root) and
//     reads and writes the published volume.
//  3. For a plugin that cannot create volumes, pre-provision one and
//     give it with --volume-id (and --volume-context); for one that
//     needs secrets, write them to a JSON file and pass --secrets-file.
//  4. Read the table (or --json): one row per step, pass, FAIL with the
//     rule the plugin broke, or skip with the reason. The exit status
//     says whether every check passed.
//
// For example:
//
//	csicheck --endpoint unix:///run/csi/csi.sock
//	csicheck --endpoint /run/csi/csi.sock --volume-id disk-42     # node-only plugin
//	csicheck --controller-endpoint /run/ctrl.sock --node-endpoint /run/node.sock
//
// Flags:
//
//	--endpoint                the plugin's socket (monolith or node-only)
//	--controller-endpoint     a split plugin's controller socket
//	--node-endpoint           a split plugin's node socket
//	--second-node-endpoint    the plugin's node socket on a second node (own node ID, shared
//	                          back end): after the release the volume is handed over to it
//	--volume-id               a pre-provisioned volume (required when the plugin cannot create volumes)
//	--volume-context k=v      its volume context (repeatable)
//	--access-mode             default single-node-writer
//	--attachment-mode         file-system (default) or block-device
//	--fs-type, --mount-flag   mount options (--mount-flag repeatable)
//	--parameter k=v           CreateVolume parameters (repeatable)
//	--mutable-parameter k=v   what step "modify volume" sets (repeatable; none skips it)
//	--capacity                CreateVolume's required bytes
//	--secrets-file            YAML or JSON secrets passed to every call that takes them: one
//	                          object of strings, or csi-sanity's per-call form
//	                          (CreateVolumeSecret: {…}), whose sets are merged: csikit
//	                          keeps one set of secrets per volume (csi.Volume.Secrets,
//	                          sent with each of its calls), so a key that takes two
//	                          values in two calls is refused (exit 2); the sets of
//	                          CreateSnapshot, DeleteSnapshot and ListSnapshots may differ
//	--test-volume-size        CreateVolume's required capacity (1Gi, 500M, bytes)
//	--test-volume-parameters  YAML or JSON file of CreateVolume parameters (--parameter wins)
//	--run, --skip             regular expressions over the coverage checks' names
//	                          ("ListVolumes (paging)"); the lifecycle's steps always run
//	--junit FILE              also write the results as JUnit XML
//	--faults                  restart csicheck's own node agent mid-lifecycle (resuming from
//	                          its state on disk), also mid-release between NodeUnpublishVolume
//	                          and NodeUnstageVolume, cancel publish and stage calls and retry them
//	--restart-cmd CMD         sh -c CMD restarts the plugin after the first mount; csicheck
//	                          waits for Probe and repeats the publish calls
//	--mount-root, --state-dir where to stage and publish, and the mounter's state
//	--staging-dir, --target-dir  staging and target paths under separate directories
//	                          instead of --mount-root (neither inside the other)
//	--create-path-cmd, --remove-path-cmd, --check-path-cmd  commands run with a path as
//	                          their last argument, to create, remove and check it where
//	                          the plugin sees it (another mount namespace or container);
//	                          the check prints file, directory, not_found or other
//	--timeout                 bound on each step (default 1m)
//	--data-check              shared (default), writer-only or off
//	--skip-idempotency        do not repeat the mutating calls
//	--skip-negative           do not send requests the plugin must refuse
//	--strict-unstage          require NodeUnstageVolume to be refused while published: stricter
//	                          than the spec, which leaves the order to the CO
//	--json                    print the results as JSON instead of a table
//	--verbose                 print each step to stderr as it starts
//	--log-level               csikit's logs on stderr: off (default), error, warn, info, debug, trace
//
// Secrets are read from a file, never from the command line, and never
// printed. Interrupting csicheck (SIGINT, SIGTERM) ends the current step;
// the cleanups still run.
//
// Exit status: 0 when every check passed, 1 when one failed, 2 when
// csicheck could not run (bad flags, an unusable mount root, a socket it
// cannot connect to: missing, not a stream socket, refusing, or not
// permitted). A setup failure says so, within two seconds
// ("cannot connect to /run/csi.sock (--endpoint): no such file or
// directory"), and never blames the plugin.
package main
