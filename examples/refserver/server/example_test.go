package server_test

import (
	"fmt"
	"time"

	"github.com/csikit/csikit/examples/refserver/server"
)

// Liveness is pure logic over the times it is given: a node is ready
// while its last heartbeat is within the TTL, down after, gone once
// forgotten.
func ExampleLiveness() {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	l := server.NewLiveness(15 * time.Second)
	_, _ = l.Register("node-1", "127.0.0.1:4747", start)

	fmt.Println(l.Status("node-1", start.Add(10*time.Second)))
	fmt.Println(l.Status("node-1", start.Add(20*time.Second)))
	_ = l.Heartbeat("node-1", start.Add(20*time.Second))
	fmt.Println(l.Status("node-1", start.Add(30*time.Second)))
	l.Forget("node-1")
	fmt.Println(l.Status("node-1", start.Add(30*time.Second)))
	fmt.Println(l.Status("node-9", start))
	// Output:
	// ready
	// down
	// ready
	// gone
	// unknown
}
