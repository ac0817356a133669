package clock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/csikit/csikit/csi/clock"
)

// A test drives timed code with a Fake: it waits until the code is parked
// on its timer, then moves time instead of sleeping.
func ExampleFake() {
	f := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = clock.Sleep(context.Background(), f, 30*time.Second) // the code under test
	}()
	_ = f.BlockUntil(context.Background(), 1)
	fmt.Println("advanced", f.AdvanceToNext())
	<-done
	fmt.Println("now", f.Now().Format(time.TimeOnly))
	// Output:
	// advanced 30s
	// now 00:00:30
}
