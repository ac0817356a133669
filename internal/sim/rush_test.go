package sim

import (
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/csikit/csikit/csi"
)

// A rush is the strongest contention of the workload: six to eight new
// allocations claim one single-writer volume at once, and about half
// of them stop as soon as their claim and mount return, while the
// others are still claiming. It is drawn from a third stream of the
// seed, so that the first two streams' decisions stay as they were.
const opRush opKind = iota + 200

// rushVolume is the index in plan.volumes of the volume the rushes
// claim; newPlan appends it after the race volume.
const rushVolume = numVolumes + 1

var singleWriterModes = []csi.AccessMode{
	csi.AccessModeSingleNodeWriter, csi.AccessModeSingleNodeSingleWriter, csi.AccessModeMultiNodeSingleWriter,
}

// rushVolumeOf draws the rush volume's access mode.
func rushVolumeOf(rng *rand.Rand) simVolume {
	return simVolume{id: "rush", mode: singleWriterModes[rng.IntN(len(singleWriterModes))]}
}

// drawRush draws one step's rush, or none.
func drawRush(rng *rand.Rand, step int) []decision {
	if rng.IntN(4) != 0 {
		return nil
	}
	n := 6 + rng.IntN(3)
	out := make([]decision, 0, n)
	for i := range n {
		d := decision{kind: opRush, alloc: fmt.Sprintf("r%d.%d", step, i), vol: rushVolume,
			node: simNodes[rng.IntN(len(simNodes))], mode: csi.ClaimWrite, times: rng.IntN(2)}
		if rng.IntN(4) == 0 {
			d.mode = csi.ClaimRead
		}
		out = append(out, d)
	}
	return out
}

func rushString(d decision) string {
	s := fmt.Sprintf("rush %s %s %s", d.alloc, d.node, d.mode)
	if d.times == 1 {
		s += " then stop"
	}
	return s
}

// doRush starts every claim of a rush at once; those marked to stop
// report their allocation terminal as soon as their claim and mount
// return, whatever the outcome.
func (r *run) doRush(ds []decision) {
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Go(func() {
			_ = r.claimAndMount(d, nil)
			if d.times == 1 {
				_ = r.stop(d.alloc)
			}
		})
	}
	wg.Wait()
}
