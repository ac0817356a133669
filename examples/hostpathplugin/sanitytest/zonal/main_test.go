package zonal_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the plugins and the suite's connections are gone
// when the test ends. Ginkgo's interrupt handler watches for signals for
// the life of the process, by design, so it is not a leak.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/onsi/ginkgo/v2/internal/interrupt_handler.(*InterruptHandler).registerForInterrupts.func2"))
}
