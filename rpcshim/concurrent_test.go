package rpcshim_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// TestServer_Claim_ConcurrentRelease runs claims, releases and the claim
// release worker at once on one multi-node volume and two single-writer
// volumes across three nodes, under several plugin shapes, and checks
// the attachment records against the claims while it runs, at a
// quiescent checkpoint midway and at the end (see concRun.check).
//
// Each shape runs for 1 s of wall time; CSIKIT_SOAK=1 runs each for
// 30 s. The seed (logged) drives every random choice but not goroutine
// scheduling; RPCSHIM_SEED=n replays it as far as scheduling allows.
func TestServer_Claim_ConcurrentRelease(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RPCSHIM_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("RPCSHIM_SEED=%q: %v", s, err)
		}
	}
	run := time.Second
	if os.Getenv("CSIKIT_SOAK") != "" {
		run = 30 * time.Second
	}
	t.Logf("seed %d (replay with RPCSHIM_SEED=%d), %v per shape", seed, seed, run)

	noPublish := allControllerCaps
	noPublish.PublishUnpublishVolume = false
	for _, sh := range []concShape{
		{name: "publish context set", caps: allControllerCaps, context: csitest.ContextSet},
		{name: "publish context empty", caps: allControllerCaps, context: csitest.ContextEmpty},
		{name: "no controller publish", caps: noPublish},
		{name: "slow controller failing publishes", caps: allControllerCaps, latency: time.Millisecond, faults: true},
	} {
		t.Run(sh.name, func(t *testing.T) {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("replay with RPCSHIM_SEED=%d", seed)
				}
			})
			newConcRun(t, sh, seed).run(run)
		})
	}
}

// concShape is how the controller plugin behaves.
type concShape struct {
	name    string
	caps    csi.ControllerCapabilities
	context csitest.ContextReply
	// latency delays every ControllerPublish and ControllerUnpublish,
	// widening the windows in which claims meet releases.
	latency time.Duration
	// faults fails about one ControllerPublishVolume in eight, with a
	// Retryable, Uncertain or Final code.
	faults bool
}

func (sh concShape) publishes() bool { return sh.caps.PublishUnpublishVolume }

const (
	concWorkers = 8
	// concMaxHeld is how many won claims a goroutine holds at most
	// before it stops one.
	concMaxHeld = 3
	// concFault marks the failures the faulty shape injects, so that a
	// Final error they cause is told from one csikit made up.
	concFault = "concurrent test: injected fault"
	// concMaxProblems bounds the invariant failures reported per shape.
	concMaxProblems = 10
)

var (
	concNodes = []string{"n1", "n2", "n3"}
	snswFS    = csi.Capability{AccessMode: csi.AccessModeSingleNodeSingleWriter, AttachmentMode: csi.AttachmentModeFileSystem}
)

type concVolume struct {
	id, external string
	capability   csi.Capability
}

// concClaim is a claim a goroutine won and has not stopped yet.
type concClaim struct {
	vol   concVolume
	alloc string
	node  string
	mode  csi.ClaimMode
}

// concRun is one shape's run: the server environment, a release worker,
// and what the goroutines share.
type concRun struct {
	t    *testing.T
	e    *srvEnv
	w    *claimgc.Worker
	sh   concShape
	seed uint64
	vols []concVolume

	// pause is held for reading by each goroutine's step and for
	// writing by the midway checkpoint, which thereby waits for the
	// steps in flight and holds off new ones.
	pause sync.RWMutex

	mu       sync.Mutex
	won      map[string]concClaim // by allocation, from the won Claim until its stop is written
	counts   map[string]int
	firstErr map[string]string // the first error message of each count that is not a win
	problems int
}

func newConcRun(t *testing.T, sh concShape, seed uint64) *concRun {
	e := newSrvEnv(t, sh.caps)
	// newSrvEnv's fake has the default shape; serve the controller from
	// one with this shape instead (and a bounded call log, for soaks).
	_, info, err := e.plugins.ControllerPlugin(rtPlugin)
	must(t, err)
	e.ctl = csitest.Start(t, csitest.Config{
		Type: csi.PluginTypeController, Name: "fake.csikit.io", Controller: sh.caps,
		PublishContext: sh.context, MaxCalls: 1000,
	})
	e.plugins.set(rtPlugin, newPluginClient(t, e.ctl), info)
	// n1 runs a node instance next to the controller, so that claims
	// can go to all three nodes.
	n1 := rtNodeInstance("n1")
	n1.AllocationID = "node-n1"
	e.apply(state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{*info, n1}})

	r := &concRun{
		t: t, e: e, sh: sh, seed: seed,
		vols: []concVolume{
			{"vol-mnmw", "ext-mnmw", mnmwFS},
			{"vol-snw", "ext-snw", snwFS},
			{"vol-snsw", "ext-snsw", snswFS},
		},
		won:      make(map[string]concClaim),
		counts:   make(map[string]int),
		firstErr: make(map[string]string),
	}
	for _, v := range r.vols {
		e.register(v.id, v.external, v.capability)
	}
	if sh.latency > 0 {
		e.ctl.SetLatency(csitest.MethodControllerPublishVolume, sh.latency)
		e.ctl.SetLatency(csitest.MethodControllerUnpublishVolume, sh.latency)
	}
	if sh.faults {
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(seed, 0xfa))
		faultCodes := []codes.Code{codes.Unavailable, codes.DeadlineExceeded, codes.Internal}
		e.ctl.SetHook(csitest.MethodControllerPublishVolume, func(context.Context, string, any) error {
			mu.Lock()
			defer mu.Unlock()
			if rng.IntN(8) != 0 {
				return nil
			}
			code := faultCodes[rng.IntN(len(faultCodes))]
			r.count("publish fault " + code.String())
			return status.Error(code, concFault)
		})
	}
	r.w = runWorker(t, e)
	return r
}

func (r *concRun) count(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[key]++
}

func (r *concRun) countErr(key string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[key]++
	if _, ok := r.firstErr[key]; !ok {
		r.firstErr[key] = err.Error()
	}
}

// problem reports a broken invariant, up to concMaxProblems per run.
func (r *concRun) problem(format string, args ...any) {
	r.mu.Lock()
	r.problems++
	n := r.problems
	r.mu.Unlock()
	if n <= concMaxProblems {
		r.t.Errorf("seed %d: "+format, append([]any{r.seed}, args...)...)
	}
}

func (r *concRun) wonClaims() map[string]concClaim {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.won)
}

// run runs the goroutines and the checker for d, with a quiescent
// checkpoint halfway, then stops every allocation and checks the end
// state.
func (r *concRun) run(d time.Duration) {
	t, e := r.t, r.e
	checkCtx, stopChecker := context.WithCancel(context.Background())
	checked := make(chan int, 1)
	go func() { checked <- r.checker(checkCtx) }()
	samples := -1
	defer func() {
		// Also when waitVolume stops the test: the checker reports
		// through t, so it must be done before the test is.
		stopChecker()
		if samples < 0 {
			<-checked
		}
	}()

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for g := range concWorkers {
		wg.Go(func() { r.loop(ctx, g) })
	}
	<-time.After(d / 2)
	r.checkpoint()
	<-time.After(d / 2)
	stop()
	wg.Wait() // each goroutine has stopped what it held

	for _, v := range r.vols {
		waitVolume(t, e, v.id, func(v *csi.Volume) bool { return !v.InUse() })
	}
	stopChecker()
	samples = <-checked
	r.check("at the end")
	if got := e.ctl.Attachments(); len(got) != 0 {
		r.problem("at the end the plugin still has attachments %v; the records have none", got)
	}
	for _, v := range r.vols {
		if ps, ok := e.ctl.Volume(v.external); !ok || len(ps.AttachedNodes()) != 0 {
			r.problem("at the end the plugin's volume %s (found %v) is attached to %v", v.external, ok, ps.AttachedNodes())
		}
	}
	e.ctl.RequireNoViolations(t)

	st := r.w.Stats()
	r.mu.Lock()
	defer r.mu.Unlock()
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(r.counts)) {
		line := fmt.Sprintf("  %-44s %d", k, r.counts[k])
		if msg, ok := r.firstErr[k]; ok {
			line += "  (first: " + msg + ")"
		}
		lines = append(lines, line)
	}
	t.Logf("%s: %d checker samples; worker freed %d claims (%d node steps, %d controller detaches, %d failed attempts); plugin saw %d ControllerPublish, %d ControllerUnpublish\n%s",
		r.sh.name, samples, st.Freed, st.NodeDetached, st.ControllerDetached, st.FailedAttempts,
		e.ctl.CallCount(csitest.MethodControllerPublishVolume), e.ctl.CallCount(csitest.MethodControllerUnpublishVolume),
		strings.Join(lines, "\n"))
}

// loop is one goroutine: it claims and stops until ctx ends, then
// stops every claim it still holds.
func (r *concRun) loop(ctx context.Context, g int) {
	rng := rand.New(rand.NewPCG(r.seed, uint64(g)))
	var held []concClaim
	for n := 0; ctx.Err() == nil; n++ {
		r.pause.RLock()
		held = r.step(rng, fmt.Sprintf("g%d-a%d", g, n), held)
		r.pause.RUnlock()
	}
	for _, c := range held {
		r.stopWon(rng, c)
	}
}

// step does one thing: stop a held claim, repeat one, or place a new
// allocation and claim a volume for it.
func (r *concRun) step(rng *rand.Rand, alloc string, held []concClaim) []concClaim {
	if len(held) > 0 && (len(held) >= concMaxHeld || rng.IntN(3) == 0) {
		i := rng.IntN(len(held))
		r.stopWon(rng, held[i])
		return slices.Delete(held, i, i+1)
	}
	if len(held) > 0 && rng.IntN(8) == 0 {
		// A repeat of a won claim is idempotent: it must succeed.
		c := held[rng.IntN(len(held))]
		resp, err := r.e.claim(c.vol.id, c.alloc, c.node, c.mode, c.vol.capability)
		if err != nil {
			r.problem("repeated claim of %s by %s on %s failed: %v", c.vol.id, c.alloc, c.node, err)
			return held
		}
		r.count("repeated claims")
		r.checkWon(c, resp)
		return held
	}

	c := concClaim{vol: r.vols[rng.IntN(len(r.vols))], alloc: alloc, node: concNodes[rng.IntN(len(concNodes))], mode: csi.ClaimWrite}
	if rng.IntN(2) == 0 {
		c.mode = csi.ClaimRead
	}
	ctx := context.Background()
	if _, err := r.e.applier.Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{
		{ID: alloc, Namespace: "default", NodeID: c.node},
	}}); err != nil {
		r.problem("place allocation %s: %v", alloc, err)
		return held
	}
	resp, err := r.e.claim(c.vol.id, alloc, c.node, c.mode, c.vol.capability)
	if err != nil {
		r.refused(c, err)
		// Whatever the claim left behind (a claim kept after a failed
		// publish) is released with the allocation.
		r.stopAlloc(c, false)
		return held
	}
	r.count("claims won")
	r.checkWon(c, resp)
	r.mu.Lock()
	r.won[alloc] = c
	r.mu.Unlock()
	if rng.IntN(3) == 0 {
		r.stopWon(rng, c)
		return held
	}
	return append(held, c)
}

// refused counts a failed claim, and reports it unless it is a
// legitimate refusal, Retryable, or a Final error the faulty shape
// injected.
func (r *concRun) refused(c concClaim, err error) {
	for _, s := range []error{csi.ErrMaxClaims, csi.ErrAttachedElsewhere, csi.ErrVolumeInUse} {
		if errors.Is(err, s) {
			r.count("refused " + csi.SentinelOf(s).Code())
			return
		}
	}
	kind := "other"
	if s := csi.SentinelOf(err); s != nil {
		kind = s.Code()
	}
	switch class := csi.Classify(err); {
	case class != csi.ClassFinal:
		r.countErr(fmt.Sprintf("failed %s (%s)", kind, class), err)
	case r.sh.faults && strings.Contains(err.Error(), concFault):
		r.countErr(fmt.Sprintf("failed %s (final, injected)", kind), err)
	default:
		r.problem("claim of %s by %s on %s: %v (class %s), not a legitimate refusal", c.vol.id, c.alloc, c.node, err, class)
	}
}

// checkWon checks the response of a won claim.
func (r *concRun) checkWon(c concClaim, resp *rpcshim.VolumeClaimResponse) {
	a := resp.Attachment
	switch {
	case resp.Claim == nil || resp.Claim.AllocationID != c.alloc || resp.Claim.NodeID != c.node:
		r.problem("claim of %s by %s on %s won with claim %+v", c.vol.id, c.alloc, c.node, resp.Claim)
	case a == nil || a.State != csi.AttachmentAttached || a.NodeID != c.node || a.ExternalNodeID != "csi-"+c.node:
		r.problem("claim of %s by %s on %s won with attachment %+v, want attached to csi-%s", c.vol.id, c.alloc, c.node, a, c.node)
	default:
		want := map[string]string{"devicePath": "/dev/fake-" + c.vol.external}
		if !r.sh.publishes() || r.sh.context != csitest.ContextSet {
			want = nil
		}
		if !maps.Equal(a.PublishContext, want) {
			r.problem("claim of %s by %s on %s won with publish context %v, want %v", c.vol.id, c.alloc, c.node, a.PublishContext, want)
		}
	}
}

// stopWon stops a won claim's allocation as a host reports it: terminal
// only, terminal with the node step done (a node agent that unmounted
// it), or the node's unmount report (Server.Unpublish) first.
func (r *concRun) stopWon(rng *rand.Rand, c concClaim) {
	r.mu.Lock()
	delete(r.won, c.alloc)
	r.mu.Unlock()
	switch rng.IntN(3) {
	case 0:
		r.count("released: terminal")
		r.stopAlloc(c, false)
	case 1:
		r.count("released: terminal, node step reported")
		r.stopAlloc(c, true)
	default:
		r.count("released: Unpublish, then terminal")
		_, err := r.e.server.Unpublish(context.Background(), &rpcshim.VolumeUnpublishRequest{
			Namespace: "default", VolumeID: c.vol.id, AllocationID: c.alloc, NodeID: c.node, NodeDetached: true,
		})
		if err != nil {
			r.problem("Unpublish of %s by %s on %s: %v", c.vol.id, c.alloc, c.node, err)
		}
		r.stopAlloc(c, false)
	}
}

// stopAlloc writes c's allocation terminal, with its claim checkpointed
// NodeDetached in the same batch when nodeDone.
func (r *concRun) stopAlloc(c concClaim, nodeDone bool) {
	var cmd state.Command = state.UpsertAllocations{ReleasedAt: rtTime, Allocations: []csi.Allocation{
		{ID: c.alloc, Namespace: "default", NodeID: c.node, Terminal: true},
	}}
	if nodeDone {
		cmd = state.Batch{Commands: []state.Command{cmd, state.CheckpointClaim{
			Namespace: "default", VolumeID: c.vol.id, AllocationID: c.alloc, State: csi.ClaimNodeDetached,
		}}}
	}
	if _, err := r.e.applier.Apply(context.Background(), cmd); err != nil {
		r.problem("stop allocation %s (node step done %v): %v", c.alloc, nodeDone, err)
	}
}

// checker checks the store on every change it sees until ctx ends, and
// returns how many states it checked.
func (r *concRun) checker(ctx context.Context) int {
	n := 0
	for {
		idx, err := r.e.store.Index(state.TableVolumes)
		if err != nil {
			r.problem("checker: %v", err)
			return n
		}
		r.check("while running")
		n++
		if _, err := r.e.store.Wait(ctx, state.TableVolumes, idx); err != nil {
			return n
		}
	}
}

// check reads every volume in one store snapshot and checks that:
//   - every live claim has an attachment on its node, Attaching or
//     Attached, and Attached once its Claim call has returned (a claim
//     in the won set both before and after the read was won before it
//     and stopped after it);
//   - every attachment has a claim on its node (live or past) or is
//     Detaching;
//   - a single-node volume has live claims and attachments on one node
//     at most, and its access mode's claim limits hold.
//
// It returns the volumes it read.
func (r *concRun) check(when string) []*csi.Volume {
	before := r.wonClaims()
	vols, err := r.e.store.Volumes("default", "")
	if err != nil {
		r.problem("%s: read the volumes: %v", when, err)
		return nil
	}
	after := r.wonClaims()
	for _, v := range vols {
		nodes := make(map[string]bool)
		writers := 0
		for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims} {
			for id, c := range m {
				nodes[c.NodeID] = true
				if c.Mode == csi.ClaimWrite {
					writers++
				}
				_, won := before[id]
				if _, still := after[id]; !still {
					won = false
				}
				a := v.Attachments[c.NodeID]
				switch {
				case a == nil:
					r.problem("%s: volume %s: live claim of %s on node %s has no attachment (attachments %s)", when, v.ID, id, c.NodeID, attachmentsString(v))
				case a.State == csi.AttachmentDetaching:
					r.problem("%s: volume %s: live claim of %s on node %s, whose attachment is detaching", when, v.ID, id, c.NodeID)
				case won && a.State != csi.AttachmentAttached:
					r.problem("%s: volume %s: won claim of %s on node %s, whose attachment is %s", when, v.ID, id, c.NodeID, a.State)
				}
			}
		}
		for node, a := range v.Attachments {
			nodes[node] = true
			if a.NodeID != node || !a.State.Valid() {
				r.problem("%s: volume %s: attachment under node %s is %+v", when, v.ID, node, a)
			}
			if a.State != csi.AttachmentDetaching && !hasClaimOn(v, node) {
				r.problem("%s: volume %s: attachment to node %s is %s with no claim there", when, v.ID, node, a.State)
			}
		}
		mode := v.Capabilities[0].AccessMode
		live := len(v.ReadClaims) + len(v.WriteClaims)
		switch {
		case mode.SingleNode() && len(nodes) > 1:
			r.problem("%s: volume %s is %s but has claims or attachments on nodes %v (attachments %s)",
				when, v.ID, mode, slices.Sorted(maps.Keys(nodes)), attachmentsString(v))
		case mode == csi.AccessModeSingleNodeSingleWriter && live > 1:
			r.problem("%s: volume %s is %s but has %d live claims", when, v.ID, mode, live)
		case mode == csi.AccessModeSingleNodeWriter && writers > 1:
			r.problem("%s: volume %s is %s but has %d write claims", when, v.ID, mode, writers)
		}
	}
	if when == "at the end" {
		for _, v := range vols {
			if v.InUse() {
				r.problem("at the end volume %s still has claims %d live, %d past and attachments %s",
					v.ID, len(v.ReadClaims)+len(v.WriteClaims), len(v.PastClaims), attachmentsString(v))
			}
		}
	}
	return vols
}

// checkpoint pauses the goroutines, lets the worker settle, and checks
// the records against the plugin while nothing moves: no past claim is
// left, every attachment is Attached with a live claim on its node, and
// the plugin is attached exactly where the records say (nowhere, for a
// plugin without controller publish).
func (r *concRun) checkpoint() {
	r.pause.Lock()
	defer r.pause.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.w.Settle(ctx); err != nil {
		r.problem("midway: the worker did not settle: %v", err)
		return
	}
	r.count("midway checkpoints")
	for _, v := range r.check("midway") {
		if len(v.PastClaims) > 0 {
			var errs []string
			for _, id := range slices.Sorted(maps.Keys(v.PastClaims)) {
				if c := v.PastClaims[id]; c.LastError != "" && len(errs) < 2 {
					errs = append(errs, fmt.Sprintf("%s on %s, %s: %s", id, c.NodeID, c.State, c.LastError))
				}
			}
			r.problem("midway: volume %s still has %d past claims after the worker settled (errors %q)", v.ID, len(v.PastClaims), errs)
		}
		var recorded []string
		for node, a := range v.Attachments {
			if a.State != csi.AttachmentAttached || !v.LiveClaimOnNode(node, "") {
				r.problem("midway: volume %s: attachment to node %s is %s, live claim there %v",
					v.ID, node, a.State, v.LiveClaimOnNode(node, ""))
			}
			if r.sh.publishes() {
				recorded = append(recorded, a.ExternalNodeID)
			}
		}
		slices.Sort(recorded)
		ps, _ := r.e.ctl.Volume(v.ExternalID)
		if got := ps.AttachedNodes(); !slices.Equal(got, recorded) {
			r.problem("midway: volume %s: the plugin is attached to %v, the records say %v (%s)", v.ID, got, recorded, attachmentsString(v))
		}
	}
}

func hasClaimOn(v *csi.Volume, node string) bool {
	for _, m := range []map[string]*csi.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for _, c := range m {
			if c.NodeID == node {
				return true
			}
		}
	}
	return false
}

func attachmentsString(v *csi.Volume) string {
	var s []string
	for _, node := range slices.Sorted(maps.Keys(v.Attachments)) {
		s = append(s, node+":"+v.Attachments[node].State.String())
	}
	return "[" + strings.Join(s, " ") + "]"
}
