package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// opKind is one kind of decision of the workload or the fault schedule.
type opKind int

const (
	opClaim         opKind = iota // a new allocation claims a volume and mounts it
	opStop                        // an allocation stops: its claims are released
	opFail                        // a plugin fails the next calls of a method
	opPartition                   // a node's transport goes down or comes back
	opRestart                     // a node agent crashes and restarts from its disk
	opCrashMount                  // a node agent crashes with a NodePublish in flight
	opLeader                      // the leader hands leadership to another server
	opDetachRace                  // a claim lands on a node its volume is being detached from
	opUnpublishRace               // the node reports an unmount while the claim still attaches
)

var opNames = [...]string{"claim", "stop", "fail", "partition", "restart", "crash-mount", "leader",
	"detach-race", "unpublish-race"}

// decision is one drawn decision; its String is a line of the trace.
type decision struct {
	kind   opKind
	alloc  string
	vol    int
	node   string
	mode   csi.ClaimMode
	plugin string // "ctl" or a node ID
	method string
	code   codes.Code
	times  int
	old    string // detach-race: the allocation that stops first
	snap   string // snapshot and restore: the snapshot's ID
}

func (d decision) String() string {
	switch d.kind {
	case opClaim, opCrashMount, opUnpublishRace:
		return fmt.Sprintf("%s %s v%d %s %s", opNames[d.kind], d.alloc, d.vol, d.node, d.mode)
	case opDetachRace:
		return fmt.Sprintf("detach-race %s then %s v%d %s %s", d.old, d.alloc, d.vol, d.node, d.mode)
	case opStop:
		return fmt.Sprintf("stop %s", d.alloc)
	case opFail:
		return fmt.Sprintf("fail %s %s %s x%d", d.plugin, d.method, d.code, d.times)
	case opPartition, opRestart:
		return fmt.Sprintf("%s %s", opNames[d.kind], d.node)
	}
	return opNames[d.kind]
}

// step is the decisions of one step: faults first, one at a time, then
// the workload operations, run concurrently; then the clock advances.
type step struct {
	faults  []decision
	ops     []decision
	extras  []decision // from the seed's second stream (extra_test.go)
	rush    []decision // from the seed's third stream (rush_test.go)
	life    []decision // from the seed's fourth stream (life_test.go)
	health  []decision // from the seed's fifth stream (health_test.go)
	advance time.Duration
}

// simVolume is one volume of the workload, with the access mode every
// claim of it uses.
type simVolume struct {
	id   string
	mode csi.AccessMode
}

var simModes = []csi.AccessMode{
	csi.AccessModeSingleNodeWriter, csi.AccessModeSingleNodeSingleWriter,
	csi.AccessModeMultiNodeSingleWriter, csi.AccessModeMultiNodeMultiWriter,
	csi.AccessModeMultiNodeReaderOnly,
}

var faultCodes = []codes.Code{
	codes.Unavailable, codes.Aborted, codes.ResourceExhausted, // Retryable
	codes.DeadlineExceeded, // Uncertain
	codes.Internal,         // Final
}

var nodeMethods = []string{csitest.MethodNodeStageVolume, csitest.MethodNodePublishVolume,
	csitest.MethodNodeUnpublishVolume, csitest.MethodNodeUnstageVolume}
var ctlMethods = []string{csitest.MethodControllerPublishVolume, csitest.MethodControllerUnpublishVolume}

// plan is a whole run's decisions, drawn from the seed alone.
type plan struct {
	seed    uint64
	volumes []simVolume
	steps   []step
}

const numVolumes = 3

// newPlan draws the decisions of seed for n steps. It never looks at
// what an operation returns, so the same seed gives the same plan.
func newPlan(seed uint64, n int) *plan {
	rng := rand.New(rand.NewPCG(seed, 0x51a))
	rng2 := rand.New(rand.NewPCG(seed, 0x52b))
	rng3 := rand.New(rand.NewPCG(seed, 0x53c))
	rng4 := rand.New(rand.NewPCG(seed, 0x54d))
	rng5 := rand.New(rand.NewPCG(seed, healthStream))
	p := &plan{seed: seed}
	for i := range numVolumes {
		p.volumes = append(p.volumes, simVolume{id: fmt.Sprintf("v%d", i), mode: simModes[rng.IntN(len(simModes))]})
	}
	// The unpublish race has a volume of its own, shared by any number
	// of nodes, so that its claim is the first on its node and calls
	// ControllerPublish. It draws nothing from rng.
	p.volumes = append(p.volumes, simVolume{id: "race", mode: csi.AccessModeMultiNodeMultiWriter}, rushVolumeOf(rng3),
		lifeVolumeOf(rng4))
	lp := lifePlan{killer: rng4.IntN(4) == 0}
	var running []string
	started := map[string]decision{}
	next := 0
	newAlloc := func(kind opKind) decision {
		next++
		d := decision{kind: kind, alloc: fmt.Sprintf("a%d", next), vol: rng.IntN(numVolumes),
			node: simNodes[rng.IntN(len(simNodes))], mode: csi.ClaimWrite}
		if p.volumes[d.vol].mode.ReadOnly() || rng.IntN(3) == 0 {
			d.mode = csi.ClaimRead
		}
		running = append(running, d.alloc)
		started[d.alloc] = d
		return d
	}
	for range n {
		var s step
		if rng.IntN(3) == 0 {
			d := drawFault(rng, newAlloc)
			if d.kind == opDetachRace {
				// Two new allocations on one volume and node: the first
				// claims, mounts and stops; the second claims after it.
				second := newAlloc(opDetachRace)
				running = running[:len(running)-2]
				d.old, d.alloc, d.mode = d.alloc, second.alloc, second.mode
			}
			s.faults = append(s.faults, d)
		}
		for range 1 + rng.IntN(3) {
			if len(running) > 0 && rng.IntN(5) < 2 {
				i := rng.IntN(len(running))
				s.ops = append(s.ops, decision{kind: opStop, alloc: running[i]})
				running = append(running[:i], running[i+1:]...)
				continue
			}
			s.ops = append(s.ops, newAlloc(opClaim))
		}
		s.advance = time.Duration(rng.IntN(20)) * time.Second
		s.extras = drawExtras(rng2, len(p.steps))
		s.rush = drawRush(rng3, len(p.steps))
		s.life = lp.draw(rng4, len(p.steps))
		s.health = drawHealth(rng5)
		p.steps = append(p.steps, s)
	}
	return p
}

func drawFault(rng *rand.Rand, newAlloc func(opKind) decision) decision {
	switch k := rng.IntN(11); {
	case k < 4:
		d := decision{kind: opFail, code: faultCodes[rng.IntN(len(faultCodes))], times: 1 + rng.IntN(3)}
		if rng.IntN(3) == 0 {
			d.plugin, d.method = "ctl", ctlMethods[rng.IntN(len(ctlMethods))]
		} else {
			d.plugin, d.method = simNodes[rng.IntN(len(simNodes))], nodeMethods[rng.IntN(len(nodeMethods))]
		}
		return d
	case k < 6:
		return decision{kind: opPartition, node: simNodes[rng.IntN(len(simNodes))]}
	case k < 7:
		return decision{kind: opRestart, node: simNodes[rng.IntN(len(simNodes))]}
	case k < 8:
		return newAlloc(opCrashMount)
	case k < 9:
		return newAlloc(opDetachRace)
	case k < 10:
		d := newAlloc(opUnpublishRace)
		d.vol = numVolumes // the race volume
		return d
	default:
		return decision{kind: opLeader}
	}
}

// trace is the plan's decisions, one a line.
func (p *plan) trace() string {
	var b strings.Builder
	for _, v := range p.volumes {
		fmt.Fprintf(&b, "volume %s %s\n", v.id, v.mode)
	}
	for i, s := range p.steps {
		for _, d := range append(append([]decision(nil), s.faults...), s.ops...) {
			fmt.Fprintf(&b, "%d %s\n", i, d)
		}
		for _, d := range s.extras {
			fmt.Fprintf(&b, "%d %s\n", i, extraString(d))
		}
		for _, d := range s.rush {
			fmt.Fprintf(&b, "%d %s\n", i, rushString(d))
		}
		for _, d := range s.life {
			fmt.Fprintf(&b, "%d %s\n", i, lifeString(d))
		}
		for _, d := range s.health {
			fmt.Fprintf(&b, "%d %s\n", i, healthString(d))
		}
		fmt.Fprintf(&b, "%d advance %s\n", i, s.advance)
	}
	return b.String()
}

func (p *plan) traceHash() uint64 {
	h := fnv.New64a()
	h.Write([]byte(p.trace()))
	return h.Sum64()
}

// run is one run of a plan in a world.
type run struct {
	w      *world
	p      *plan
	mu     sync.Mutex
	allocs map[string]decision // every allocation the plan started
	errs   map[string]int      // refusals and failures by operation, for the log
	claims []claimSpan         // every claim attempt, for invNoPublishAfterRelease
	life   lifeState
	health healthState
}

func (r *run) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), waitLimit)
}

func (r *run) noteErr(op string, err error) {
	if err == nil {
		return
	}
	r.mu.Lock()
	r.errs[op]++
	r.mu.Unlock()
}

// registerVolumes registers the plan's volumes with the controller.
func (r *run) registerVolumes() {
	for _, v := range r.p.volumes {
		must(r.w.t, r.registerVolume(v))
	}
}

// registerVolume adds v to the controller plugin and registers it.
func (r *run) registerVolume(v simVolume) error {
	ctx, cancel := r.ctx()
	defer cancel()
	r.w.ctl.AddVolume("ext-"+v.id, 1<<30, nil)
	return r.retryWrite(nil, func(leader *replica, retry bool) error {
		_, err := leader.server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: csi.Volume{
			ID: v.id, Namespace: namespace, PluginID: simPlugin, ExternalID: "ext-" + v.id,
			Capabilities: []csi.Capability{{AccessMode: v.mode, AttachmentMode: csi.AttachmentModeFileSystem}},
		}})
		if retry && errors.Is(err, csi.ErrVolumeExists) {
			return nil // an earlier, uncertain, attempt landed
		}
		return err
	})
}

// maxWriteTries bounds retryWrite.
const maxWriteTries = 10

// retryWrite makes a write as a host does: write, on the leader, until
// it succeeds, fails Final or as done says (nil: never), at most
// maxWriteTries times. Each try first waits for a leader: a leader
// change refuses a write as Retryable, and a retry before the next
// leader would only be refused again. retry is false on the first try.
func (r *run) retryWrite(done func(error) bool, write func(leader *replica, retry bool) error) error {
	var err error
	for try := range maxWriteTries {
		leader, lerr := r.w.tryLeader()
		if lerr != nil {
			return lerr
		}
		err = write(leader, try > 0)
		if err == nil || csi.Classify(err) == csi.ClassFinal || done != nil && done(err) {
			return err
		}
	}
	return err
}

// doStep runs one step's decisions.
func (r *run) doStep(s step) {
	for _, d := range s.faults {
		r.fault(d)
	}
	var wg sync.WaitGroup
	for _, d := range s.ops {
		wg.Go(func() {
			if d.kind == opStop {
				_ = r.stop(d.alloc) // refused or lost: the allocation runs on
			} else {
				_ = r.claimAndMount(d, nil)
			}
		})
	}
	wg.Wait()
	r.doExtras(s.extras)
	r.doRush(s.rush)
	r.doLife(s.life)
	r.doHealth(s.health)
	r.w.clock.Advance(s.advance)
	r.w.settle()
}

// claim writes the allocation and claims its volume through the
// leader's Server.
func (r *run) claim(ctx context.Context, d decision) (*rpcshim.VolumeClaimResponse, error) {
	r.mu.Lock()
	r.allocs[d.alloc] = d
	r.mu.Unlock()
	_, err := r.w.apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{{ID: d.alloc, Namespace: namespace, NodeID: d.node}}})
	if err != nil {
		return nil, err
	}
	v := r.p.volumes[d.vol]
	defer r.noteClaim(v.id, d.node, len(r.w.ctl.Calls()))
	leader, err := r.w.tryLeader()
	if err != nil {
		r.w.t.Errorf("seed %d: %s: %v", r.p.seed, d, err)
		return nil, err
	}
	return leader.server.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: namespace, VolumeID: v.id, Claim: csi.Claim{
		AllocationID: d.alloc, NodeID: d.node, Mode: d.mode, AccessMode: v.mode, AttachmentMode: csi.AttachmentModeFileSystem}})
}

// claimAndMount claims, then mounts on the node as its agent would.
// mountCtx, when set, is the mount's context (a crash cancels it).
func (r *run) claimAndMount(d decision, mountCtx context.Context) error {
	ctx, cancel := r.ctx()
	defer cancel()
	resp, err := r.claim(ctx, d)
	r.noteErr("claim", err)
	if err != nil {
		return err
	}
	if mountCtx == nil {
		mountCtx = ctx
	}
	return r.mount(mountCtx, d, resp)
}

// mount mounts a claim's volume on its node as the agent would.
func (r *run) mount(ctx context.Context, d decision, resp *rpcshim.VolumeClaimResponse) error {
	req, err := mounter.NewMountRequest(resp.Volume, resp.Claim)
	if err != nil {
		r.w.t.Errorf("seed %d: %s: the claim's reply makes no mount request: %v", r.p.seed, d, err)
		return err
	}
	_, err = r.w.nodes[d.node].mnt().MountVolume(ctx, req)
	r.noteErr("mount", err)
	return err
}

// stop reports the allocation terminal.
func (r *run) stop(alloc string) error { return r.stopThrough(r.w.apply, alloc) }

// stopThrough is stop with the write sent through apply.
func (r *run) stopThrough(apply func(context.Context, state.Command) (state.Result, error), alloc string) error {
	r.mu.Lock()
	d, ok := r.allocs[alloc]
	r.mu.Unlock()
	if !ok {
		return nil
	}
	ctx, cancel := r.ctx()
	defer cancel()
	_, err := apply(ctx, state.UpsertAllocations{ReleasedAt: r.w.clock.Now(), Allocations: []csi.Allocation{
		{ID: alloc, Namespace: namespace, NodeID: d.node, Terminal: true}}})
	r.noteErr("stop", err)
	return err
}
