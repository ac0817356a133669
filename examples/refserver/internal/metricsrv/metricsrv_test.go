package metricsrv_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/examples/refserver/internal/metricsrv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMetrics_Serve_Scrape scrapes what was emitted over HTTP, and
// checks that Serve returns nil once its ctx ends.
func TestMetrics_Serve_Scrape(t *testing.T) {
	m, err := metricsrv.New()
	if err != nil {
		t.Fatal(err)
	}
	m.Sink().IncrCounterWithLabels(metrics.MountsStaged, 2, []metrics.Label{{Name: "plugin", Value: "p1"}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, lis) }()

	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + lis.Addr().String() + metricsrv.Path)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `csikit_mounts_staged{plugin="p1"} 2`) {
		t.Errorf("GET %s: %v %d\n%s", metricsrv.Path, err, resp.StatusCode, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after its ctx ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its ctx ended")
	}
}

// TestMetrics_Serve_ListenerFails: a listener that fails ends Serve
// with an error naming it, while ctx goes on, and leaves no goroutine.
func TestMetrics_Serve_ListenerFails(t *testing.T) {
	m, err := metricsrv.New()
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = lis.Close()
	done := make(chan error, 1)
	go func() { done <- m.Serve(context.Background(), lis) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "metrics endpoint on 127.0.0.1:") {
			t.Errorf("Serve on a closed listener: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve on a closed listener did not return")
	}
}
