package claimgc_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/plugin"
)

// BenchmarkWorker_Release measures how close the Worker gets to the
// bound set by plugin latency alone: 10,000 claims on 100 nodes, each
// release three RPCs (NodeUnpublish, NodeUnstage, ControllerUnpublish)
// to csitest plugins that add 20 ms each, 64 volumes in parallel. The
// bound is claims × 3 × 20 ms ÷ 64; release-vs-bound is the wall time
// from the release command to the last claim freed, divided by it.
//
// 20 ms is a fast real plugin (an unmount, or a detach through a storage
// API, takes longer), and about the least at which, on two cores, the
// plugins' latency and not the CPU bounds both the floor
// (rpcfloor-vs-bound near 1) and the release. At 2 ms the bound asks
// for over ten thousand releases a second, more CPU than two cores have
// for the fake plugins' gRPC alone; both sides are then CPU-bound, and
// the wall ratio is a ratio of CPU times, which release-cpu-vs-rpcfloor
// reports in any case.
//
// Every node has its own csitest node plugin on its own socket; one
// csitest controller serves the controller calls; every RPC crosses a
// real unix socket. The mounts are made, without latency, before the
// timer starts. Two node sides:
//
//   - node=mounter: the node step is a real mounter.Mounter's
//     UnmountVolume (its state written without fsync), as in the tests;
//   - node=direct: the node step makes the two node RPCs itself, to
//     show the Worker's own cost apart from the node agent's.
//
// The floor (rpcfloor-vs-bound, the mean of a run before and one after
// each release) is the plugin calls alone: for each claim, by 64
// goroutines with nothing else to do, the release's three calls in its
// order (NodeUnpublishVolume, NodeUnstageVolume, ControllerUnpublishVolume,
// NotFound counted as done), with the same requests (external IDs,
// paths, CSI node ID, secrets), through the same *plugin.Client values
// the Worker's calls use (the same connection, interceptors, metrics
// and per-call timeouts) to the same plugins with the same latency and
// hooks, the plugins having been given, untimed, the state the calls
// tear down (each volume ControllerPublished, staged and published at
// the same paths). It is the cost of the client, the transport and the
// fake plugins doing the same work on this machine, which no release
// can beat; release-vs-rpcfloor is what csikit's orchestration (store
// writes, the queue, the node agent for node=mounter) adds over it.
// The floor runs on both sides of the release so that a change of the
// machine's load during the run (it is shared) weighs on the floor as
// on the release.
//
// The run also reports the process CPU of the release over the mean CPU
// of the floor (release-cpu-vs-rpcfloor): what csikit's orchestration
// costs in CPU over the plugin calls, which the load of other processes
// moves far less than wall times, and which is the wall ratio too where
// the machine is too small for the bound.
//
// CLAIMGC_BENCH_CLAIMS changes the number of claims, CLAIMGC_BENCH_LATENCY
// the plugins' latency per call (a Go duration, such as 2ms);
// CLAIMGC_BENCH_PROFILE writes a CPU profile of each side (see
// startProfile).
//
//	go test ./claimgc -run '^$' -bench Release -benchtime 1x
func BenchmarkWorker_Release(b *testing.B) {
	for _, direct := range []bool{false, true} {
		name := "node=mounter"
		if direct {
			name = "node=direct"
		}
		b.Run(name, func(b *testing.B) { benchRelease(b, direct) })
	}
}

func benchRelease(b *testing.B, direct bool) {
	claims := 10_000
	if s := os.Getenv("CLAIMGC_BENCH_CLAIMS"); s != "" {
		if _, err := fmt.Sscan(s, &claims); err != nil || claims <= 0 {
			b.Fatalf("CLAIMGC_BENCH_CLAIMS=%q is not a positive number", s)
		}
	}
	latency := 20 * time.Millisecond
	if s := os.Getenv("CLAIMGC_BENCH_LATENCY"); s != "" {
		var err error
		if latency, err = time.ParseDuration(s); err != nil || latency <= 0 {
			b.Fatalf("CLAIMGC_BENCH_LATENCY=%q is not a positive duration", s)
		}
	}
	const (
		nodes       = 100
		parallelism = 64
		rpcsPerClm  = 3
	)
	bound := time.Duration(claims*rpcsPerClm) * latency / time.Duration(parallelism)
	var ratios, floors, cpuRatios []float64
	for b.Loop() {
		b.StopTimer()
		h := newHarness(b, harnessOptions{nodes: nodes, clock: clock.Real, baseDir: benchDir()})
		setupClaims(b, h, claims)
		for _, id := range h.nodeIDs {
			h.nodes[id].fake.SetLatency(nodeUnpublish, latency)
			h.nodes[id].fake.SetLatency(nodeUnstage, latency)
		}
		h.ctrl.SetLatency(ctrlUnpublish, latency)
		cfg := h.workerConfig()
		cfg.Parallelism = parallelism
		cfg.Logger = nil
		paths := mountedPaths(b, h, claims)
		if direct {
			cfg.Nodes = directNodes{h: h, paths: paths}
		}
		stopFloor := startProfile(b, "floor")
		floor0, cpuFloor0 := timedFloor(b, h, paths, parallelism)
		stopFloor()
		remount(b, h, paths)
		w := h.startWorker(cfg, true)
		h.settle(w)
		allocs := make([]string, claims)
		for i := range allocs {
			allocs[i] = fmt.Sprintf("a%d", i)
		}

		stopRelease := startProfile(b, "release")
		cpu0 := cpuTime()
		b.StartTimer()
		start := time.Now()
		h.release(allocs...)
		h.settle(w)
		wall := time.Since(start)
		b.StopTimer()
		stopRelease()
		cpu := cpuTime() - cpu0

		h.requireNoPastClaims("after the release")
		st := w.Stats()
		if st.Freed != uint64(claims) || st.FailedAttempts != 0 {
			b.Fatalf("stats = %+v", st)
		}
		h.requireNoViolations()
		w.stop()

		remount(b, h, paths)
		floor1, cpuFloor1 := timedFloor(b, h, paths, parallelism)
		floor, cpuFloor := (floor0+floor1)/2, (cpuFloor0+cpuFloor1)/2
		ratios = append(ratios, float64(wall)/float64(bound))
		floors = append(floors, float64(floor)/float64(bound))
		cpuRatios = append(cpuRatios, float64(cpu)/float64(cpuFloor))
		b.ReportMetric(float64(wall.Microseconds())/float64(claims), "µs/claim")
		b.ReportMetric(float64(cpu.Microseconds())/float64(claims), "cpu-µs/claim")
		b.Logf("released %d claims in %v (process CPU %v); bound %v; scans %d, writes %d in %d applies; RPC floor %v before, %v after (process CPU %v, %v)",
			claims, wall, cpu, bound, st.Scans, st.Writes, st.Applies, floor0, floor1, cpuFloor0, cpuFloor1)
		b.StartTimer()
	}
	b.ReportMetric(mean(ratios), "release-vs-bound")
	b.ReportMetric(mean(floors), "rpcfloor-vs-bound")
	b.ReportMetric(mean(ratios)/mean(floors), "release-vs-rpcfloor")
	b.ReportMetric(mean(cpuRatios), "release-cpu-vs-rpcfloor")
}

// startProfile starts a CPU profile of one side of the run, release or
// floor, when CLAIMGC_BENCH_PROFILE names a file prefix: the profile
// goes to <prefix>-<sub-benchmark>-<side>.pprof, so that the two sides
// can be compared with go tool pprof -diff_base. It returns the stop.
func startProfile(b *testing.B, side string) (stop func()) {
	b.Helper()
	prefix := os.Getenv("CLAIMGC_BENCH_PROFILE")
	if prefix == "" {
		return func() {}
	}
	name := fmt.Sprintf("%s-%s-%s.pprof", prefix, filepath.Base(b.Name()), side)
	f, err := os.Create(name)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// timedFloor makes the teardown RPCs of the claims of paths (rpcFloor)
// and returns their wall and process CPU time.
func timedFloor(b *testing.B, h *harness, paths map[string][2]string, parallel int) (wall, cpu time.Duration) {
	b.Helper()
	cpu0 := cpuTime()
	wall = rpcFloor(b, h, paths, parallel)
	return wall, cpuTime() - cpu0
}

// directNodes is a NodeDetacher that makes the node RPCs itself, at the
// paths the plugin reported staged and published after the setup: the
// node step without a node agent's bookkeeping.
type directNodes struct {
	h     *harness
	paths map[string][2]string // allocation → target, staging
}

func newDirectNodes(b *testing.B, h *harness, claims int) directNodes {
	return directNodes{h: h, paths: mountedPaths(b, h, claims)}
}

// mountedPaths returns, for each of the claims setupClaims made, where
// the node plugin has the volume published and staged: allocation →
// target, staging.
func mountedPaths(b *testing.B, h *harness, claims int) map[string][2]string {
	b.Helper()
	paths := make(map[string][2]string, claims)
	for i := range claims {
		node := h.nodes[h.nodeIDs[i%len(h.nodeIDs)]]
		st, ok := node.fake.Volume(fmt.Sprintf("ext-v%d", i))
		if !ok || len(st.Published) != 1 || len(st.Staged) != 1 {
			b.Fatalf("volume v%d on %s after setup: %+v", i, node.id, st)
		}
		var p [2]string
		for t := range st.Published {
			p[0] = t
		}
		for s := range st.Staged {
			p[1] = s
		}
		paths[fmt.Sprintf("a%d", i)] = p
	}
	return paths
}

func (d directNodes) NodeDetach(ctx context.Context, vol *csi.Volume, claim *csi.Claim) error {
	n, p := d.h.nodes[claim.NodeID], d.paths[claim.AllocationID]
	err := n.client.NodeUnpublishVolume(ctx, &plugin.NodeUnpublishRequest{ExternalID: vol.ExternalID, TargetPath: p[0]})
	if !csi.TeardownDone(err) {
		return err
	}
	return n.client.NodeUnstageVolume(ctx, &plugin.NodeUnstageRequest{ExternalID: vol.ExternalID, StagingPath: p[1]})
}

func mean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// remount gives the plugins back what a release of the claims of paths
// tore down, straight over their sockets: each volume ControllerPublished
// to its node, staged and published at the same paths as before.
func remount(b *testing.B, h *harness, paths map[string][2]string) {
	b.Helper()
	ctx := context.Background()
	capability := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	forEachClaim(b, len(paths), 32, func(i int) error {
		node := h.nodes[h.nodeIDs[i%len(h.nodeIDs)]]
		ext, p := fmt.Sprintf("ext-v%d", i), paths[fmt.Sprintf("a%d", i)]
		pc, err := h.ctrlClient.ControllerPublishVolume(ctx, &plugin.ControllerPublishRequest{
			ExternalID: ext, ExternalNodeID: node.csiID, Capability: capability, Secrets: floorSecrets(i),
		})
		if err != nil {
			return err
		}
		if err := node.client.NodeStageVolume(ctx, &plugin.NodeStageRequest{
			ExternalID: ext, PublishContext: pc, StagingPath: p[1], Capability: capability,
		}); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(p[0]), 0o750); err != nil {
			return err
		}
		return node.client.NodePublishVolume(ctx, &plugin.NodePublishRequest{
			ExternalID: ext, StagingPath: p[1], TargetPath: p[0], Capability: capability, PublishContext: pc,
		})
	})
}

// floorSecrets are the secrets addVolume gives volume v<i>, which the
// Worker's ControllerUnpublish passes on.
func floorSecrets(i int) csi.Secrets { return csi.Secrets{"token": fmt.Sprintf("s3cr3t-v%d", i)} }

// rpcFloor makes the teardown RPCs of the claims of paths, with the
// requests a release makes, from parallel goroutines and returns the
// wall time.
func rpcFloor(b *testing.B, h *harness, paths map[string][2]string, parallel int) time.Duration {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	forEachClaim(b, len(paths), parallel, func(i int) error {
		node := h.nodes[h.nodeIDs[i%len(h.nodeIDs)]]
		ext, p := fmt.Sprintf("ext-v%d", i), paths[fmt.Sprintf("a%d", i)]
		err := node.client.NodeUnpublishVolume(ctx, &plugin.NodeUnpublishRequest{ExternalID: ext, TargetPath: p[0]})
		if csi.TeardownDone(err) {
			err = node.client.NodeUnstageVolume(ctx, &plugin.NodeUnstageRequest{ExternalID: ext, StagingPath: p[1]})
		}
		if csi.TeardownDone(err) {
			err = h.ctrlClient.ControllerUnpublishVolume(ctx, &plugin.ControllerUnpublishRequest{
				ExternalID: ext, ExternalNodeID: node.csiID, Secrets: floorSecrets(i),
			})
		}
		if !csi.TeardownDone(err) {
			return err
		}
		return nil
	})
	elapsed := time.Since(start)
	for i := range len(paths) {
		node := h.nodes[h.nodeIDs[i%len(h.nodeIDs)]]
		if st, ok := node.fake.Volume(fmt.Sprintf("ext-v%d", i)); !ok || len(st.Published)+len(st.Staged) > 0 {
			b.Fatalf("volume v%d on %s after the floor's calls: %+v", i, node.id, st)
		}
	}
	return elapsed
}

// forEachClaim calls fn for 0…n-1 from parallel goroutines and stops the
// benchmark if any call failed.
func forEachClaim(b *testing.B, n, parallel int, fn func(i int) error) {
	b.Helper()
	work := make(chan int)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range parallel {
		wg.Go(func() {
			for i := range work {
				if err := fn(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		b.Fatalf("%d of %d calls failed; first: %v", len(errs), n, errs[0])
	}
}

// setupClaims registers n volumes and claims and mounts each for its own
// allocation, spread round-robin over the nodes.
func setupClaims(b *testing.B, h *harness, n int) {
	b.Helper()
	ctx := context.Background()
	for i := range n {
		h.addVolume(fmt.Sprintf("v%d", i), csi.AccessModeSingleNodeWriter)
	}
	forEachClaim(b, n, 32, func(i int) error {
		return h.tryClaim(ctx, fmt.Sprintf("v%d", i), fmt.Sprintf("a%d", i), h.nodeIDs[i%len(h.nodeIDs)])
	})
}

// benchDir puts the nodes' files in memory when the machine has a tmpfs
// at /dev/shm: the node side's disk is not what this benchmark measures.
func benchDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return ""
}

// cpuTime is the CPU time (user and system) the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWorker_ReleaseScale measures how the cost of one claim's
// release grows with the number released at once: 2,500 and then 10,000
// allocations, one claim each on 100 nodes, all stopped by one
// UpsertAllocations (a job stop or a node drain), released by the
// Worker with 64 volumes in parallel and plugins without added latency,
// node steps made directly (node=direct above). release-scale is the
// wall time per claim at 10,000 divided by the same at 2,500, from the
// command to the last claim freed; 1 is linear.
//
//	go test ./claimgc -run '^$' -bench ReleaseScale -benchtime 1x
func BenchmarkWorker_ReleaseScale(b *testing.B) {
	sizes := []int{2_500, 10_000}
	perClaim := make([][]float64, len(sizes))
	for b.Loop() {
		b.StopTimer()
		for i, n := range sizes {
			perClaim[i] = append(perClaim[i], float64(timeRelease(b, n))/float64(n))
		}
		b.StartTimer()
	}
	for i, n := range sizes {
		b.ReportMetric(mean(perClaim[i])/1e3, fmt.Sprintf("µs/claim-%d", n))
	}
	b.ReportMetric(mean(perClaim[1])/mean(perClaim[0]), "release-scale")
}

// timeRelease releases n claims, set up beforehand, in one command and
// returns the time until the Worker freed the last one.
func timeRelease(b *testing.B, n int) time.Duration {
	b.Helper()
	h := newHarness(b, harnessOptions{nodes: 100, clock: clock.Real, baseDir: benchDir()})
	setupClaims(b, h, n)
	cfg := h.workerConfig()
	cfg.Parallelism = 64
	cfg.Logger = nil
	cfg.Nodes = newDirectNodes(b, h, n)
	w := h.startWorker(cfg, true)
	h.settle(w)
	allocs := make([]string, n)
	for i := range allocs {
		allocs[i] = fmt.Sprintf("a%d", i)
	}
	start := time.Now()
	h.release(allocs...)
	h.settle(w)
	wall := time.Since(start)
	h.requireNoPastClaims("after the release")
	if st := w.Stats(); st.Freed != uint64(n) || st.FailedAttempts != 0 {
		b.Fatalf("stats = %+v", st)
	}
	w.stop()
	return wall
}
