package raftstate_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/csikit/csikit/state"
)

// submitters is how many goroutines per GOMAXPROCS submit claims at
// once: a server takes claims from many clients, and raft commits what
// is waiting together.
const submitters = 16

// BenchmarkClaim measures ClaimVolume through a three-server cluster
// over TCP on loopback, with boltdb logs and file snapshots on disk,
// submitted from many goroutines at once as a busy server would, and the
// same claims through state.LocalApplier on a MemStore in the same run,
// from one goroutine since it takes one write at a time.
//
// claims/s is the cluster's throughput; raft-vs-direct is ns per claim
// through raft over ns per claim through the LocalApplier; direct-claims/s
// is the LocalApplier's throughput. ns/op is the raft run alone.
func BenchmarkClaim(b *testing.B) {
	// raft's default timeouts, as a real cluster runs: the tests' short
	// ones make a leader loaded with fsyncs step down.
	c := newCluster(b, clusterOpts{tcp: true, durable: true, raft: func(rc *raft.Config) {
		d := raft.DefaultConfig()
		rc.HeartbeatTimeout, rc.ElectionTimeout = d.HeartbeatTimeout, d.ElectionTimeout
		rc.LeaderLeaseTimeout, rc.CommitTimeout = d.LeaderLeaseTimeout, d.CommitTimeout
	}})
	leader := c.leader()
	direct, err := state.NewMemStore(state.Config{})
	if err != nil {
		b.Fatal(err)
	}
	local := state.NewLocalApplier(direct)
	apply(b, leader.srv, fingerprintCmd())
	apply(b, local, fingerprintCmd())
	round := 0

	b.Run("tcp-3-servers", func(b *testing.B) {
		b.StopTimer()
		b.SetParallelism(submitters)
		round++
		claims := prepareClaims(b, fmt.Sprintf("b%d", round), b.N, leader.srv, local)
		var next atomic.Int64
		b.StartTimer()
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				cl := claims[next.Add(1)-1]
				if _, err := leader.srv.Apply(context.Background(), cl); err != nil {
					b.Error(err)
					return
				}
			}
		})
		viaRaft := time.Since(start)
		b.StopTimer()
		// Let the followers finish applying, so they do not compete
		// with the direct run for the CPU.
		for _, f := range c.followers(leader) {
			waitIndexes(b, f.store, indexes(b, leader.store))
		}
		// The LocalApplier takes one write at a time, so it runs from one
		// goroutine: what each claim costs the store, with no queueing.
		start = time.Now()
		for _, cl := range claims {
			if _, err := local.Apply(context.Background(), cl); err != nil {
				b.Fatal(err)
			}
		}
		viaLocal := time.Since(start)
		n := float64(b.N)
		b.ReportMetric(n/viaRaft.Seconds(), "claims/s")
		b.ReportMetric(n/viaLocal.Seconds(), "direct-claims/s")
		b.ReportMetric(float64(viaRaft)/float64(viaLocal), "raft-vs-direct")
	})
}

// prepareClaims registers n volumes and n allocations on every applier,
// in batches, and returns one claim per pair.
func prepareClaims(b *testing.B, prefix string, n int, appliers ...state.Applier) []state.ClaimVolume {
	const chunk = 256
	claims := make([]state.ClaimVolume, 0, n)
	for lo := 0; lo < n; lo += chunk {
		var batch state.Batch
		var allocs []string
		for i := lo; i < min(lo+chunk, n); i++ {
			vol, alloc := fmt.Sprintf("%s-vol-%d", prefix, i), fmt.Sprintf("%s-web-%d", prefix, i)
			batch.Commands = append(batch.Commands, volumeCmd(vol))
			allocs = append(allocs, alloc)
			claims = append(claims, claimCmd(vol, alloc))
		}
		batch.Commands = append(batch.Commands, allocsCmd(allocs...))
		for _, a := range appliers {
			apply(b, a, batch)
		}
	}
	return claims
}
