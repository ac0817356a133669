package claimgc

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/backoff"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/state"
)

// Defaults filled in by New for zero Config fields.
const (
	// DefaultParallelism bounds the volumes released at once. Each holds
	// at most one plugin call in flight; 16 keeps a burst of releases
	// (a whole node drained) moving without flooding the controllers.
	DefaultParallelism = 16
	// DefaultRetryBase and DefaultRetryMax shape the backoff after a
	// Retryable failure: the delay doubles from the base, with jitter,
	// up to the cap. A node plugin restarting or a controller failing
	// over is usually back within seconds; a node that is down may stay
	// down for long, and a minute between attempts costs little.
	DefaultRetryBase = time.Second
	DefaultRetryMax  = time.Minute
	// DefaultFinalRetryInterval is the slow schedule of a claim whose
	// last step failed with a Final error: an operator has to act (fix
	// the plugin, the volume), and retrying every few minutes notices
	// when they have without loading a plugin that keeps refusing.
	DefaultFinalRetryInterval = 10 * time.Minute
	// DefaultScanInterval is the backstop: how often the Worker lists
	// the volumes with past claims even though the store signalled no
	// change. Blocking queries catch every change; the backstop covers
	// a store or host that misses one.
	DefaultScanInterval = 5 * time.Minute
	// DefaultStepTimeout bounds one step's call to a node or controller
	// (a node step is two plugin calls, each bounded at two minutes by
	// the plugin client), so a hung node cannot hold a worker slot
	// forever.
	DefaultStepTimeout = 5 * time.Minute
)

// Config configures a Worker. Store, Applier, Nodes, Controllers and
// NodeStatuses are required; every other field has a default.
type Config struct {
	// Store is read for volumes with past claims and their plugins,
	// with blocking queries: on the store's state.PastClaimWatcher when
	// it has one (state.MemStore does), else on state.TableVolumes.
	Store state.Reader
	// Applier takes every write: CheckpointClaim, DetachVolume,
	// RemoveAttachment, FreeClaim and RecordClaimError, the commands of
	// one step of one volume in one state.Batch. It is called from the
	// goroutines releasing volumes, up to Parallelism at once.
	Applier state.Applier
	// Nodes runs the node step; Controllers the controller step.
	Nodes       NodeDetacher
	Controllers ControllerDetacher
	// NodeStatuses tells whether a claim's node is gone (skip the node
	// step), ready (run it), or down or unknown (retry later).
	NodeStatuses NodeStatuses

	// Parallelism bounds the volumes released at once; 0 means
	// DefaultParallelism.
	Parallelism int
	// RetryBase and RetryMax shape the capped exponential backoff (with
	// jitter) after a Retryable failure; 0 means DefaultRetryBase and
	// DefaultRetryMax.
	RetryBase time.Duration
	RetryMax  time.Duration
	// FinalRetryInterval is the delay before retrying a claim whose step
	// failed with a Final error; 0 means DefaultFinalRetryInterval.
	FinalRetryInterval time.Duration
	// ScanInterval is the period of the backstop scan; 0 means
	// DefaultScanInterval.
	ScanInterval time.Duration
	// StepTimeout bounds each node or controller step; 0 means
	// DefaultStepTimeout. It is a safety bound on wall time, not a
	// schedule, so it does not use Clock.
	StepTimeout time.Duration

	// Clock times retries and the backstop scan and stamps frees; nil
	// means the wall clock.
	Clock clock.Clock
	// Logger; nil means no logging.
	Logger hclog.Logger
	// Observer, if set, receives the Worker's events.
	Observer Observer
}

// withDefaults validates c and fills its defaults.
func (c Config) withDefaults() (Config, error) {
	missing := func(field, what string) error {
		return fmt.Errorf("%w: claimgc: Config.%s is nil; pass %s", csi.ErrInvalidRequest, field, what)
	}
	switch {
	case c.Store == nil:
		return c, missing("Store", "the server's state.Reader (a *state.MemStore)")
	case c.Applier == nil:
		return c, missing("Applier", "the host's state.Applier (state.NewLocalApplier for a single process)")
	case c.Nodes == nil:
		return c, missing("Nodes", "a NodeDetacher (the rpcshim router)")
	case c.Controllers == nil:
		return c, missing("Controllers", "a ControllerDetacher (the rpcshim router)")
	case c.NodeStatuses == nil:
		return c, missing("NodeStatuses", "the host's view of its nodes")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"RetryBase", c.RetryBase}, {"RetryMax", c.RetryMax},
		{"FinalRetryInterval", c.FinalRetryInterval}, {"ScanInterval", c.ScanInterval},
		{"StepTimeout", c.StepTimeout},
	} {
		if d.v < 0 {
			return c, fmt.Errorf("%w: claimgc: Config.%s is %s; use a positive duration, or 0 for the default",
				csi.ErrInvalidRequest, d.name, d.v)
		}
	}
	if c.Parallelism < 0 {
		return c, fmt.Errorf("%w: claimgc: Config.Parallelism is %d; use a positive number, or 0 for the default (%d)",
			csi.ErrInvalidRequest, c.Parallelism, DefaultParallelism)
	}
	if c.Parallelism == 0 {
		c.Parallelism = DefaultParallelism
	}
	if c.RetryBase == 0 {
		c.RetryBase = DefaultRetryBase
	}
	if c.RetryMax == 0 {
		c.RetryMax = max(DefaultRetryMax, c.RetryBase)
	}
	if c.RetryMax < c.RetryBase {
		return c, fmt.Errorf("%w: claimgc: Config.RetryMax (%s) is below RetryBase (%s)",
			csi.ErrInvalidRequest, c.RetryMax, c.RetryBase)
	}
	if c.FinalRetryInterval == 0 {
		c.FinalRetryInterval = DefaultFinalRetryInterval
	}
	if c.ScanInterval == 0 {
		c.ScanInterval = DefaultScanInterval
	}
	if c.StepTimeout == 0 {
		c.StepTimeout = DefaultStepTimeout
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	return c, nil
}

func (c Config) backoff() backoff.Policy {
	return backoff.Policy{Base: c.RetryBase, Max: c.RetryMax}
}

type nopObserver struct{}

func (nopObserver) ClaimFreed(string, string, string, time.Duration)     {}
func (nopObserver) StepFailed(string, string, string, Step, error, bool) {}
func (nopObserver) QueueChanged(int, int, int)                           {}
