package server

import (
	"context"
	"sync"
	"time"

	"github.com/csikit/csikit/claimgc"
	"github.com/csikit/csikit/examples/refserver/events"
	"github.com/csikit/csikit/rpcshim"
)

// recorder collects which node served which transport call made on
// behalf of one API request, so the request's lifecycle line can say
// "created by the controller on node-1". rpcshim.Server does not return
// the controller node of a CreateVolume or ControllerPublish, so the
// server learns it from its transport.
type recorder struct {
	mu    sync.Mutex
	calls []servedCall
}

type servedCall struct{ method, nodeID string }

type recorderKey struct{}

func withRecorder(ctx context.Context) (context.Context, *recorder) {
	r := &recorder{}
	return context.WithValue(ctx, recorderKey{}, r), r
}

// node returns the node that last served method, or "".
func (r *recorder) node(method string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.calls) - 1; i >= 0; i-- {
		if r.calls[i].method == method {
			return r.calls[i].nodeID
		}
	}
	return ""
}

// recordingTransport is the Router's transport: the gRPC transport,
// noting each successful call in the request's recorder, if any.
type recordingTransport struct{ next rpcshim.Transport }

func (t recordingTransport) Call(ctx context.Context, nodeID, method string, req, resp any) error {
	err := t.next.Call(ctx, nodeID, method, req, resp)
	if r, ok := ctx.Value(recorderKey{}).(*recorder); ok && err == nil {
		r.mu.Lock()
		r.calls = append(r.calls, servedCall{method: method, nodeID: nodeID})
		r.mu.Unlock()
	}
	return err
}

var _ rpcshim.Transport = recordingTransport{}

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
