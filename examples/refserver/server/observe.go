package server

import (
	"time"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/examples/refserver/events"
)

// workerEvents prints the claim release worker's events.
type workerEvents struct{ log *events.Log }

var _ claimgc.Observer = workerEvents{}

func (o workerEvents) ClaimFreed(namespace, volumeID, allocID string, since time.Duration) {
	o.log.Printf("server", "claim of %s on volume %s/%s released and freed (%s after the allocation stopped)",
		allocID, namespace, volumeID, since.Round(time.Millisecond))
}

func (o workerEvents) StepFailed(namespace, volumeID, allocID string, step claimgc.Step, err error, final bool) {
	retry := "retrying with backoff"
	if final {
		retry = "retrying on the slow schedule"
	}
	// err never holds a secret (claimgc's contract).
	o.log.Printf("server", "release of %s's claim on %s/%s: %s failed, %s: %v", allocID, namespace, volumeID, step, retry, err)
}

func (workerEvents) QueueChanged(int, int, int) {}
