package sim

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	flagSeed   = flag.Uint64("seed", 0, "run this one seed (0: the default set, or CSIKIT_SIM_SEEDS of them)")
	flagSteps  = flag.Int("steps", 0, "steps per seed (0: the default)")
	flagRerun  = flag.Int("rerun", 20, "how many times a failing seed is rerun to report how often it fails")
	flagShrink = flag.Bool("shrink", false, "narrow a failing seed to the shortest failing prefix of its steps")
)

// defaults are the seeds and steps of a plain `go test`: well under a
// minute on two cores, with the race detector too.
func defaults() (seeds, steps int) {
	if raceEnabled {
		return 4, 60
	}
	return 30, 100
}

func seedsAndSteps(t *testing.T) (first uint64, seeds, steps int) {
	seeds, steps = defaults()
	if s := os.Getenv("CSIKIT_SIM_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CSIKIT_SIM_SEEDS=%q: want a positive number", s)
		}
		seeds = n
	}
	if *flagSteps > 0 {
		steps = *flagSteps
	}
	first = 1
	if *flagSeed != 0 {
		first, seeds = *flagSeed, 1
	}
	return first, seeds, steps
}

// TestSim runs the seeds; a failing seed is rerun and, with -shrink,
// narrowed, before it is reported.
func TestSim(t *testing.T) {
	first, seeds, steps := seedsAndSteps(t)
	for seed := first; seed < first+uint64(seeds); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			p := newPlan(seed, steps)
			bad := runPlan(t, p)
			if len(bad) == 0 {
				return
			}
			t.Errorf("%s", strings.Join(bad, "\n"))
			report(t, p)
		})
	}
}

// report reruns a failing plan to tell how often it fails, and with
// -shrink narrows it.
func report(t *testing.T, p *plan) {
	fails := 1
	for range *flagRerun - 1 {
		if len(runPlan(t, p)) > 0 {
			fails++
		}
	}
	t.Errorf("seed %d failed %d of %d runs; rerun with: go test ./internal/sim -run 'TestSim$' -seed %d -steps %d",
		p.seed, fails, max(*flagRerun, 1), p.seed, len(p.steps))
	if !*flagShrink {
		return
	}
	lo, hi := 1, len(p.steps) // the shortest prefix that fails is in (lo-1, hi]
	for lo < hi {
		mid := (lo + hi) / 2
		q := *p
		q.steps = p.steps[:mid]
		if len(runPlan(t, &q)) > 0 {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	q := *p
	q.steps = p.steps[:hi]
	t.Errorf("seed %d shrunk to %d steps (-steps %d); its trace:\n%s", p.seed, hi, hi, q.trace())
}

// runPlan runs p in a new world and returns the first invariant
// failures, each naming the seed, or none.
func runPlan(t *testing.T, p *plan) []string {
	w := newWorld(t, p.durable())
	defer w.close()
	r := &run{w: w, p: p, allocs: map[string]decision{}, errs: map[string]int{}}
	r.registerVolumes()
	for i, s := range p.steps {
		if bad := r.within(fmt.Sprintf("step %d", i), func() { r.doStep(s) }); len(bad) > 0 {
			return bad
		}
		if bad := r.check(fmt.Sprintf("after step %d", i), stepInvariants); len(bad) > 0 {
			return bad
		}
	}
	if bad := r.within("quiescence", r.quiesce); len(bad) > 0 {
		return bad
	}
	bad := r.check("at quiescence", quiescentInvariants)
	if len(bad) > 0 {
		for _, rep := range w.reps() {
			t.Logf("seed %d: server %s leader=%v worker %+v", p.seed, rep.id, rep.srv.IsLeader(), rep.worker.Stats())
		}
	}
	t.Logf("seed %d: %d steps, errors by operation %v", p.seed, len(p.steps), r.errs)
	return bad
}

func (r *run) check(when string, invs []struct {
	name string
	fn   invariant
}) []string {
	var out []string
	for _, inv := range invs {
		for _, b := range inv.fn(r) {
			out = append(out, fmt.Sprintf("seed %d %s: %s: %s", r.p.seed, when, inv.name, b))
		}
	}
	return out
}

// quiesce ends the faults, stops every allocation and lets the claim
// worker run its retries until nothing is left to release.
func (r *run) quiesce() {
	w := r.w
	w.ctl.ClearFaults()
	for _, n := range w.nodes {
		n.plugin.ClearFaults()
		if w.isGone(n.id) {
			continue // it stays down
		}
		n.mu.Lock()
		n.down = false
		n.mu.Unlock()
		w.tr.SetDown(n.id, false)
	}
	r.mu.Lock()
	var ids []string
	for id := range r.allocs {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		// The host reports every stop until the store has it; after a
		// refusal, to the server that leads now (the first replica may
		// be a follower that has not learned of the leader yet).
		apply := w.apply
		for try := 0; ; try++ {
			err := r.stopThrough(apply, id)
			if err == nil {
				break
			}
			if try == 10 {
				r.w.t.Errorf("seed %d: the stop of %s was refused %d times: %v", r.p.seed, id, try, err)
				break
			}
			apply = w.leader().srv.Apply
		}
	}
	w.settle()
	for range 12 {
		if !r.anyClaims() {
			return
		}
		w.clock.Advance(5 * time.Minute)
		w.settle()
	}
}

func (r *run) anyClaims() bool {
	for _, v := range r.volumes() {
		if len(v.ReadClaims)+len(v.WriteClaims)+len(v.PastClaims) > 0 {
			return true
		}
	}
	return false
}

// TestSim_TraceIsStable checks that a seed fixes the decision trace.
func TestSim_TraceIsStable(t *testing.T) {
	a, b := newPlan(42, 200), newPlan(42, 200)
	if a.traceHash() != b.traceHash() {
		t.Fatalf("seed 42 gave two traces:\n%s\n----\n%s", a.trace(), b.trace())
	}
	if c := newPlan(43, 200); c.traceHash() == a.traceHash() {
		t.Fatal("seeds 42 and 43 gave the same trace")
	}
}

// regressions are seeds that found a bug in csikit, with the steps
// that reproduce it; each failed on the code before its fix (seeds 16
// and 18 in 3 of 3 runs, seed 2 in 2 of 3).
var regressions = []struct {
	seed  uint64
	steps int
	bug   string
}{
	// csi.CheckClaim let a second writer in while a released writer was
	// still published (its node step not done): fixed by counting such
	// a past claim as a holder (ErrVolumeInUse).
	{16, 15, "multi-node-single-writer: a second writer beside a releasing writer"},
	{18, 25, "multi-node-single-writer: a second writer beside a releasing writer"},
	{2, 45, "single-node-writer: a second writer on the node of a releasing writer"},
}

func TestSim_Regressions(t *testing.T) {
	for _, rc := range regressions {
		t.Run(fmt.Sprintf("seed=%d", rc.seed), func(t *testing.T) {
			t.Parallel()
			p := newPlan(rc.seed, rc.steps)
			if bad := runPlan(t, p); len(bad) > 0 {
				t.Errorf("%s (regression: %s)", strings.Join(bad, "\n"), rc.bug)
			}
		})
	}
}
