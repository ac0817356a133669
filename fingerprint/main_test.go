package fingerprint_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops its Manager and plugins before it returns, so no
// goroutine may be left once all have run.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
