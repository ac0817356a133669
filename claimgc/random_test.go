package claimgc_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
)

// TestWorker_Release_RandomFaults releases claims under random fault
// schedules: every teardown RPC may fail (Retryable, Uncertain or Final
// codes), nodes go down and come back, node plugins unregister and
// register again, one node may leave for good, and leadership flaps.
// Then the faults stop, and every past claim must be freed, with no
// lifecycle violation in any plugin and nothing left attached, staged
// or published.
//
// It runs a few seeds by default; CSIKIT_SOAK=1 runs many more, with
// more volumes and rounds. CLAIMGC_SEED=n runs one seed.
func TestWorker_Release_RandomFaults(t *testing.T) {
	seeds, volumes, rounds := 4, 12, 12
	if os.Getenv("CSIKIT_SOAK") != "" {
		seeds, volumes, rounds = 60, 40, 40
	}
	first := uint64(1)
	if s := os.Getenv("CLAIMGC_SEED"); s != "" {
		if _, err := fmt.Sscan(s, &first); err != nil {
			t.Fatalf("CLAIMGC_SEED=%q: %v", s, err)
		}
		seeds = 1
	}
	for seed := first; seed < first+uint64(seeds); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runRandomFaults(t, seed, volumes, rounds)
		})
	}
}

var faultCodes = []codes.Code{
	codes.Unavailable, codes.Aborted, codes.ResourceExhausted, // Retryable
	codes.DeadlineExceeded, // Uncertain
	codes.Internal,         // Final
}

func runRandomFaults(t *testing.T, seed uint64, volumes, rounds int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	h := newHarness(t, harnessOptions{})
	type claimRef struct{ vol, alloc string }
	var claims []claimRef
	for i := range volumes {
		vol := fmt.Sprintf("v%d", i)
		if rng.IntN(3) == 0 {
			h.addVolume(vol, csi.AccessModeSingleNodeWriter)
			a := fmt.Sprintf("a%d-0", i)
			h.claim(vol, a, h.nodeIDs[rng.IntN(len(h.nodeIDs))])
			claims = append(claims, claimRef{vol, a})
			continue
		}
		h.addVolume(vol, csi.AccessModeMultiNodeMultiWriter)
		for j := range 1 + rng.IntN(3) {
			a := fmt.Sprintf("a%d-%d", i, j)
			h.claim(vol, a, h.nodeIDs[rng.IntN(len(h.nodeIDs))])
			claims = append(claims, claimRef{vol, a})
		}
	}
	pending := rng.Perm(len(claims))
	w := h.startWorker(h.workerConfig(), true)
	gone := ""

	for range rounds {
		// Fault schedule for the next calls.
		for _, id := range h.nodeIDs {
			for _, m := range []string{nodeUnpublish, nodeUnstage} {
				if rng.IntN(3) == 0 {
					h.nodes[id].fake.FailNext(m, faultCodes[rng.IntN(len(faultCodes))], 1+rng.IntN(2))
				}
			}
		}
		if rng.IntN(3) == 0 {
			h.ctrl.FailNext(ctrlUnpublish, faultCodes[rng.IntN(len(faultCodes))], 1+rng.IntN(2))
		}
		// Nodes and plugins come and go.
		for _, id := range h.nodeIDs {
			if id == gone {
				continue
			}
			switch rng.IntN(8) {
			case 0:
				h.statuses.set(id, csi.NodeStatusDown)
			case 1:
				h.statuses.set(id, csi.NodeStatusReady)
			case 2:
				h.nodes[id].registry.setRegistered(rng.IntN(2) == 0)
			}
		}
		if gone == "" && rng.IntN(20) == 0 {
			gone = h.nodeIDs[rng.IntN(len(h.nodeIDs))]
			h.statuses.set(gone, csi.NodeStatusGone)
		}
		// Leadership flaps.
		if rng.IntN(6) == 0 {
			w.SetEnabled(!w.Enabled())
		}
		// Some allocations stop.
		if len(pending) > 0 {
			n := min(len(pending), rng.IntN(4))
			var ids []string
			for _, k := range pending[:n] {
				ids = append(ids, claims[k].alloc)
			}
			pending = pending[n:]
			if len(ids) > 0 {
				h.release(ids...)
			}
		}
		h.settle(w)
		h.advance(w, time.Duration(rng.IntN(16))*time.Second)
	}

	// The storm ends.
	h.clearFaults()
	for _, id := range h.nodeIDs {
		if id != gone {
			h.statuses.set(id, csi.NodeStatusReady)
		}
		h.nodes[id].registry.setRegistered(true)
	}
	var rest []string
	for _, k := range pending {
		rest = append(rest, claims[k].alloc)
	}
	if len(rest) > 0 {
		h.release(rest...)
	}
	w.SetEnabled(true)
	h.settle(w)
	for i := 0; i < 5 && h.pastClaims() > 0; i++ {
		h.advance(w, 10*time.Minute) // the slow schedule of Final errors
	}
	if n := h.pastClaims(); n != 0 {
		vols, _ := h.store.VolumesWithPastClaims()
		for _, v := range vols {
			for _, c := range v.PastClaims {
				t.Logf("left: volume %s allocation %s node %s state %s error %q", v.ID, c.AllocationID, c.NodeID, c.State, c.LastError)
			}
		}
		t.Fatalf("seed %d: %d past claims never freed (stats %+v)", seed, n, w.Stats())
	}
	for _, c := range claims {
		if cl := h.claimOf(c.vol, c.alloc); cl != nil {
			t.Errorf("claim of %s on %s survived: %+v", c.alloc, c.vol, cl)
		}
		h.requireDetached(c.vol, c.alloc)
	}
	if st := w.Stats(); st.Freed != uint64(len(claims)) {
		t.Errorf("freed %d claims, want %d", st.Freed, len(claims))
	}
	h.requireNoViolations()
}
