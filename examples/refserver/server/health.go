package server

import (
	"context"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/health"
)

// newMonitor builds a health monitor: conditions, drift and node stats
// read through the router (node stats from the agents' node endpoints,
// at the paths their mounters track).
func (s *Server) newMonitor() (*health.Monitor, error) {
	return health.New(health.Config{
		Store: s.cfg.Store, Applier: s.cfg.Applier, Controllers: s.router.HealthControllers(),
		Nodes:  s.router.HealthNodes(),
		Logger: s.cfg.Logger.Named("health"), MetricSink: s.cfg.Metrics.Sink(),
	})
}

// healthRunner runs the leader's work for each term in which this
// server leads while Run runs: first resume, which finishes the volume
// changes an earlier leader left pending, then a fresh health monitor,
// which writes and detaches leaks. Only the leader may do either. Its
// methods are safe from any goroutine; stopping waits for the term's
// calls to return.
type healthRunner struct {
	newMonitor func() (*health.Monitor, error)
	resume     func(context.Context) // nil: nothing to resume
	logger     hclog.Logger

	mu      sync.Mutex
	running bool // between open and close
	leading bool
	stop    context.CancelFunc // the current term's, nil when none runs
	done    chan struct{}
}

func (h *healthRunner) setLeader(leader bool) { h.update(func() { h.leading = leader }) }
func (h *healthRunner) open()                 { h.update(func() { h.running = true }) }
func (h *healthRunner) close()                { h.update(func() { h.running = false }) }

// active reports whether a monitor runs now (tests).
func (h *healthRunner) active() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stop != nil
}

func (h *healthRunner) update(change func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	change()
	want := h.running && h.leading
	switch {
	case want && h.stop == nil:
		m, err := h.newMonitor()
		if err != nil {
			h.logger.Error("health monitor not started", "error", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if h.resume != nil {
				h.resume(ctx)
			}
			if m != nil {
				_ = m.Run(ctx) // returns nil once ctx ends
			}
		}()
		h.stop, h.done = cancel, done
	case !want && h.stop != nil:
		h.stop()
		<-h.done
		h.stop, h.done = nil, nil
	}
}
