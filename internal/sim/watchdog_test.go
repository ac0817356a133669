package sim

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"time"
)

// stepLimit bounds one step (and the quiescence) in real time. Every
// wait inside a step is already bounded by waitLimit, so a step that
// runs past a few of them is stuck: a deadlock in csikit, or a wait the
// simulation left unbounded. The world has no synctest bubble (see the
// package doc), so the bound is on the real clock; it is a hang guard,
// never a timing assertion, and it is wide enough for a loaded machine.
var flagStepLimit = flag.Duration("steplimit", 4*waitLimit, "fail a seed whose step runs longer than this, dumping every goroutine")

// within runs fn, the body of a step, in a goroutine of its own and
// waits for it at most -steplimit. When the bound passes, every
// goroutine's stack goes to standard error (the stuck one among them),
// the world is marked wedged so that closing it does not wait on the
// stuck goroutine, and the failure names the seed. fn may call t.Fatal:
// its goroutine then ends and within returns the failure.
func (r *run) within(what string, fn func()) []string {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	t := time.NewTimer(*flagStepLimit)
	defer t.Stop()
	select {
	case <-done:
		if r.w.t.Failed() {
			return []string{fmt.Sprintf("seed %d %s: failed (see above)", r.p.seed, what)}
		}
		return nil
	case <-t.C:
	}
	var dump bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&dump, 2)
	fmt.Fprintf(os.Stderr, "=== seed %d %s: still running after %s; every goroutine follows\n%s\n=== end of seed %d's dump\n",
		r.p.seed, what, *flagStepLimit, dump.Bytes(), r.p.seed)
	r.w.wedge()
	return []string{fmt.Sprintf("seed %d %s: did not finish within %s (a hang: the goroutine dump is on standard error); rerun with: go test ./internal/sim -run 'TestSim$' -seed %d -steps %d",
		r.p.seed, what, *flagStepLimit, r.p.seed, len(r.p.steps))}
}
