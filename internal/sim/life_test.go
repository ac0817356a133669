package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/csikit/csikit/csi"
)

// The life decisions are a volume's and a cluster's lifecycle beside
// the claims: a volume deleted while a claim races the delete (and
// registered again), a node leaving for good, the leader killed and
// restarted from its raft data dir, and expand, snapshot and restore
// through the controller plugin, which advertises them. They are drawn
// from a fourth stream of the seed, so the first three streams'
// decisions stay as they were. A plan with a kill runs its servers on
// data dirs (plan.durable); the others keep raft in memory.
const (
	opLifeClaim opKind = iota + 300 // a new allocation claims the life volume and mounts it
	opLifeStop                      // one of those allocations stops
	opDelete                        // the life volume's allocations stop; a claim races its delete
	opNodeGone                      // a node leaves the cluster for good
	opKill                          // the leader is killed and restarted from its data dir
	opExpand                        // a volume grows by times GiB
	opSnapshot                      // a volume is snapshotted as snap
	opRestore                       // a new volume is restored from snapshot snap
)

// lifeVolume is the index in plan.volumes of the volume the life
// stream claims and deletes; newPlan appends it after the rush volume.
const lifeVolume = rushVolume + 1

// goneFrom is the first step at which a node may leave: the first
// steps run with all three.
const goneFrom = 40

func lifeVolumeOf(rng *rand.Rand) simVolume {
	return simVolume{id: "life", mode: simModes[rng.IntN(len(simModes))]}
}

// lifePlan is what the life stream remembers while drawing a plan.
type lifePlan struct {
	running []string // life allocations not stopped
	snaps   []string // snapshots drawn so far
	gone    bool     // a node left
	// killer marks the plans that kill the leader, about one in four:
	// their servers keep raft on disk, which costs (boltdb) CPU every
	// world pays for on every write, so the others keep it in memory.
	killer bool
}

// draw draws one step's life decisions, or none.
func (lp *lifePlan) draw(rng *rand.Rand, step int) []decision {
	k := rng.IntN(100)
	switch {
	case k < 8:
		d := decision{kind: opLifeClaim, alloc: fmt.Sprintf("l%d", step), vol: lifeVolume,
			node: simNodes[rng.IntN(len(simNodes))], mode: csi.ClaimWrite}
		if rng.IntN(3) == 0 {
			d.mode = csi.ClaimRead
		}
		lp.running = append(lp.running, d.alloc)
		return []decision{d}
	case k < 12:
		if len(lp.running) == 0 {
			return nil
		}
		i := rng.IntN(len(lp.running))
		d := decision{kind: opLifeStop, alloc: lp.running[i]}
		lp.running = slices.Delete(lp.running, i, i+1)
		return []decision{d}
	case k < 16:
		lp.running = nil
		return []decision{{kind: opDelete, alloc: fmt.Sprintf("d%d", step), vol: lifeVolume,
			node: simNodes[rng.IntN(len(simNodes))], mode: csi.ClaimWrite}}
	case k < 19:
		return []decision{{kind: opExpand, vol: lifeVolumes[rng.IntN(len(lifeVolumes))], times: 1 + rng.IntN(3)}}
	case k < 22:
		d := decision{kind: opSnapshot, vol: lifeVolumes[rng.IntN(len(lifeVolumes))], snap: fmt.Sprintf("snap%d", step)}
		lp.snaps = append(lp.snaps, d.snap)
		return []decision{d}
	case k < 24:
		if len(lp.snaps) == 0 {
			return nil
		}
		return []decision{{kind: opRestore, alloc: fmt.Sprintf("restore%d", step), snap: lp.snaps[rng.IntN(len(lp.snaps))]}}
	case k < 27:
		if !lp.killer {
			return nil
		}
		return []decision{{kind: opKill}}
	case k < 29:
		if step < goneFrom || lp.gone {
			return nil
		}
		// n1 runs the controller: it stays.
		lp.gone = true
		return []decision{{kind: opNodeGone, node: simNodes[1+rng.IntN(len(simNodes)-1)]}}
	}
	return nil
}

// lifeVolumes are the volumes expand and snapshot draw from: the
// workload's and the life volume.
var lifeVolumes = []int{0, 1, 2, lifeVolume}

func lifeString(d decision) string {
	switch d.kind {
	case opLifeClaim:
		return fmt.Sprintf("life-claim %s %s %s", d.alloc, d.node, d.mode)
	case opLifeStop:
		return "life-stop " + d.alloc
	case opDelete:
		return fmt.Sprintf("delete life racing %s %s %s", d.alloc, d.node, d.mode)
	case opNodeGone:
		return "node-gone " + d.node
	case opKill:
		return "kill-leader"
	case opExpand:
		return fmt.Sprintf("expand v%d +%dGiB", d.vol, d.times)
	case opSnapshot:
		return fmt.Sprintf("snapshot v%d as %s", d.vol, d.snap)
	case opRestore:
		return fmt.Sprintf("restore %s from %s", d.alloc, d.snap)
	}
	return fmt.Sprintf("life op %d", d.kind)
}

// durable reports whether the plan kills a server, whose restart needs
// its raft state on disk.
func (p *plan) durable() bool {
	for _, s := range p.steps {
		for _, d := range s.life {
			if d.kind == opKill {
				return true
			}
		}
	}
	return false
}

// lifeState is what a run keeps for the life decisions and their
// invariants.
type lifeState struct {
	mu       sync.Mutex
	maxCap   map[string]int64 // the largest capacity the store showed for a volume
	restored []string         // volumes restored from a snapshot
	bad      []string         // what the life operations found wrong themselves
	listed   int              // the plugin's snapshot calls when snaps was listed
	snaps    []string         // the plugin's snapshots then
}

// flag records a failure a life operation saw; invLifeChecks reports it.
func (r *run) flag(format string, args ...any) {
	r.life.mu.Lock()
	r.life.bad = append(r.life.bad, fmt.Sprintf(format, args...))
	r.life.mu.Unlock()
}

// doLife runs a step's life decisions, one after another.
func (r *run) doLife(ds []decision) {
	for _, d := range ds {
		switch d.kind {
		case opLifeClaim:
			_ = r.claimAndMount(d, nil)
		case opLifeStop:
			_ = r.stop(d.alloc)
		case opDelete:
			r.deleteRace(d)
		case opNodeGone:
			r.nodeGone(d)
		case opKill:
			r.killLeader()
		case opExpand:
			r.expand(d)
		case opSnapshot:
			r.snapshot(d)
		case opRestore:
			r.restore(d)
		}
	}
}

// isGone reports whether node id has left the cluster.
func (w *world) isGone(id string) bool {
	n := w.nodes[id]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.gone
}
