package health

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/state"
)

// Defaults filled in by New for zero Config fields.
const (
	// DefaultInterval is the period of a full pass. Conditions and
	// drift change rarely, and a pass over a large plugin is thousands
	// of volumes.
	DefaultInterval = time.Minute
	// DefaultParallelism bounds the ControllerGetVolume and
	// NodeGetVolumeStats calls in flight.
	DefaultParallelism = 8
	// DefaultPageSize is ListVolumes' max_entries.
	DefaultPageSize = 500
	// DefaultLeakGrace is how long an attachment without a record must
	// be seen before it is detached: longer than any attach in flight
	// takes between the backend showing it and csikit recording it.
	DefaultLeakGrace = 5 * time.Minute
	// DefaultCallTimeout bounds one plugin call (or one ListVolumes
	// page).
	DefaultCallTimeout = time.Minute
	// maxReports is the most reports one SetVolumeHealth carries, so a
	// pass over many changed volumes stays under state.MaxCommandSize.
	maxReports = 1000
)

// Config configures a Monitor. Store, Applier and Controllers are
// required; Nodes is optional (no node stats without it).
type Config struct {
	Store       Store
	Applier     state.Applier
	Controllers Controllers
	Nodes       Nodes

	// Interval is the period of the full pass; 0 means DefaultInterval.
	Interval time.Duration
	// Parallelism bounds the per-volume calls in flight; 0 means
	// DefaultParallelism.
	Parallelism int
	// PageSize is ListVolumes' max_entries; 0 means DefaultPageSize.
	PageSize int32
	// LeakGrace is how long a backend attachment with no record is
	// left alone; 0 means DefaultLeakGrace.
	LeakGrace time.Duration
	// CallTimeout bounds each plugin call; 0 means DefaultCallTimeout.
	// It is a safety bound on wall time, not a schedule.
	CallTimeout time.Duration
	// Clock decides the interval and the grace period and stamps the
	// records; nil means the wall clock.
	Clock clock.Clock
	// Observer receives the events; nil observes nothing.
	Observer Observer
	// Logger; nil means no logging.
	Logger hclog.Logger
	// MetricSink receives the pass count and latency, one count per
	// event by kind, and the number of abnormal volumes
	// (metrics.Health…); nil emits nothing.
	MetricSink metrics.Sink

	metricsOn bool // MetricSink was set
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Store == nil:
		return c, missing("Store", "the server's state.Reader")
	case c.Applier == nil:
		return c, missing("Applier", "the server's state.Applier")
	case c.Controllers == nil:
		return c, missing("Controllers", "the host's controller caller (ControllerFuncs over its router)")
	case c.Interval < 0, c.Parallelism < 0, c.PageSize < 0, c.LeakGrace < 0, c.CallTimeout < 0:
		return c, fmt.Errorf("%w: health monitor: Interval, Parallelism, PageSize, LeakGrace and CallTimeout must not be negative; use 0 for the defaults",
			csi.ErrInvalidRequest)
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Parallelism == 0 {
		c.Parallelism = DefaultParallelism
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.LeakGrace == 0 {
		c.LeakGrace = DefaultLeakGrace
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	c.Clock = clock.Or(c.Clock)
	c.metricsOn = c.MetricSink != nil
	c.MetricSink = metrics.Or(c.MetricSink)
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Observer == nil {
		c.Observer = ObserverFunc(func(Event) {})
	}
	return c, nil
}

func missing(field, what string) error {
	return fmt.Errorf("%w: health monitor: Config.%s is required: pass %s", csi.ErrInvalidRequest, field, what)
}

func unavailable(method string) error {
	return fmt.Errorf("%w: health monitor: the host's Controllers has no %s", csi.ErrUnavailable, method)
}
