package sim

import (
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/csikit/csikit/csi"
)

// The extra decisions are drawn from a second stream of the seed, so
// that adding them left the first stream's decisions (and with them
// the regression seeds' traces) as they were.
const (
	opDrain         opKind = iota + 100 // every allocation on a node stops
	opPluginRestart                     // a plugin crashes and serves again on its socket
	opContend                           // several new allocations claim one volume at once
)

// contenders is how many allocations an opContend starts at once.
const contenders = 4

// drawExtras draws one step's extra decisions from rng.
func drawExtras(rng *rand.Rand, step int) []decision {
	switch k := rng.IntN(16); {
	case k < 1:
		return []decision{{kind: opDrain, node: simNodes[rng.IntN(len(simNodes))]}}
	case k < 2:
		plugin := "ctl"
		if rng.IntN(2) == 0 {
			plugin = simNodes[rng.IntN(len(simNodes))]
		}
		return []decision{{kind: opPluginRestart, plugin: plugin}}
	case k < 6:
		vol := rng.IntN(numVolumes)
		var out []decision
		for i := range contenders {
			d := decision{kind: opContend, alloc: fmt.Sprintf("c%d.%d", step, i), vol: vol,
				node: simNodes[rng.IntN(len(simNodes))], mode: csi.ClaimWrite}
			if rng.IntN(3) == 0 {
				d.mode = csi.ClaimRead
			}
			out = append(out, d)
		}
		return out
	}
	return nil
}

func extraString(d decision) string {
	switch d.kind {
	case opDrain:
		return "drain " + d.node
	case opPluginRestart:
		return "plugin-restart " + d.plugin
	}
	return fmt.Sprintf("contend %s v%d %s %s", d.alloc, d.vol, d.node, d.mode)
}

// doExtras runs a step's extra decisions: a contention's claims all
// start together, from their own goroutines.
func (r *run) doExtras(ds []decision) {
	var wg sync.WaitGroup
	for _, d := range ds {
		switch d.kind {
		case opDrain:
			r.drain(d.node)
		case opPluginRestart:
			r.restartPlugin(d.plugin)
		case opContend:
			if r.p.volumes[d.vol].mode.ReadOnly() {
				d.mode = csi.ClaimRead
			}
			wg.Go(func() { _ = r.claimAndMount(d, nil) })
		}
	}
	wg.Wait()
}

// drain stops every allocation the run started on node.
func (r *run) drain(node string) {
	r.mu.Lock()
	var ids []string
	for id, d := range r.allocs {
		if d.node == node {
			ids = append(ids, id)
		}
	}
	r.mu.Unlock()
	for _, id := range ids {
		_ = r.stop(id) // refused or lost: the allocation runs on until quiescence
	}
}

// restartPlugin crashes a plugin and has it serve again on its socket,
// keeping its model: the clients reconnect on their own.
func (r *run) restartPlugin(name string) {
	p := r.w.ctl
	if name != "ctl" {
		p = r.w.nodes[name].plugin
	}
	if err := p.Restart(); err != nil {
		r.w.t.Errorf("seed %d: restart plugin %s: %v", r.p.seed, name, err)
	}
}
