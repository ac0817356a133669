package claimgc

import (
	"context"
	"time"

	"github.com/csikit/csikit/csi"
)

// The three interfaces below are what the Worker needs from the rest of
// the server. The rpcshim router satisfies the first two and a host's node
// records the third; claimgc declares them so that it never imports a
// higher layer.
//
// The Worker calls them from its own goroutines, up to
// Config.Parallelism at a time, never twice at once for one volume. The
// volume and claim passed in are copies owned by the Worker for the
// duration of the call: implementations may read them but must not keep
// or change them. ctx carries the worker's cancellation (a lost
// leadership, a stopped Run) and the Config.StepTimeout deadline.

// NodeDetacher runs the node step on the claim's node: NodeUnpublish for
// the claim's allocation, then NodeUnstage if it was the last user.
//
// nil or an error for which csi.TeardownDone holds (NotFound) means the
// volume is no longer published for the allocation on that node, and the
// Worker checkpoints ClaimNodeDetached. Any other error is classified
// with csi.Classify: a Retryable or Uncertain error (the node plugin not
// running, csi.ErrPluginNotFound; the node unreachable,
// csi.ErrNodeNotReady or csi.ErrUnavailable) is retried with backoff; a
// Final error is recorded on the claim and retried on the slow schedule.
// The error text reaches Claim.LastError, prefixed with the step, so it
// must never hold a secret and should name the volume, the allocation and
// the node, as the rpcshim router's errors do.
type NodeDetacher interface {
	NodeDetach(ctx context.Context, vol *csi.Volume, claim *csi.Claim) error
}

// ControllerDetacher runs ControllerUnpublishVolume for the claim's volume
// and CSI node ID (claim.ExternalNodeID) through a healthy controller.
// Errors are read as for NodeDetacher; no healthy controller is
// csi.ErrNoController (Retryable).
type ControllerDetacher interface {
	ControllerDetach(ctx context.Context, vol *csi.Volume, claim *csi.Claim) error
}

// NodeStatuses reports the host's view of a node. An error means the
// host could not tell; the Worker treats it like csi.NodeStatusUnknown
// and retries the node step later. Only csi.NodeStatusGone skips the
// node step; Ready runs it; Down and Unknown retry it with backoff.
type NodeStatuses interface {
	NodeStatus(ctx context.Context, nodeID string) (csi.NodeStatus, error)
}

// Step names a step of a claim's release.
type Step string

// The steps, in the order a release runs them.
const (
	// StepNodeDetach is NodeUnpublish (and NodeUnstage for the last
	// user) on the claim's node, then the NodeDetached checkpoint.
	StepNodeDetach Step = "node-detach"
	// StepControllerDetach is ControllerUnpublish through a controller,
	// ended by the free.
	StepControllerDetach Step = "controller-detach"
	// StepFree removes the claim.
	StepFree Step = "free"
)

// Observer receives the Worker's events, for metrics. Its methods are
// called synchronously from the Worker's goroutines, many at a time, so
// they must be safe for concurrent use and return quickly. The strings
// are IDs; err never holds a secret. A nil Config.Observer observes
// nothing; Stats is always available.
type Observer interface {
	// ClaimFreed is called once per claim the Worker freed. sinceReleased
	// is the time from the allocation becoming terminal (Claim.ReleasedAt)
	// to the free (Config.Clock); 0 when ReleasedAt was not set.
	ClaimFreed(namespace, volumeID, allocID string, sinceReleased time.Duration)
	// StepFailed is called for each failed attempt at a step (its RPC or
	// its checkpoint). final reports whether the error was Final, in
	// which case the next attempt waits Config.FinalRetryInterval.
	StepFailed(namespace, volumeID, allocID string, step Step, err error, final bool)
	// QueueChanged is called when the number of volumes in the Worker's
	// hands changes: ready to run, running, and waiting for a retry.
	QueueChanged(ready, running, waiting int)
}
