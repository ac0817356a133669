package capacity_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Run must leave no goroutine behind: its call workers included.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
