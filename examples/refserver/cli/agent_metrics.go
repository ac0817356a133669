package cli

import (
	"context"
	"errors"

	"github.com/csikit/csikit/examples/refserver/agent"
	"github.com/csikit/csikit/examples/refserver/events"
	"github.com/csikit/csikit/examples/refserver/internal/metricsrv"
)

// agentMetrics is the endpoint of an agent's -metrics-addr. An agent
// in a process of its own has no server sink to emit into, as the
// demo's agents do, so it serves its plugin clients' and mounter's
// metrics itself, for a scraper to collect beside the server's.
type agentMetrics struct {
	addr string
	m    *metricsrv.Metrics
}

// newAgentMetrics points cfg's metrics at a sink of the agent's own
// when addr is set; with no addr it returns nil, and the agent emits
// nothing.
func newAgentMetrics(addr string, cfg *agent.Config) (*agentMetrics, error) {
	if addr == "" {
		return nil, nil
	}
	m, err := metricsrv.New()
	if err != nil {
		return nil, err
	}
	cfg.MetricSink = m.Sink()
	return &agentMetrics{addr: addr, m: m}, nil
}

// run listens on the endpoint's address and serves it while run runs;
// the endpoint stops when run returns. A failure to listen runs
// nothing; a failure of the endpoint while the agent runs is returned
// when the agent stops.
func (am *agentMetrics) run(ctx context.Context, nodeID string, ev *events.Log, run func(context.Context) error) error {
	if am == nil {
		return run(ctx)
	}
	lis, err := listen("tcp", am.addr, "-metrics-addr")
	if err != nil {
		return err
	}
	ev.Printf(nodeID, "metrics on http://%s%s", lis.Addr(), metricsrv.Path)
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- am.m.Serve(mctx, lis) }()
	err = run(ctx)
	stop()
	return errors.Join(err, <-done)
}
