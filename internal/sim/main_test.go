package sim

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// simParallel is how many seeds run at once by default. A world spends
// most of its time waiting on raft commits and gRPC round trips, not on
// the CPU, so several share two cores well.
const simParallel = "16"

// TestMain sets the default parallelism and, once every world has been
// closed, checks that no goroutine is left: a world that leaks its
// raft, gRPC or worker goroutines fails the package.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", simParallel); err != nil {
			panic(err)
		}
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
