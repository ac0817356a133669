package rpcshim_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/mounter"
	"github.com/csikit/csikit/rpcshim"
)

// whoMux answers "Who" with name.
func whoMux(name string) *rpcshim.Mux {
	m := rpcshim.NewMux()
	rpcshim.Handle(m, "Who", func(context.Context, *struct{}) (*string, error) { return &name, nil })
	return m
}

func callWho(t *testing.T, tr rpcshim.Transport, nodeID string) (string, error) {
	t.Helper()
	var got string
	err := tr.Call(context.Background(), nodeID, "Who", struct{}{}, &got)
	return got, err
}

func TestInmemTransport_Register_Lifecycle(t *testing.T) {
	tests := []struct {
		name    string
		steps   func(tr *rpcshim.InmemTransport)
		want    string // reply of node n1, if reachable
		wantErr error
	}{
		{"registered", func(tr *rpcshim.InmemTransport) { tr.Register("n1", whoMux("first")) }, "first", nil},
		{"re-registered replaces the endpoint", func(tr *rpcshim.InmemTransport) {
			tr.Register("n1", whoMux("first"))
			tr.Register("n1", whoMux("second"))
		}, "second", nil},
		{"deregistered", func(tr *rpcshim.InmemTransport) {
			tr.Register("n1", whoMux("first"))
			tr.Deregister("n1")
		}, "", csi.ErrNodeNotReady},
		{"set down", func(tr *rpcshim.InmemTransport) {
			tr.Register("n1", whoMux("first"))
			tr.SetDown("n1", true)
		}, "", csi.ErrNodeNotReady},
		{"set down then up", func(tr *rpcshim.InmemTransport) {
			tr.Register("n1", whoMux("first"))
			tr.SetDown("n1", true)
			tr.SetDown("n1", false)
		}, "first", nil},
		{"stays down across a restart", func(tr *rpcshim.InmemTransport) {
			tr.Register("n1", whoMux("first"))
			tr.SetDown("n1", true)
			tr.Register("n1", whoMux("second"))
		}, "", csi.ErrNodeNotReady},
		{"down before registration is ignored", func(tr *rpcshim.InmemTransport) {
			tr.SetDown("n1", true)
			tr.Register("n1", whoMux("first"))
		}, "first", nil},
		{"other node down", func(tr *rpcshim.InmemTransport) {
			tr.Register("n1", whoMux("first"))
			tr.Register("n2", whoMux("other"))
			tr.SetDown("n2", true)
		}, "first", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := rpcshim.NewInmemTransport()
			tc.steps(tr)
			got, err := callWho(t, tr, "n1")
			if tc.wantErr != nil {
				expectIs(t, err, tc.wantErr)
				expectUnreachable(t, err, "n1")
				return
			}
			must(t, err)
			expectEqual(t, got, tc.want)
		})
	}
}

// TestInmemTransport_Call_HandlerIgnoresContext checks that Call honours
// ctx even when the handler does not, as the network would.
func TestInmemTransport_Call_HandlerIgnoresContext(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	finished := make(chan struct{})
	m := rpcshim.NewMux()
	rpcshim.Handle(m, "Stuck", func(context.Context, *struct{}) (*struct{}, error) {
		defer close(finished)
		close(started)
		<-release
		return &struct{}{}, nil
	})
	tr := rpcshim.NewInmemTransport()
	tr.Register("n1", m)

	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	err := tr.Call(ctx, "n1", "Stuck", struct{}{}, nil)
	expectIs(t, err, context.Canceled)
	expectClass(t, err, csi.ClassUncertain)
	close(release)
	<-finished
}

// TestInmemTransport_Close_WaitsForHandlers checks that Close returns
// only once a handler whose caller gave up has returned. synctest.Wait
// returns when every goroutine of the test is blocked: the handler on
// release, and Close, if it waits, on the handler.
func TestInmemTransport_Close_WaitsForHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		started := make(chan struct{})
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Stuck", func(context.Context, *struct{}) (*struct{}, error) {
			close(started)
			<-release
			return &struct{}{}, nil
		})
		tr := rpcshim.NewInmemTransport()
		tr.Register("n1", m)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-started; cancel() }()
		expectIs(t, tr.Call(ctx, "n1", "Stuck", struct{}{}, nil), context.Canceled)

		closed := make(chan error, 1)
		go func() { closed <- tr.Close() }()
		synctest.Wait()
		select {
		case err := <-closed:
			t.Errorf("Close returned (%v) while the handler was still running", err)
			close(release)
			return
		default:
		}
		close(release)
		must(t, <-closed)
	})
}

// TestInmemTransport_Close_RefusesCalls checks that a closed transport
// sends nothing and says so as the contract says for a node it cannot
// reach.
func TestInmemTransport_Close_RefusesCalls(t *testing.T) {
	ran := false
	m := rpcshim.NewMux()
	rpcshim.Handle(m, "Echo", func(ctx context.Context, req *echoReq) (*echoResp, error) {
		ran = true
		return echo(ctx, req)
	})
	tr := rpcshim.NewInmemTransport()
	tr.Register("n1", m)
	must(t, tr.Close())
	must(t, tr.Close()) // a second Close is harmless

	err := tr.Call(context.Background(), "n1", "Echo", &echoReq{}, &echoResp{})
	expectIs(t, err, csi.ErrUnavailable)
	expectUnreachable(t, err, "n1")
	if ran {
		t.Error("the handler ran after Close")
	}
}

// waitingUnmounter is an Unmounter that honours ctx: it tells started
// and waits for the end of ctx.
type waitingUnmounter struct{ started chan struct{} }

func (u *waitingUnmounter) UnmountVolume(ctx context.Context, _ *mounter.UnmountRequest) error {
	close(u.started)
	<-ctx.Done()
	return ctx.Err()
}

// TestInmemTransport_Call_EndpointMethods checks that a call to a node
// endpoint returns when ctx ends, whether the method is the endpoint's
// own (which runs on the caller's goroutine and ends with ctx) or one a
// node agent added to its Mux that ignores ctx (which runs on its own
// goroutine, as any other handler), and that both still copy values.
func TestInmemTransport_Call_EndpointMethods(t *testing.T) {
	tests := []struct {
		name   string
		method string
		req    any
	}{
		{"endpoint's own method", rpcshim.MethodNodeDetach, &rpcshim.NodeDetachRequest{NodeID: "n1", Namespace: "default", VolumeID: "v", AllocationID: "a"}},
		{"agent's method that ignores ctx", "Agent.Stuck", struct{}{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := &waitingUnmounter{started: make(chan struct{})}
			ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: "n1", Plugins: &epPlugins{}, Mounter: u})
			must(t, err)
			release := make(chan struct{})
			defer close(release)
			rpcshim.Handle(ep.Mux(), "Agent.Stuck", func(context.Context, *struct{}) (*struct{}, error) {
				close(u.started)
				<-release
				return &struct{}{}, nil
			})
			tr := rpcshim.NewInmemTransport()
			tr.Register("n1", ep)

			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-u.started; cancel() }()
			err = tr.Call(ctx, "n1", tc.method, tc.req, nil)
			expectIs(t, err, context.Canceled)
			expectClass(t, err, csi.ClassUncertain)
		})
	}

	// The endpoint's own methods get a copy of the request too.
	u := &epUnmounter{}
	ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: "n1", Plugins: &epPlugins{}, Mounter: u})
	must(t, err)
	tr := rpcshim.NewInmemTransport()
	tr.Register("n1", ep)
	usage := mounter.Usage{ClaimMode: csi.ClaimWrite, AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	req := &rpcshim.NodeDetachRequest{NodeID: "n1", Namespace: "default", VolumeID: "v", AllocationID: "a", Usage: &usage}
	must(t, tr.Call(context.Background(), "n1", rpcshim.MethodNodeDetach, req, nil))
	req.Usage.ClaimMode = csi.ClaimRead
	if got := u.requests(); len(got) != 1 || got[0].Usage.ClaimMode != csi.ClaimWrite {
		t.Errorf("unmount requests = %+v, want one with the usage as sent", got)
	}
}

// TestInmemTransport_Call_CopiesValues checks that caller and handler share
// no memory, as they would not over the network.
func TestInmemTransport_Call_CopiesValues(t *testing.T) {
	kept := make(chan *echoReq, 1)
	m := rpcshim.NewMux()
	rpcshim.Handle(m, "Echo", func(ctx context.Context, req *echoReq) (*echoResp, error) {
		kept <- req
		return echo(ctx, req)
	})
	tr := rpcshim.NewInmemTransport()
	tr.Register("n1", m)
	req := &echoReq{Name: "a", Tags: []string{"x"}}
	var resp echoResp
	must(t, tr.Call(context.Background(), "n1", "Echo", req, &resp))

	req.Tags[0] = "changed by caller"
	expectEqual(t, (<-kept).Tags, []string{"x"})
	expectEqual(t, resp.Tags, []string{"x"})
}

func TestInmemNodeStatuses_NodeStatus(t *testing.T) {
	var s rpcshim.InmemNodeStatuses // the zero value is ready
	ctx := context.Background()
	got, err := s.NodeStatus(ctx, "n1")
	must(t, err)
	expectEqual(t, got, csi.NodeStatusUnknown)

	tests := []struct {
		node   string
		status csi.NodeStatus
	}{
		{"n1", csi.NodeStatusReady},
		{"n2", csi.NodeStatusDown},
		{"n3", csi.NodeStatusGone},
		{"n1", csi.NodeStatusDown},
	}
	for _, tc := range tests {
		t.Run(tc.node+"="+tc.status.String(), func(t *testing.T) {
			s.Set(tc.node, tc.status)
			got, err := s.NodeStatus(ctx, tc.node)
			must(t, err)
			expectEqual(t, got, tc.status)
		})
	}
}

func TestInmemNodeStatuses_Set_Concurrent(t *testing.T) {
	var s rpcshim.InmemNodeStatuses
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { s.Set("n1", csi.NodeStatusReady) })
		wg.Go(func() {
			if _, err := s.NodeStatus(context.Background(), "n1"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, _ := s.NodeStatus(context.Background(), "n1")
	expectEqual(t, got, csi.NodeStatusReady)
}

func TestInmemTransport_Register_NilHandlerPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Register(nil) did not panic")
		}
	}()
	rpcshim.NewInmemTransport().Register("n1", nil)
}
