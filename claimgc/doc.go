// Package claimgc is the claim release worker: it turns the past claims
// of stopped allocations into detached volumes and frees the claims.
//
// When an allocation becomes terminal, the store turns its claims into
// past claims in state csi.ClaimUnpublishing. The Worker finds them with
// blocking queries on the store (state.Watcher; it never polls) and
// releases each claim in steps, checkpointing through the host's
// state.Applier after each one:
//
//  1. Node step, on the claim's node through NodeDetacher: NodeUnpublish
//     for the allocation, then NodeUnstage if it was the volume's last
//     user there. Skipped when the host reports the node gone
//     (csi.NodeStatusGone); retried while it is down or unknown.
//     Checkpoint: csi.ClaimNodeDetached. A host whose node agent has
//     already unmounted the allocation writes that checkpoint itself
//     (usage step 4), and the Worker starts at step 2.
//  2. Controller step, through ControllerDetacher, on the volume's
//     attachment to the claim's node (csi.Attachment). While another
//     claim still needs the volume attached there (a live claim, or a
//     past claim whose node step is not done), the claim is freed at
//     once and the attachment is left to the last of them: only the
//     detach waits, never the free. Otherwise, when the plugin needs it
//     (it requires a controller, and its healthy controllers advertise
//     PUBLISH_UNPUBLISH_VOLUME, as csi.Plugin.NeedsControllerPublish
//     tells it), the attachment goes to
//     Detaching (state.DetachVolume, written and waited for before the
//     call, so that a claim arriving meanwhile is refused as Retryable
//     instead of joining an attachment that is going away) and
//     ControllerUnpublishVolume is called with the attachment's CSI node
//     ID. Past claims of one node share one ControllerUnpublish.
//  3. Free: one state.Batch removes the attachment
//     (state.RemoveAttachment) and frees the node's claims
//     (state.FreeClaim); without a controller step, the same batch goes
//     at once. The batch is the controller step's checkpoint: nothing
//     happens between the two, so the Worker does not write
//     csi.ClaimControllerDetached on the way (a store write and its wait
//     per claim, saving nothing). Claims found in ControllerDetached or
//     ReadyToFree (left by another writer) are freed.
//
// A checkpoint is written only after its step succeeded, so a Worker
// that stops anywhere (a crash, a lost leadership) leaves every claim at
// its last finished step; the next Worker resumes there and never
// repeats a finished step. A step cut short is repeated whole; every
// step is idempotent, and NotFound from a plugin means it was done
// (csi.TeardownDone). Releasing never calls ControllerPublishVolume.
//
// When the plugin is not registered at all, or requires a controller of
// which no healthy instance runs, whether the controller step is needed cannot
// be told: skipping it could leave the volume attached for good, so the
// claim waits in NodeDetached, retried with backoff, until the plugin is
// back. A volume whose plugin will never return keeps its past claims
// until an operator deregisters it with state.DeregisterVolume{Force}.
//
// # Failures
//
// A step that fails with a Retryable or Uncertain error (csi.Classify:
// the node plugin not running, csi.ErrPluginNotFound; no controller,
// csi.ErrNoController; the node down, csi.ErrNodeNotReady; a plugin
// answering Unavailable or timing out) puts the volume back in the queue
// after a capped exponential backoff with jitter (Config.RetryBase,
// Config.RetryMax). A Final error (a plugin answering Internal, for
// example) is retried on the slow schedule, Config.FinalRetryInterval;
// no claim is ever dropped. Either way the error is recorded on the
// claim (state.RecordClaimError, read back as csi.Claim.LastError) for
// operators; it names the step, the volume, the allocation and the node,
// and never holds a secret. A later checkpoint clears it.
//
// # Scheduling
//
// Releases are keyed by volume (namespace, ID): one release at a time
// per volume, at most Config.Parallelism volumes at once. A volume runs
// in passes that each read it once and move every past claim forward by
// a step, until a pass makes no progress. The queue is first in, first
// out. One goroutine watches the store and scans it: it blocks until
// the volumes with past claims change (state.PastClaimWatcher, so that
// claims and publishes do not wake it; on a store without it, until the
// volume table moves), and scans when they changed and
// a worker slot is free with no volume waiting for one (a scan could
// start nothing otherwise, and the running releases' own writes would
// each cost one), when the Worker is enabled, and every
// Config.ScanInterval as a backstop. A scan lists the keys and
// ModifyIndex of the volumes with past claims (PastClaimVolumeIDs); a
// volume itself is read only by the worker that releases it, once per
// pass. Retries and the backstop are timed on Config.Clock.
//
// Each step's checkpoints are applied where the step is decided, by the
// goroutine releasing the volume, and waited for before the next step:
// a claim's controller step starts only once its NodeDetached
// checkpoint is written. The writes of one step of one volume that
// arrive together go in one state.Batch: the NodeDetached checkpoints
// of a pass's node steps, with the detach intents (state.DetachVolume)
// of the nodes whose controller step follows them, so that a claim's
// release costs two store writes (its node checkpoint with the intent,
// then the attachment's removal with the free); the frees that need no
// plugin call; the removal of a node's attachment with its claims'
// frees. Releases of
// different volumes write on their own; a replicated host's log already
// batches applies that arrive together. The host's Applier therefore
// sees CheckpointClaim, DetachVolume, FreeClaim and RecordClaimError
// both on their own and inside a state.Batch, and RemoveAttachment
// inside one.
//
// # Usage
//
// The host, on every server:
//
//  1. Build the Worker with New: the server's state.Reader and
//     state.Applier, a NodeDetacher and a ControllerDetacher (the rpcshim
//     router satisfies both), and a NodeStatuses answering from the
//     host's node records. A new Worker is disabled.
//  2. Run it in a goroutine: go w.Run(ctx). Run returns once ctx ends
//     and every goroutine it started has stopped.
//  3. When this server becomes the leader, call SetEnabled(true): the
//     Worker scans every volume with past claims, including those a
//     previous leader left half-released. When it loses leadership, call
//     SetEnabled(false): steps in flight are cancelled and leave no
//     checkpoint behind. A single-process host enables it once, at
//     start.
//  4. Report stopped allocations to the store (state.UpsertAllocations
//     with Terminal and ReleasedAt, or state.ReleaseClaims): that is all
//     it takes to start a release. When the node agent has already torn
//     down the allocation's mounts (its mounter's HasMount says so for
//     each volume), say so in the same write: a state.Batch of the
//     upsert and a state.CheckpointClaim to csi.ClaimNodeDetached for
//     each of its claims. The Worker then makes no node-detach call
//     back to that node, which would find nothing to do, and writes no
//     node checkpoint.
//  5. Report a node that left for good as csi.NodeStatusGone, so that
//     its claims skip the node step; until then they wait for it.
//  6. Watch Stats or pass a Config.Observer for metrics: claims freed,
//     failed attempts, queue depth, and the time from ReleasedAt to the
//     free. Claims stuck on a Final error show it in Claim.LastError.
//
// Settle waits until the Worker has nothing left to do now; tests use it
// to act, settle and assert without sleeping.
package claimgc
