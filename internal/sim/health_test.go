package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/health"
)

// The health decisions turn a workload volume's condition at the
// controller plugin abnormal or normal again, and run a pass of the
// leader's health monitor. They are drawn from a fifth stream of the
// seed, so the first four streams' decisions stay as they were.
const (
	opSick       opKind = iota + 400 // the controller reports volume vol abnormal
	opWell                           // the controller reports volume vol normal again
	opHealthPass                     // the leader's health monitor makes a pass
)

// healthStream is the fifth stream's PCG sequence.
const healthStream = 0x55e

func drawHealth(rng *rand.Rand) []decision {
	var out []decision
	switch k := rng.IntN(100); {
	case k < 6:
		out = append(out, decision{kind: opSick, vol: rng.IntN(numVolumes)})
	case k < 12:
		out = append(out, decision{kind: opWell, vol: rng.IntN(numVolumes)})
	}
	// A pass costs a ControllerGetVolume per volume: one step in eight
	// runs one, and quiescence a last one.
	if rng.IntN(8) == 0 {
		out = append(out, decision{kind: opHealthPass})
	}
	return out
}

func healthString(d decision) string {
	switch d.kind {
	case opSick:
		return fmt.Sprintf("sick v%d", d.vol)
	case opWell:
		return fmt.Sprintf("well v%d", d.vol)
	case opHealthPass:
		return "health-pass"
	}
	return fmt.Sprintf("health op %d", d.kind)
}

// healthState is what a run keeps for the health decisions.
type healthState struct {
	mu sync.Mutex
	// fresh is set when a pass reached every volume at the controller
	// since the last condition changed: the records must match then.
	fresh bool
}

func (r *run) setFresh(fresh bool) {
	r.health.mu.Lock()
	r.health.fresh = fresh
	r.health.mu.Unlock()
}

// doHealth runs a step's health decisions, one after another.
func (r *run) doHealth(ds []decision) {
	for _, d := range ds {
		switch d.kind {
		case opSick, opWell:
			id := "ext-" + r.p.volumes[d.vol].id
			if !r.w.ctl.SetVolumeCondition(id, d.kind == opSick, "sim: "+healthString(d)) {
				r.flag("the plugin has no volume %s to set the condition of", id)
			}
			r.setFresh(false)
		case opHealthPass:
			_ = r.healthPass()
		}
	}
}

// healthPass runs one pass of a health monitor on the leader, as the
// host's Run would, and marks the records fresh when every registered
// volume's ControllerGetVolume reached the plugin and the reports were
// written.
func (r *run) healthPass() error {
	leader, err := r.w.tryLeader()
	if err != nil {
		return err
	}
	vols, err := leader.store.VolumesByPlugin(simPlugin)
	if err != nil {
		return err
	}
	want := 0
	for _, v := range vols {
		if !v.Creating && v.ExternalID != "" {
			want++
		}
	}
	m, err := health.New(health.Config{Store: leader.store, Applier: leader.srv,
		Controllers: leader.router.HealthControllers(), Clock: r.w.clock, Parallelism: 2})
	if err != nil {
		r.w.t.Fatalf("seed %d: health monitor: %v", r.p.seed, err)
	}
	ctx, cancel := r.ctx()
	defer cancel()
	before := r.w.ctl.CallCount(csitest.MethodControllerGetVolume)
	err = m.Pass(ctx)
	r.noteErr("health-pass", err)
	reached := r.w.ctl.CallCount(csitest.MethodControllerGetVolume) - before
	switch {
	case err != nil:
		return err
	case reached < want:
		return fmt.Errorf("the pass reached %d of %d volumes at the controller", reached, want)
	}
	r.setFresh(true)
	return nil
}

// invHealthMatches: after a pass that reached every volume, each
// volume's health record reads abnormal exactly when the controller
// plugin reports it abnormal (a volume back to normal reads normal).
func invHealthMatches(r *run) []string {
	r.health.mu.Lock()
	fresh := r.health.fresh
	r.health.mu.Unlock()
	if !fresh {
		return nil
	}
	store := r.w.leader().store
	vols, err := store.Volumes(namespace, "")
	if err != nil {
		return []string{fmt.Sprintf("list the volumes: %v", err)}
	}
	var bad []string
	for _, v := range vols {
		st, ok := r.w.ctl.Volume(v.ExternalID)
		if v.Creating || !ok {
			continue
		}
		h, err := store.Health(namespace, v.ID)
		if err != nil && !errors.Is(err, csi.ErrVolumeNotFound) {
			bad = append(bad, fmt.Sprintf("read the health of %s: %v", v.ID, err))
			continue
		}
		recorded := h != nil && h.Condition != nil && h.Condition.Abnormal
		if recorded != st.Abnormal {
			bad = append(bad, fmt.Sprintf("volume %s: the plugin reports abnormal=%v, the health record reads abnormal=%v", v.ID, st.Abnormal, recorded))
		}
	}
	return bad
}

// invHealthQuiescent runs a last pass, then checks invHealthMatches.
func invHealthQuiescent(r *run) []string {
	var err error
	for range 3 {
		if err = r.healthPass(); err == nil {
			return invHealthMatches(r)
		}
	}
	return []string{fmt.Sprintf("no health pass completed: %v", err)}
}

// TestHealthInvariants_Flag checks that the health records follow the
// plugin's condition through passes (abnormal after the pass that saw
// it, normal after the pass that saw it heal), and that
// HealthMatchesPlugin flags a record that does not match.
func TestHealthInvariants_Flag(t *testing.T) {
	p := newPlan(1, 0)
	w := newWorld(t, false)
	defer w.close()
	r := &run{w: w, p: p, allocs: map[string]decision{}, errs: map[string]int{}}
	r.registerVolumes()
	pass := func() {
		t.Helper()
		if err := r.healthPass(); err != nil {
			t.Fatalf("health pass: %v", err)
		}
		if bad := invHealthMatches(r); len(bad) > 0 {
			t.Fatalf("HealthMatchesPlugin fails after a pass: %v", bad)
		}
	}
	recorded := func() bool {
		t.Helper()
		h, err := w.leader().store.Health(namespace, "v1")
		must(t, err)
		return h != nil && h.Condition != nil && h.Condition.Abnormal
	}
	want := func(substr string) {
		t.Helper()
		bad := invHealthMatches(r)
		if len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), substr) {
			t.Errorf("HealthMatchesPlugin: got %q, want a line with %q", bad, substr)
		}
	}
	pass()
	r.doHealth([]decision{{kind: opSick, vol: 1}})
	if bad := invHealthMatches(r); len(bad) > 0 {
		t.Fatalf("HealthMatchesPlugin checks before a pass: %v", bad)
	}
	pass()
	if !recorded() {
		t.Fatal("after a pass the record of v1 reads normal; the plugin reports it abnormal")
	}
	r.doHealth([]decision{{kind: opWell, vol: 1}})
	pass()
	if recorded() {
		t.Fatal("after a pass the record of v1 reads abnormal; the plugin reports it normal again")
	}

	// A pass that cannot reach the controller (its node partitioned)
	// leaves the records stale: it must not mark them fresh.
	r.doHealth([]decision{{kind: opSick, vol: 2}})
	w.tr.SetDown("n1", true)
	if err := r.healthPass(); err == nil {
		t.Error("a pass with the controller's node down reports success")
	}
	if bad := invHealthMatches(r); len(bad) > 0 {
		t.Errorf("HealthMatchesPlugin checks after a pass that did not reach the controller: %v", bad)
	}
	w.tr.SetDown("n1", false)
	pass()

	// A pass that did not run: the records are stale both ways.
	w.ctl.SetVolumeCondition("ext-v1", true, "planted")
	r.setFresh(true)
	want("volume v1: the plugin reports abnormal=true, the health record reads abnormal=false")
	pass()
	w.ctl.SetVolumeCondition("ext-v1", false, "")
	r.setFresh(true)
	want("volume v1: the plugin reports abnormal=false, the health record reads abnormal=true")
}
