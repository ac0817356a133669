package cluster_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cluster"
	"github.com/csikit/csikit/rpcshim"
)

// benchClients is how many clients claim at once.
const benchClients = 32

// batchCounter counts raft-boltdb's StoreLogs batches: each is one
// boltdb commit, one disk sync.
type batchCounter struct {
	metrics.BlackholeSink
	batches atomic.Int64
}

func (c *batchCounter) AddSample(key []string, val float32) { c.AddSampleWithLabels(key, val, nil) }

func (c *batchCounter) AddSampleWithLabels(key []string, _ float32, _ []metrics.Label) {
	if strings.HasSuffix(strings.Join(key, "."), "raft.boltdb.logsPerBatch") {
		c.batches.Add(1)
	}
}

// BenchmarkDurableClaims claims b.N volumes with 32 concurrent clients
// on a single durable server (raft on boltdb) and on a -dev server (raft
// in memory), and reports claims per second on each, their ratio
// (durable-claims: durable/dev) and the durable server's claims per
// disk sync (raft batches concurrent writes into one boltdb commit).
//
//	go test -run '^$' -bench DurableClaims -benchtime 2000x ./examples/refserver/cluster
func BenchmarkDurableClaims(b *testing.B) {
	counter := &batchCounter{}
	conf := metrics.DefaultConfig("bench")
	conf.EnableRuntimeMetrics = false
	if _, err := metrics.NewGlobal(conf, counter); err != nil {
		b.Fatal(err)
	}
	devRate, _ := claimRate(b, cluster.Config{Dev: true}, nil)
	durableRate, syncs := claimRate(b, cluster.Config{DataDir: b.TempDir()}, counter)
	b.ReportMetric(devRate, "dev-claims/s")
	b.ReportMetric(durableRate, "durable-claims/s")
	b.ReportMetric(durableRate/devRate, "durable/dev")
	if syncs > 0 {
		b.ReportMetric(float64(b.N)/float64(syncs), "claims/fsync")
	}
}

// claimRate runs a single server with cfg, registers b.N volumes, and
// times b.N claims by benchClients clients. It returns claims per
// second and the disk syncs counted meanwhile.
func claimRate(b *testing.B, cfg cluster.Config, counter *batchCounter) (float64, int64) {
	b.Helper()
	cfg.BootstrapExpect, cfg.HeartbeatTTL = 1, time.Hour
	srv, err := cluster.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, lis) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	client, err := api.NewClient(lis.Addr().String(), &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchClients}})
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := client.WaitLeader(wctx); err != nil {
		b.Fatal(err)
	}
	must(b, client.RegisterNode(wctx, "n1", &api.RegisterNodeRequest{Address: "127.0.0.1:1"}))
	must(b, client.ReportPlugins(wctx, "n1", []*csi.PluginInfo{{
		PluginID: "fake", AllocationID: "fake-n1", Type: csi.PluginTypeNode, Healthy: true, UpdateTime: time.Now(), NodeInfo: &csi.NodeInfo{ID: "n1"},
	}}))
	capab := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	inParallel(b, func(i int) error {
		_, err := client.RegisterVolume(wctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
			ID: fmt.Sprintf("v%d", i), Namespace: "default", PluginID: "fake", ExternalID: fmt.Sprintf("e%d", i), Capabilities: []csi.Capability{capab},
		}})
		return err
	})

	var before int64
	if counter != nil {
		before = counter.batches.Load()
	}
	start := time.Now()
	inParallel(b, func(i int) error {
		_, err := client.Claim(wctx, "default", fmt.Sprintf("v%d", i), &api.ClaimRequest{
			AllocationID: fmt.Sprintf("a%d", i), NodeID: "n1", Mode: csi.ClaimWrite,
		})
		return err
	})
	elapsed := time.Since(start)
	var syncs int64
	if counter != nil {
		syncs = counter.batches.Load() - before
	}
	return float64(b.N) / elapsed.Seconds(), syncs
}

// inParallel runs f(0) … f(b.N-1) on benchClients goroutines.
func inParallel(b *testing.B, f func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchClients)
	for range benchClients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
