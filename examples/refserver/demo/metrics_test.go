package demo_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/demo"
)

// TestRun_MetricsAfterLifecycle scrapes /v1/metrics from the running
// server once the demo's volume is released and freed, and finds each
// family with a plausible value.
func TestRun_MetricsAfterLifecycle(t *testing.T) {
	dir := shortTempDir(t)
	var out syncBuffer
	var scraped string
	var scrapeErr error
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := demo.Run(ctx, demo.Config{
		DataDir: dir, Out: &out, ExitAfterDemo: true, Mount: hostpath.MountSymlink,
		OnStep: func(s demo.Step, res *demo.Result) {
			if s == demo.StepReleased {
				scraped, scrapeErr = scrape(ctx, res.ServerURL+"/v1/metrics", filepath.Join(dir, "tls", "ca.pem"))
			}
		},
	})
	if err != nil {
		t.Fatalf("demo: %v\noutput:\n%s", err, out.String())
	}
	if scrapeErr != nil {
		t.Fatal(scrapeErr)
	}
	for _, want := range []struct {
		series string
		min    float64
	}{
		{`csikit_plugin_rpc_latency_count{code="OK",method="ControllerPublishVolume",plugin="hostpath"}`, 1},
		{`csikit_plugin_rpc_latency_count{code="OK",method="NodePublishVolume",plugin="hostpath"}`, 1},
		{`csikit_plugin_rpc_latency_count{code="OK",method="CreateVolume",plugin="hostpath"}`, 1},
		{`csikit_plugin_rpc_latency_count{code="OK",method="NodeStageVolume",plugin="hostpath"}`, 1},
		{`csikit_mounts_published{plugin="hostpath"}`, 1},
		{`csikit_mounts_staged{plugin="hostpath"}`, 1},
		{`csikit_mounts_unpublished{plugin="hostpath"}`, 1},
		{`csikit_mounts_unstaged{plugin="hostpath"}`, 1},
		{`csikit_claims_taken`, 1},
		{`csikit_claims_released`, 1},
		{`csikit_claims_release_latency_count`, 1},
		{`csikit_worker_queue_depth`, 0},
		{`csikit_health_passes{result="ok"}`, 1},
		{`csikit_health_abnormal`, 0},
	} {
		v, ok := value(scraped, want.series)
		if !ok || v < want.min {
			t.Errorf("%s = %v (found %v), want at least %v", want.series, v, ok, want.min)
		}
	}
	if t.Failed() {
		t.Logf("scraped:\n%s", scraped)
	}
}

func scrape(ctx context.Context, url, caFile string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	pem, err := os.ReadFile(caFile) // the demo runs over TLS
	if err != nil {
		return "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// value finds a series' value in Prometheus text.
func value(text, series string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}
