// Package metricsrv collects what csikit's parts emit into a
// promsink.Sink on a registry of its own, and serves it at /v1/metrics
// in the Prometheus text format: the reference server's metrics, and
// those of a node agent that runs in a process of its own.
package metricsrv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/metrics/promsink"
)

// Path is where Serve answers, as the reference server does.
const Path = "/v1/metrics"

// Metrics is a sink and the registry it fills. Its methods are safe
// for concurrent use.
type Metrics struct {
	sink *promsink.Sink
	reg  *prometheus.Registry
}

// New returns an empty Metrics, its samples kept in histograms with
// promsink.DefaultBuckets.
func New() (*Metrics, error) {
	sink, err := promsink.New(promsink.Options{})
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(sink); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return &Metrics{sink: sink, reg: reg}, nil
}

// Sink is what the parts emit through.
func (m *Metrics) Sink() metrics.Sink { return m.sink }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

// Gather returns the metric families collected so far; the caller owns
// them.
func (m *Metrics) Gather() ([]*dto.MetricFamily, error) { return m.reg.Gather() }

// Serve answers GET /v1/metrics on lis, over plain HTTP, until ctx
// ends; then it stops listening, lets a scrape in progress finish for
// up to five seconds and returns nil. It closes lis. The metrics hold
// no secret (their labels are plugin IDs, method and code names), but
// bind lis where only the scraper reaches it.
func (m *Metrics) Serve(ctx context.Context, lis net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		sctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(lis)
	cancel() // a Serve that failed on its own ends the goroutine too
	<-stopped
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("metrics endpoint on %s: %w", lis.Addr(), err)
}
