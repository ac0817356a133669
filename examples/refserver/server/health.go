package server

import (
	"github.com/csikit/csikit/health"
)

// newMonitor builds the health monitor: conditions and drift read
// through the router. Run starts it on a server that leads from the
// start (not Config.Follower); a follower made leader later does not run
// it, which only delays what it would find until that server restarts
// leading. Node stats are not read: the agents' node endpoint has no
// route for NodeGetVolumeStats.
func (s *Server) newMonitor() (*health.Monitor, error) {
	return health.New(health.Config{
		Store: s.cfg.Store, Applier: s.cfg.Applier, Controllers: s.router.HealthControllers(),
		Logger: s.cfg.Logger.Named("health"), MetricSink: s.cfg.Metrics.Sink(),
	})
}
