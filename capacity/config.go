package capacity

import (
	"fmt"
	"maps"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/state"
)

// Defaults filled in by New for zero Config fields.
const (
	// DefaultInterval is how often every plugin is asked again even when
	// no create or delete kicked it: capacity also moves outside the
	// cluster (another tenant of the same array, a snapshot growing),
	// and a few minutes of staleness only costs a create that fails and
	// is placed again.
	DefaultInterval = 5 * time.Minute
	// DefaultParallelism bounds the GetCapacity calls in flight: one per
	// (topology, class) of a plugin, so a plugin with many zones does not
	// flood its controller.
	DefaultParallelism = 4
	// DefaultCallTimeout bounds one GetCapacity call, so that a hung
	// controller does not hold a pass forever.
	DefaultCallTimeout = time.Minute
)

// Config configures a Refresher. Store, Applier and Controllers are
// required.
type Config struct {
	// Store is read for plugins and their stored records.
	Store Store
	// Applier takes every write: one state.SetCapacity per plugin whose
	// capacity changed.
	Applier state.Applier
	// Controllers makes the GetCapacity calls.
	Controllers Controllers
	// Classes are the parameters classes to ask about: the CreateVolume
	// parameters of the volumes the host creates (its storage classes).
	// Each is recorded under state.ClassOf(parameters). Nil asks about
	// one class, no parameters.
	Classes []map[string]string

	// Interval is the period of the full refresh; 0 means
	// DefaultInterval.
	Interval time.Duration
	// Parallelism bounds the GetCapacity calls in flight; 0 means
	// DefaultParallelism.
	Parallelism int
	// CallTimeout bounds each GetCapacity call; 0 means
	// DefaultCallTimeout. It is a safety bound on wall time, not a
	// schedule, so it does not use Clock.
	CallTimeout time.Duration
	// Clock decides the interval and stamps the records' SeenAt; nil
	// means the wall clock.
	Clock clock.Clock
	// Observer receives an event per plugin refreshed; nil observes
	// nothing.
	Observer Observer
	// Logger; nil means no logging.
	Logger hclog.Logger
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Store == nil:
		return c, missing("Store", "the server's state.Reader")
	case c.Applier == nil:
		return c, missing("Applier", "the server's state.Applier")
	case c.Controllers == nil:
		return c, missing("Controllers", "the host's GetCapacity caller (ControllerFunc over its router)")
	case c.Interval < 0, c.Parallelism < 0, c.CallTimeout < 0:
		return c, fmt.Errorf("%w: capacity refresher: Interval %s, Parallelism %d and CallTimeout %s must not be negative; use 0 for the defaults",
			csi.ErrInvalidRequest, c.Interval, c.Parallelism, c.CallTimeout)
	}
	seen := map[string]bool{}
	classes := make([]map[string]string, 0, max(len(c.Classes), 1))
	for _, p := range c.Classes {
		k := state.ClassOf(p)
		if seen[k] {
			return c, fmt.Errorf("%w: capacity refresher: class %s is listed twice", csi.ErrInvalidRequest, k)
		}
		seen[k] = true
		classes = append(classes, maps.Clone(p))
	}
	if len(classes) == 0 {
		classes = append(classes, nil)
	}
	c.Classes = classes
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Parallelism == 0 {
		c.Parallelism = DefaultParallelism
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c, nil
}

func missing(field, what string) error {
	return fmt.Errorf("%w: capacity refresher: Config.%s is required: pass %s", csi.ErrInvalidRequest, field, what)
}
