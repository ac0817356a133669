package backoff_test

import (
	"fmt"
	"time"

	"github.com/csikit/csikit/csi/backoff"
)

func ExamplePolicy_Delay() {
	p := backoff.Policy{Base: time.Second, Max: 10 * time.Second, Jitter: -1} // no jitter, for a stable output
	for attempt := 1; attempt <= 5; attempt++ {
		fmt.Print(p.Delay(attempt), " ")
	}
	fmt.Println()
	// Output:
	// 1s 2s 4s 8s 10s
}
