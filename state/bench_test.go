package state_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// benchStore is a store filled through Apply, the way a host fills it,
// with the log index kept alongside.
type benchStore struct {
	tb  testing.TB
	s   *state.MemStore
	idx uint64
}

func newBenchStore(tb testing.TB) *benchStore {
	return &benchStore{tb: tb, s: newMemStore(tb)}
}

func (b *benchStore) apply(cmd state.Command) {
	b.idx++
	if _, err := b.s.Apply(b.idx, cmd); err != nil {
		b.tb.Fatalf("apply %s: %v", cmd.Kind(), err)
	}
}

// batched applies cmds in batches of 1,000 commands, one index each: a
// memdb transaction per command would spend most of the setup on
// transaction overhead.
func (b *benchStore) batched(cmds []state.Command) {
	for len(cmds) > 0 {
		n := min(len(cmds), 1000)
		b.apply(state.Batch{Commands: cmds[:n]})
		cmds = cmds[n:]
	}
}

func benchCap() csi.Capability {
	return csi.Capability{AccessMode: csi.AccessModeMultiNodeMultiWriter, AttachmentMode: csi.AttachmentModeFileSystem}
}

// benchVolume is a volume shaped like a real registration: a name, an
// external ID, one capability, a parameter and a context entry.
func benchVolume(i int) csi.Volume {
	return csi.Volume{
		ID: fmt.Sprintf("vol-%06d", i), Namespace: "default", Name: fmt.Sprintf("data-%d", i),
		ExternalID: fmt.Sprintf("vol-0a1b2c3d%08x", i), PluginID: "bench",
		Capabilities: []csi.Capability{benchCap()},
		Parameters:   map[string]string{"type": "gp3"},
		Context:      map[string]string{"fsType": "ext4"},
	}
}

// cluster adds nodes n0..n(nodes-1), each with a healthy node instance of
// plugin "bench" (limit maxVolumes) and one workload allocation w<i>.
func (b *benchStore) cluster(nodes int, maxVolumes int64) {
	b.clusterWith(nodes, func(i int, ni *csi.NodeInfo) { ni.MaxVolumes = maxVolumes })
}

// clusterWith is cluster with node i's NodeInfo set by info.
func (b *benchStore) clusterWith(nodes int, info func(i int, ni *csi.NodeInfo)) {
	allocs := make([]csi.Allocation, 0, 2*nodes)
	for i := range nodes {
		node := fmt.Sprintf("n%d", i)
		allocs = append(allocs,
			csi.Allocation{ID: "bench-" + node, Namespace: "default", NodeID: node, JobID: "bench-nodes",
				Plugins: []csi.AllocPlugin{{PluginID: "bench", Type: csi.PluginTypeMonolith}}},
			csi.Allocation{ID: fmt.Sprintf("w%d", i), Namespace: "default", NodeID: node, JobID: "web"})
	}
	b.apply(state.UpsertAllocations{Allocations: allocs})
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var cmds []state.Command
	for i := range nodes {
		node := fmt.Sprintf("n%d", i)
		ni := &csi.NodeInfo{ID: "csi-" + node}
		info(i, ni)
		cmds = append(cmds, state.UpsertNodePlugins{NodeID: node, Plugins: []csi.PluginInfo{{
			PluginID: "bench", AllocationID: "bench-" + node, Type: csi.PluginTypeMonolith, Healthy: true,
			UpdateTime: at, Provider: "bench.csi.example.com", RequiresController: true,
			ControllerInfo: &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{PublishUnpublishVolume: true}},
			NodeInfo:       ni,
		}}})
	}
	b.batched(cmds)
}

func (b *benchStore) volumes(n int) {
	cmds := make([]state.Command, n)
	for i := range n {
		cmds[i] = state.RegisterVolume{Volume: benchVolume(i)}
	}
	b.batched(cmds)
}

// claimer claims random volumes of a store, each with a fresh claim that
// it removes again, so the store stays the same size.
type claimer struct {
	*benchStore
	volumes, nodes int
	rng            *rand.Rand
	times          []time.Duration
}

func (c *claimer) claimOnce() {
	v := c.rng.IntN(c.volumes)
	node := c.rng.IntN(c.nodes)
	id := fmt.Sprintf("vol-%06d", v)
	claim := csi.Claim{AllocationID: fmt.Sprintf("w%d", node), NodeID: fmt.Sprintf("n%d", node), Mode: csi.ClaimWrite,
		AccessMode: benchCap().AccessMode, AttachmentMode: benchCap().AttachmentMode}
	cmd := state.ClaimVolume{Namespace: "default", VolumeID: id, Claim: claim}
	c.idx++
	start := time.Now()
	_, err := c.s.Apply(c.idx, cmd)
	c.times = append(c.times, time.Since(start))
	if err != nil {
		c.tb.Fatalf("claim %s: %v", id, err)
	}
	c.apply(state.RemoveClaim{Namespace: "default", VolumeID: id, AllocationID: claim.AllocationID})
}

// median is the middle of the measured times, in ns. The median rather
// than the mean keeps a measurement that another process interrupted
// from skewing the figure on a shared machine.
func median(times []time.Duration) float64 {
	s := slices.Clone(times)
	slices.Sort(s)
	return float64(s[len(s)/2].Nanoseconds())
}

// BenchmarkClaim measures (median) one ClaimVolume (every rule checked, the
// node's MaxVolumes counted, the claim written) in stores of 1,000 and
// 100,000 registered volumes, alternating between them so both see the
// same machine conditions. claim-100k-vs-1k is the ratio; the goal is at
// most 1.5.
func BenchmarkClaim(b *testing.B) {
	const nodes = 100
	small, big := newBenchStore(b), newBenchStore(b)
	for _, s := range []*benchStore{small, big} {
		s.cluster(nodes, 64)
	}
	small.volumes(1_000)
	big.volumes(100_000)
	cs := &claimer{benchStore: small, volumes: 1_000, nodes: nodes, rng: rand.New(rand.NewPCG(1, 2))}
	cb := &claimer{benchStore: big, volumes: 100_000, nodes: nodes, rng: rand.New(rand.NewPCG(1, 2))}
	runtime.GC() // start measuring without the setup's garbage
	for b.Loop() {
		cs.claimOnce()
		cb.claimOnce()
	}
	small1k, big100k := median(cs.times), median(cb.times)
	b.ReportMetric(small1k, "ns/claim-1k")
	b.ReportMetric(big100k, "ns/claim-100k")
	b.ReportMetric(big100k/small1k, "claim-100k-vs-1k")
}

// BenchmarkVolumeBytes reports the heap held per registered, unclaimed
// volume in a store of 100,000 (bytes/volume). Its ns/op is one Volume
// read in that store.
func BenchmarkVolumeBytes(b *testing.B) {
	const n = 100_000
	s := newBenchStore(b)
	s.cluster(1, 0)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s.volumes(n)
	runtime.GC()
	runtime.ReadMemStats(&after)
	perVolume := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	rng := rand.New(rand.NewPCG(3, 4))
	for b.Loop() {
		if _, err := s.s.Volume("default", fmt.Sprintf("vol-%06d", rng.IntN(n))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(perVolume, "bytes/volume")
	runtime.KeepAlive(s)
}

// byNodeBench times one by-node read in stores of 100, 1,000 and 10,000
// nodes, alternating between them so all three see the same machine
// conditions, and reports the medians as ns/<metric>-100-nodes,
// ns/<metric>-1k-nodes and ns/<metric>-10k-nodes, and the largest
// store's ratios to the others as <metric>-10k-vs-1k and
// <metric>-10k-vs-100.
type byNodeBench struct {
	metric  string // the stem of the metrics' names
	call    string // the read's name, for a failure
	unit    string // what the read returns, for a failure
	perNode int    // how many the read returns in every store
	rng     *rand.Rand
	// build makes a store of the given number of nodes.
	build func(nodes int) *benchStore
	// read is the timed call on one node; it returns how many it read.
	read func(s *state.MemStore, node string) (int, error)
}

func (bn byNodeBench) run(b *testing.B) {
	sizes := []int{100, 1_000, 10_000}
	stores := make([]*benchStore, len(sizes))
	for i, n := range sizes {
		stores[i] = bn.build(n)
	}
	runtime.GC()
	times := make([][]time.Duration, len(sizes))
	for b.Loop() {
		for i, s := range stores {
			node := fmt.Sprintf("n%d", bn.rng.IntN(sizes[i]))
			start := time.Now()
			n, err := bn.read(s.s, node)
			times[i] = append(times[i], time.Since(start))
			if err != nil || n != bn.perNode {
				b.Fatalf("%s(%s) = %d %s, %v; want %d", bn.call, node, n, bn.unit, err, bn.perNode)
			}
		}
	}
	ns := make([]float64, len(sizes))
	for i := range sizes {
		ns[i] = median(times[i])
	}
	b.ReportMetric(ns[0], "ns/"+bn.metric+"-100-nodes")
	b.ReportMetric(ns[1], "ns/"+bn.metric+"-1k-nodes")
	b.ReportMetric(ns[2], "ns/"+bn.metric+"-10k-nodes")
	b.ReportMetric(ns[2]/ns[1], bn.metric+"-10k-vs-1k")
	b.ReportMetric(ns[2]/ns[0], bn.metric+"-10k-vs-100")
}

// BenchmarkVolumesByNode lists one node's volumes in stores of 100, 1,000
// and 10,000 nodes with 10 claimed volumes each, alternating between them.
// ns/bynode-10k-nodes is the median time in the largest store;
// bynode-10k-vs-100 and -vs-1k its ratios to the others (goal: at most
// 1.5 to the smallest). The
// lookup is an index seek, so the work per call is the same in every
// store; what grows is the share of cache misses, as a node's volumes lie
// further apart in a larger heap.
func BenchmarkVolumesByNode(b *testing.B) {
	const perNode = 10
	byNodeBench{
		metric: "bynode", call: "VolumesByNode", unit: "volumes", perNode: perNode,
		rng: rand.New(rand.NewPCG(5, 6)),
		build: func(nodes int) *benchStore {
			s := newBenchStore(b)
			s.cluster(nodes, 0)
			s.volumes(nodes * perNode)
			var claims []state.Command
			for i := range nodes * perNode {
				node := i % nodes
				claims = append(claims, state.ClaimVolume{Namespace: "default", VolumeID: fmt.Sprintf("vol-%06d", i), Claim: csi.Claim{
					AllocationID: fmt.Sprintf("w%d", node), NodeID: fmt.Sprintf("n%d", node), Mode: csi.ClaimRead,
					AccessMode: benchCap().AccessMode, AttachmentMode: benchCap().AttachmentMode,
				}})
			}
			s.batched(claims)
			return s
		},
		read: func(s *state.MemStore, node string) (int, error) {
			vols, err := s.VolumesByNode(node)
			return len(vols), err
		},
	}.run(b)
}

// BenchmarkPastClaimScan reads the release worker's queue in a store of
// 10,000 volumes that each hold a past claim, both ways, alternating:
// VolumesWithPastClaims copies every volume (ns/pastclaims-volumes-10k),
// PastClaimVolumeIDs walks the index only (ns/pastclaims-ids-10k).
// pastclaims-ids-vs-volumes is the ratio of the medians.
func BenchmarkPastClaimScan(b *testing.B) {
	const (
		nodes   = 100
		volumes = 10_000
	)
	s := newBenchStore(b)
	s.cluster(nodes, 0)
	s.volumes(volumes)
	claims := make([]state.Command, volumes)
	for i := range volumes {
		node := i % nodes
		claims[i] = state.ClaimVolume{Namespace: "default", VolumeID: fmt.Sprintf("vol-%06d", i), Claim: csi.Claim{
			AllocationID: fmt.Sprintf("w%d", node), NodeID: fmt.Sprintf("n%d", node), Mode: csi.ClaimRead,
			AccessMode: benchCap().AccessMode, AttachmentMode: benchCap().AttachmentMode,
		}}
	}
	s.batched(claims)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range nodes {
		s.apply(state.ReleaseClaims{AllocationID: fmt.Sprintf("w%d", i), ReleasedAt: at})
	}
	runtime.GC()
	var full, keys []time.Duration
	for b.Loop() {
		start := time.Now()
		vols, err := s.s.VolumesWithPastClaims()
		full = append(full, time.Since(start))
		if err != nil || len(vols) != volumes {
			b.Fatalf("VolumesWithPastClaims = %d volumes, %v; want %d", len(vols), err, volumes)
		}
		start = time.Now()
		stamps, err := s.s.PastClaimVolumeIDs()
		keys = append(keys, time.Since(start))
		if err != nil || len(stamps) != volumes {
			b.Fatalf("PastClaimVolumeIDs = %d volumes, %v; want %d", len(stamps), err, volumes)
		}
	}
	b.ReportMetric(median(full), "ns/pastclaims-volumes-10k")
	b.ReportMetric(median(keys), "ns/pastclaims-ids-10k")
	b.ReportMetric(median(keys)/median(full), "pastclaims-ids-vs-volumes")
}

// BenchmarkAllocationsByNode lists one node's allocations in stores of
// 100, 1,000 and 10,000 nodes with 10 allocations each, alternating
// between them. ns/allocsbynode-10k-nodes is the median time in the
// largest store; allocsbynode-10k-vs-100 and -vs-1k its ratios to the
// others. The read is an index seek and copies the node's 10
// allocations in every store; a copy of an allocation is small, so the
// cache misses of a larger heap weigh more here than in VolumesByNode,
// and the ratio to the smallest store sits above VolumesByNode's.
func BenchmarkAllocationsByNode(b *testing.B) {
	const perNode = 10
	byNodeBench{
		metric: "allocsbynode", call: "AllocationsByNode", unit: "allocations", perNode: perNode,
		rng: rand.New(rand.NewPCG(7, 8)),
		build: func(nodes int) *benchStore {
			s := newBenchStore(b)
			s.cluster(nodes, 0) // two allocations per node
			var cmds []state.Command
			for i := range nodes {
				node := fmt.Sprintf("n%d", i)
				allocs := make([]csi.Allocation, 0, perNode-2)
				for j := range perNode - 2 {
					allocs = append(allocs, csi.Allocation{ID: fmt.Sprintf("job-%s-%d", node, j), Namespace: "default", NodeID: node, JobID: "job"})
				}
				cmds = append(cmds, state.UpsertAllocations{Allocations: allocs})
			}
			s.batched(cmds)
			return s
		},
		read: func(s *state.MemStore, node string) (int, error) {
			allocs, err := s.AllocationsByNode(node)
			return len(allocs), err
		},
	}.run(b)
}

// lifecycleCommands are the commands one bare lifecycle of the plugintest
// harness applies to its fresh store, in order, as the csikit stack
// builds them: the node's fingerprint, the two allocations, the
// registration of the created volume, two claims each followed by the
// ControllerPublish result, the allocations turning terminal (which
// releases both claims), the release worker's node-detach checkpoints,
// its controller step for the node (the detach, written before
// ControllerUnpublish, then the attachment's removal with both frees in
// one batch), and the deregistration.
func lifecycleCommands() []state.Command {
	const (
		ns, node, plugin, vol = "plugintest", "plugintest-node", "plugintest", "vol-34236e4a732a"
	)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fs := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	allocs := func(terminal bool) []csi.Allocation {
		return []csi.Allocation{
			{ID: "alloc-1", Namespace: ns, NodeID: node, JobID: "plugintest", Terminal: terminal},
			{ID: "alloc-2", Namespace: ns, NodeID: node, JobID: "plugintest", Terminal: terminal},
		}
	}
	claim := func(alloc string, mode csi.ClaimMode) state.ClaimVolume {
		return state.ClaimVolume{Namespace: ns, VolumeID: vol, Claim: csi.Claim{
			AllocationID: alloc, NodeID: node, Mode: mode, AccessMode: fs.AccessMode, AttachmentMode: fs.AttachmentMode,
		}}
	}
	publish := func(alloc string) state.SetPublishContext {
		return state.SetPublishContext{Namespace: ns, VolumeID: vol, AllocationID: alloc,
			PublishContext: map[string]string{"devicePath": "/dev/fake-vol-2"}}
	}
	detached := func(alloc string) state.CheckpointClaim {
		return state.CheckpointClaim{Namespace: ns, VolumeID: vol, AllocationID: alloc, State: csi.ClaimNodeDetached}
	}
	return []state.Command{
		state.UpsertNodePlugins{NodeID: node, Plugins: []csi.PluginInfo{{
			PluginID: plugin, AllocationID: "plugin", Type: csi.PluginTypeMonolith, Healthy: true, UpdateTime: at,
			Provider: "csitest.csikit.io", ProviderVersion: "1.0.0", RequiresController: true,
			ControllerInfo: &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true}},
			NodeInfo:       &csi.NodeInfo{ID: "csitest-node", Capabilities: csi.NodeCapabilities{StageUnstageVolume: true}},
		}}},
		state.UpsertAllocations{Allocations: allocs(false)},
		state.RegisterVolume{Volume: csi.Volume{
			ID: vol, Namespace: ns, Name: "plugintest-34236e4a732a", ExternalID: "vol-2", PluginID: plugin,
			Capabilities: []csi.Capability{fs}, Context: map[string]string{"name": "plugintest-34236e4a732a"},
			Capacity: 1 << 30,
		}},
		claim("alloc-1", csi.ClaimWrite),
		publish("alloc-1"),
		claim("alloc-2", csi.ClaimRead),
		publish("alloc-2"),
		state.UpsertAllocations{Allocations: allocs(true), ReleasedAt: at.Add(time.Second)},
		detached("alloc-1"),
		detached("alloc-2"),
		state.DetachVolume{Namespace: ns, VolumeID: vol, NodeID: node},
		state.Batch{Commands: []state.Command{
			state.RemoveAttachment{Namespace: ns, VolumeID: vol, NodeID: node},
			state.FreeClaim{Namespace: ns, VolumeID: vol, AllocationID: "alloc-1"},
			state.FreeClaim{Namespace: ns, VolumeID: vol, AllocationID: "alloc-2"},
		}},
		state.DeregisterVolume{Namespace: ns, VolumeID: vol},
	}
}

// BenchmarkApply_Lifecycle applies the commands of one bare plugintest
// lifecycle (lifecycleCommands) to a fresh store, as each lifecycle of
// plugintest's BenchmarkLifecycle does; building the store is not
// timed. ns/lifecycle is the median time of the whole sequence,
// ns/command that divided by the number of commands; allocs/op and B/op
// are per lifecycle.
func BenchmarkApply_Lifecycle(b *testing.B) {
	cmds := lifecycleCommands()
	var times []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		s := newMemStore(b)
		b.StartTimer()
		start := time.Now()
		for i, cmd := range cmds {
			if _, err := s.Apply(uint64(i+1), cmd); err != nil {
				b.Fatalf("apply %s: %v", cmd.Kind(), err)
			}
		}
		times = append(times, time.Since(start))
	}
	b.ReportMetric(median(times), "ns/lifecycle")
	b.ReportMetric(median(times)/float64(len(cmds)), "ns/command")
}

// BenchmarkSharedVolume measures (median) a write that changes one claim
// of a volume that n allocations on n nodes share, for 10 and 1,000
// claims, alternating between the two stores: a publish context set,
// then cleared. ns/shared-1k-write is the time at 1,000 claims and
// shared-1k-vs-10 its ratio to 10. A write rewrites the volume, claims
// and all, so the time grows with the claims; what it does not do is
// write the volume's lookup keys again (tRefs keeps each key in a row
// of its own and writes only those that change).
func BenchmarkSharedVolume(b *testing.B) {
	type store struct {
		*benchStore
		n     int
		times []time.Duration
	}
	stores := []*store{}
	for _, n := range []int{10, 1000} {
		s := &store{benchStore: newBenchStore(b), n: n}
		s.cluster(n, 0)
		s.volumes(1)
		claims := make([]state.Command, n)
		for i := range n {
			claims[i] = state.ClaimVolume{Namespace: "default", VolumeID: "vol-000000", Claim: csi.Claim{
				AllocationID: fmt.Sprintf("w%d", i), NodeID: fmt.Sprintf("n%d", i), Mode: csi.ClaimRead,
				AccessMode: benchCap().AccessMode, AttachmentMode: benchCap().AttachmentMode,
			}}
		}
		s.batched(claims)
		stores = append(stores, s)
	}
	contexts := []map[string]string{{"devicePath": "/dev/xvdf"}, nil}
	i := 0
	for b.Loop() {
		for _, s := range stores {
			cmd := state.SetPublishContext{Namespace: "default", VolumeID: "vol-000000", AllocationID: "w0", PublishContext: contexts[i%2]}
			s.idx++
			start := time.Now()
			_, err := s.s.Apply(s.idx, cmd)
			s.times = append(s.times, time.Since(start))
			if err != nil {
				b.Fatalf("set publish context: %v", err)
			}
		}
		i++
	}
	b.ReportMetric(median(stores[1].times), "ns/shared-1k-write")
	b.ReportMetric(median(stores[0].times), "ns/shared-10-write")
	b.ReportMetric(median(stores[1].times)/median(stores[0].times), "shared-1k-vs-10")
}
