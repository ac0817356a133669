package rpcshim_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// lifecycleSteps are the server-side steps BenchmarkServer_Lifecycle
// times, in order.
var lifecycleSteps = []string{"create", "claim-1", "claim-2", "release", "delete"}

// BenchmarkServer_Lifecycle measures what the server side of csikit
// (Server, Router, InmemTransport, NodeEndpoint, claim release Worker,
// MemStore) adds to the controller calls of one volume's lifecycle:
// create, a write claim and a read claim on one node (the second reuses
// the first's attachment), the release of both through the Worker (node
// detach, ControllerUnpublish, free), and delete. Each step is timed
// apart and set against the plugin calls it makes, made straight on a
// plugin client to the same csitest controller in the same iteration:
// CreateVolume, ControllerPublishVolume, nothing, ControllerUnpublishVolume,
// DeleteVolume. The node detach answers at once (a recording unmounter),
// as in a lifecycle whose volume was already unmounted.
//
// The figures are medians over the iterations: ns/<step> and
// ns/raw-<step>, and stack-vs-raw for the sum of the step medians over
// the sum of the raw medians.
//
//	go test ./rpcshim -run '^$' -bench Lifecycle -benchtime 500x
func BenchmarkServer_Lifecycle(b *testing.B) {
	e := newSrvEnv(b, csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true})
	w, err := claimgc.New(claimgc.Config{
		Store: e.store, Applier: e.applier, Nodes: e.router, Controllers: e.router, NodeStatuses: e.statuses,
		Parallelism: 1, RetryBase: 20 * time.Millisecond, RetryMax: time.Second, FinalRetryInterval: time.Second,
	})
	must(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		<-done
	})
	w.SetEnabled(true)
	direct, _, err := e.plugins.ControllerPlugin(rtPlugin)
	must(b, err)

	stack := map[string][]time.Duration{}
	raw := map[string][]time.Duration{}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		for step, d := range lifecycleOnce(b, ctx, e, i) {
			stack[step] = append(stack[step], d)
		}
		for step, d := range rawLifecycleOnce(b, ctx, direct, i) {
			raw[step] = append(raw[step], d)
		}
	}
	var sumStack, sumRaw time.Duration
	for _, step := range lifecycleSteps {
		s, r := median(stack[step]), median(raw[step])
		sumStack += s
		sumRaw += r
		b.ReportMetric(float64(s.Nanoseconds()), "ns/"+step)
		b.ReportMetric(float64(r.Nanoseconds()), "ns/raw-"+step)
	}
	b.ReportMetric(float64(sumStack)/float64(sumRaw), "stack-vs-raw")
}

// lifecycleOnce runs one volume's lifecycle through the server and the
// Worker and returns the wall time of each step.
func lifecycleOnce(b testing.TB, ctx context.Context, e *srvEnv, i int) map[string]time.Duration {
	id := fmt.Sprintf("vol-%d", i)
	a1, a2 := fmt.Sprintf("a%d-1", i), fmt.Sprintf("a%d-2", i)
	e.allocs(a1, "n2", a2, "n2")
	out, lap := laps()
	_, err := e.server.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{Volume: csi.Volume{
		ID: id, Namespace: "default", PluginID: rtPlugin, Capabilities: []csi.Capability{snwFS},
		Secrets: csi.Secrets{"token": "s3cr3t"},
	}})
	must(b, err)
	lap("create")
	_, err = e.claim(id, a1, "n2", csi.ClaimWrite, snwFS)
	must(b, err)
	lap("claim-1")
	_, err = e.claim(id, a2, "n2", csi.ClaimRead, snwFS)
	must(b, err)
	lap("claim-2")
	idx, err := e.store.Index(state.TableVolumes)
	must(b, err)
	_, err = e.applier.Apply(ctx, state.UpsertAllocations{ReleasedAt: time.Now(), Allocations: []csi.Allocation{
		{ID: a1, Namespace: "default", NodeID: "n2", Terminal: true},
		{ID: a2, Namespace: "default", NodeID: "n2", Terminal: true},
	}})
	must(b, err)
	waitUnclaimed(b, ctx, e, id, idx)
	lap("release")
	_, err = e.server.DeleteVolume(ctx, &rpcshim.VolumeDeleteRequest{Namespace: "default", VolumeID: id})
	must(b, err)
	lap("delete")
	e.apply(state.DeleteAllocations{AllocationIDs: []string{a1, a2}})
	return out
}

// waitUnclaimed blocks until volume id has no claim, as a host waiting
// for a release does: a blocking query on the volume table.
func waitUnclaimed(b testing.TB, ctx context.Context, e *srvEnv, id string, idx uint64) {
	for {
		var err error
		if idx, err = e.store.Wait(ctx, state.TableVolumes, idx); err != nil {
			b.Fatal(err)
		}
		v, err := e.store.Volume("default", id)
		must(b, err)
		if !v.InUse() {
			return
		}
		for _, c := range v.PastClaims {
			if c.LastError != "" {
				b.Fatalf("release of volume %s stuck: %s", id, c.LastError)
			}
		}
	}
}

// laps returns the steps' wall times, and lap, which records the time
// since the previous lap (or laps) as step's.
func laps() (map[string]time.Duration, func(step string)) {
	out := map[string]time.Duration{}
	t := time.Now()
	return out, func(step string) {
		now := time.Now()
		out[step] = now.Sub(t)
		t = now
	}
}

// rawLifecycleOnce makes the controller calls of one lifecycle straight
// on the plugin client.
func rawLifecycleOnce(b *testing.B, ctx context.Context, c plugin.ControllerClient, i int) map[string]time.Duration {
	out, lap := laps()
	v, err := c.CreateVolume(ctx, &plugin.CreateVolumeRequest{
		Name: fmt.Sprintf("raw-%d", i), Capabilities: []csi.Capability{snwFS}, Secrets: csi.Secrets{"token": "s3cr3t"},
	})
	must(b, err)
	lap("create")
	_, err = c.ControllerPublishVolume(ctx, &plugin.ControllerPublishRequest{
		ExternalID: v.ExternalID, ExternalNodeID: "csi-n2", Capability: snwFS, Secrets: csi.Secrets{"token": "s3cr3t"},
	})
	must(b, err)
	lap("claim-1")
	lap("claim-2")
	must(b, c.ControllerUnpublishVolume(ctx, &plugin.ControllerUnpublishRequest{
		ExternalID: v.ExternalID, ExternalNodeID: "csi-n2", Secrets: csi.Secrets{"token": "s3cr3t"},
	}))
	lap("release")
	must(b, c.DeleteVolume(ctx, &plugin.DeleteVolumeRequest{ExternalID: v.ExternalID, Secrets: csi.Secrets{"token": "s3cr3t"}}))
	lap("delete")
	return out
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
