package plugin_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/metrics/metricstest"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
)

func TestClient_MetricSink(t *testing.T) {
	p := csitest.Start(t, csitest.Config{})
	rec := metricstest.New()
	c, err := plugin.New(plugin.Config{Endpoint: p.Addr(), MetricSink: rec, MaxRetries: -1,
		MetricLabels: []metrics.Label{{Name: "plugin", Value: "p1"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	p.FailNext(csitest.MethodProbe, codes.Unavailable, 1)
	if _, err := c.Probe(ctx); err == nil {
		t.Fatal("Probe did not fail")
	}
	p1 := metrics.Label{Name: "plugin", Value: "p1"}
	ok := []metrics.Label{{Name: "method", Value: "Probe"}, {Name: "code", Value: "OK"}, p1}
	bad := []metrics.Label{{Name: "method", Value: "Probe"}, {Name: "code", Value: "Unavailable"}, p1}
	if got := rec.Samples(metricstest.Name(metrics.PluginRPCLatency, ok...)); got != 1 {
		t.Errorf("OK samples = %v, names %v", got, rec.Names())
	}
	if got := rec.Samples(metricstest.Name(metrics.PluginRPCLatency, bad...)); got != 1 {
		t.Errorf("Unavailable samples = %v, names %v", got, rec.Names())
	}
}
