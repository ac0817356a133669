package server

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/internal/metricsrv"
)

// Metrics is where the server's parts (and, in the demo, the agents in
// the same process) emit: a promsink.Sink on a registry of its own,
// served at /v1/metrics in the Prometheus text format.
type Metrics struct{ p *metricsrv.Metrics }

// NewMetrics returns an empty Metrics.
func NewMetrics() (*Metrics, error) {
	p, err := metricsrv.New()
	if err != nil {
		return nil, err
	}
	return &Metrics{p: p}, nil
}

// Sink is what the parts emit through.
func (m *Metrics) Sink() metrics.Sink { return m.p.Sink() }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler { return m.p.Handler() }

// Metrics returns where the server emits; the demo passes its Sink to
// the agents it runs in the same process.
func (s *Server) Metrics() *Metrics { return s.cfg.Metrics }

// observers fans the Worker's events out.
type observers []claimgc.Observer

var _ claimgc.Observer = observers(nil)

func (o observers) ClaimFreed(namespace, volumeID, allocID string, since time.Duration) {
	for _, x := range o {
		x.ClaimFreed(namespace, volumeID, allocID, since)
	}
}

func (o observers) StepFailed(namespace, volumeID, allocID string, step claimgc.Step, err error, final bool) {
	for _, x := range o {
		x.StepFailed(namespace, volumeID, allocID, step, err, final)
	}
}

func (o observers) QueueChanged(ready, running, waiting int) {
	for _, x := range o {
		x.QueueChanged(ready, running, waiting)
	}
}

// pluginRPC sums the plugin's call counts (the counts of the latency
// histograms) by method.
func (m *Metrics) pluginRPC(pluginID string) ([]api.RPCStat, error) {
	fams, err := m.p.Gather()
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	byMethod := map[string]*api.RPCStat{}
	name := strings.Join(metrics.PluginRPCLatency, "_")
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			var method, code, plugin string
			for _, l := range s.GetLabel() {
				switch l.GetName() {
				case "method":
					method = l.GetValue()
				case "code":
					code = l.GetValue()
				case "plugin":
					plugin = l.GetValue()
				}
			}
			if plugin != pluginID {
				continue
			}
			st := byMethod[method]
			if st == nil {
				st = &api.RPCStat{Method: method}
				byMethod[method] = st
			}
			n := int64(s.GetHistogram().GetSampleCount())
			st.Calls += n
			if code != "OK" {
				st.Errors += n
			}
		}
	}
	out := make([]api.RPCStat, 0, len(byMethod))
	for _, k := range slices.Sorted(maps.Keys(byMethod)) {
		out = append(out, *byMethod[k])
	}
	return out, nil
}

// getPluginRPC answers GET /v1/plugins/{id}/rpc.
func (s *Server) getPluginRPC(_ http.ResponseWriter, r *http.Request) ([]api.RPCStat, uint64, error) {
	id := r.PathValue("id")
	if err := csi.ValidatePluginID(id); err != nil {
		return nil, 0, err
	}
	out, err := s.cfg.Metrics.pluginRPC(id)
	return out, 0, err
}
