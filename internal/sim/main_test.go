package sim

import (
	"flag"
	"os"
	"testing"
)

// simParallel is how many seeds run at once by default. A world spends
// most of its time waiting on raft commits and gRPC round trips, not on
// the CPU, so several share two cores well.
const simParallel = "16"

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", simParallel); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
