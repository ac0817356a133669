package rpcshim_test

import (
	"context"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
)

// flight records, from inside the fake plugin, which attach and detach
// calls are in flight at once. Each call announces itself on entered and
// then waits for one value on proceed, so the test decides when each
// call may finish and sees exactly what overlapped.
type flight struct {
	entered chan string
	proceed chan struct{}

	mu     sync.Mutex
	now    int
	most   int
	events []string
}

func newFlight() *flight {
	return &flight{entered: make(chan string, 4), proceed: make(chan struct{})}
}

func (f *flight) hook(ctx context.Context, method string, req any) error {
	var node string
	switch r := req.(type) {
	case *csipb.ControllerPublishVolumeRequest:
		node = r.GetNodeId()
	case *csipb.ControllerUnpublishVolumeRequest:
		node = r.GetNodeId()
	}
	f.mu.Lock()
	f.now++
	f.most = max(f.most, f.now)
	f.events = append(f.events, "enter "+method+" "+node)
	f.mu.Unlock()
	f.entered <- node
	select {
	case <-f.proceed:
	case <-ctx.Done():
	}
	f.mu.Lock()
	f.now--
	f.events = append(f.events, "exit "+method+" "+node)
	f.mu.Unlock()
	return ctx.Err()
}

func (f *flight) report() (most int, events []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.most, append([]string(nil), f.events...)
}

// TestRouter_AttachLock_PerTargetNode proves, with calls held inside the
// plugin, that attaches and detaches to one target node run one after
// the other, and that attaches to two target nodes run at the same time.
func TestRouter_AttachLock_PerTargetNode(t *testing.T) {
	publish := func(external, csiNode string) func(*srvEnv) error {
		return func(e *srvEnv) error {
			_, err := e.router.ControllerPublish(context.Background(), rtPublishRequestFor(external, csiNode))
			return err
		}
	}
	unpublish := func(external, csiNode string) func(*srvEnv) error {
		return func(e *srvEnv) error {
			r := &rpcshim.ControllerUnpublishRequest{CSIControllerQuery: rpcshim.CSIControllerQuery{PluginID: rtPlugin}}
			r.ExternalID, r.ExternalNodeID = external, csiNode
			_, err := e.router.ControllerUnpublish(context.Background(), r)
			return err
		}
	}
	pub, unpub := csitest.MethodControllerPublishVolume, csitest.MethodControllerUnpublishVolume
	tests := []struct {
		name     string
		first    func(*srvEnv) error
		second   func(*srvEnv) error
		parallel bool
		events   []string
	}{
		{
			name:  "two attaches to one node",
			first: publish("vol-1", "csi-n2"), second: publish("vol-2", "csi-n2"),
			events: []string{"enter " + pub + " csi-n2", "exit " + pub + " csi-n2", "enter " + pub + " csi-n2", "exit " + pub + " csi-n2"},
		},
		{
			name:  "attach and detach on one node",
			first: publish("vol-1", "csi-n2"), second: unpublish("vol-2", "csi-n2"),
			events: []string{"enter " + pub + " csi-n2", "exit " + pub + " csi-n2", "enter " + unpub + " csi-n2", "exit " + unpub + " csi-n2"},
		},
		{
			name:  "attaches to two nodes",
			first: publish("vol-1", "csi-n2"), second: publish("vol-2", "csi-n3"),
			parallel: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newSrvEnv(t, allControllerCaps)
			e.ctl.AddVolume("vol-1", 1<<30, nil)
			e.ctl.AddVolume("vol-2", 1<<30, nil)
			f := newFlight()
			e.ctl.SetHook(pub, f.hook)
			e.ctl.SetHook(unpub, f.hook)

			results := make(chan error, 2)
			go func() { results <- tc.first(e) }()
			<-f.entered // the first call is inside the plugin, held there
			go func() { results <- tc.second(e) }()

			if tc.parallel {
				// The second call reaches the plugin while the first is
				// still held: they overlap. If it queued behind the
				// first in the router instead, they do not.
				for entered := false; !entered; {
					select {
					case <-f.entered:
						entered = true
					default:
						if st := e.router.Stats(); st.AttachWaiting > 0 {
							f.proceed <- struct{}{}
							<-f.entered
							f.proceed <- struct{}{}
							<-results
							<-results
							t.Fatalf("the second attach waited for the first (router stats %+v)", st)
						}
						yield()
					}
				}
				f.proceed <- struct{}{}
				f.proceed <- struct{}{}
			} else {
				// The second call is queued in the router behind the
				// first, not on its way to the plugin.
				// If it reached the plugin instead, the calls overlap.
				for e.router.Stats() != (rpcshim.RouterStats{AttachRunning: 1, AttachWaiting: 1}) {
					select {
					case n := <-f.entered:
						f.proceed <- struct{}{}
						f.proceed <- struct{}{}
						<-results
						<-results
						t.Fatalf("a second call for %s entered the plugin while the first was in flight", n)
					default:
						yield()
					}
				}
				f.proceed <- struct{}{}
				<-f.entered
				f.proceed <- struct{}{}
			}
			must(t, <-results)
			must(t, <-results)

			most, events := f.report()
			if tc.parallel {
				expectEqual(t, most, 2)
			} else {
				expectEqual(t, most, 1)
				expectEqual(t, events, tc.events)
			}
			expectEqual(t, e.router.Stats(), rpcshim.RouterStats{})
			e.ctl.RequireNoViolations(t)
		})
	}
}
