package rpcshimtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

// echoReq and echoResp are the messages of the suite's methods: a
// string, and a slice that must not be shared between the two sides.
type echoReq struct {
	Name string
	Tags []string
}

type echoResp struct {
	Greeting string
	Tags     []string
}

func echo(_ context.Context, req *echoReq) (*echoResp, error) {
	return &echoResp{Greeting: "hello " + req.Name, Tags: req.Tags}, nil
}

// failing registers, under method, a handler that returns err.
func failing(m *rpcshim.Mux, method string, err error) {
	rpcshim.Handle(m, method, func(context.Context, *echoReq) (*echoResp, error) { return nil, err })
}

// cases are the rules of the Transport contract, one per subtest.
var cases = []struct {
	name string
	run  func(t *testing.T, h *Harness)
}{
	{"typed round trip through a Mux", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Echo", echo)
		h.Serve(t, "n1", m)
		var resp echoResp
		err := h.Transport.Call(context.Background(), "n1", "Echo", &echoReq{Name: "n1", Tags: []string{"a", "b"}}, &resp)
		must(t, err)
		expectEqual(t, resp, echoResp{Greeting: "hello n1", Tags: []string{"a", "b"}})
	}},
	{"nil resp discards the reply", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Echo", echo)
		h.Serve(t, "n1", m)
		must(t, h.Transport.Call(context.Background(), "n1", "Echo", &echoReq{Name: "x"}, nil))
	}},
	{"nil reply leaves resp untouched", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Nothing", func(context.Context, *echoReq) (*echoResp, error) { return nil, nil })
		h.Serve(t, "n1", m)
		resp := echoResp{Greeting: "kept"}
		must(t, h.Transport.Call(context.Background(), "n1", "Nothing", &echoReq{}, &resp))
		expectEqual(t, resp.Greeting, "kept")
	}},
	{"unknown method is not supported", func(t *testing.T, h *Harness) {
		h.Serve(t, "n1", rpcshim.NewMux())
		err := h.Transport.Call(context.Background(), "n1", "NoSuchMethod", &echoReq{}, &echoResp{})
		assertRemote(t, err, `not supported by plugin: the node does not serve method "NoSuchMethod"; check that server and node run compatible csikit versions`,
			csi.ClassFinal, csi.ErrNotSupported)
	}},
	{"sentinel keeps identity and class", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		failing(m, "Mount", fmt.Errorf("on node n1: %w", csi.ErrPluginNotFound))
		h.Serve(t, "n1", m)
		err := h.Transport.Call(context.Background(), "n1", "Mount", &echoReq{}, &echoResp{})
		assertRemote(t, err, "on node n1: plugin not found", csi.ClassRetryable, csi.ErrPluginNotFound)
		expectEqual(t, csi.IsRetryable(err), true)
		if errors.Is(err, csi.ErrPluginUnhealthy) {
			t.Errorf("error %v matches a sentinel the node did not wrap", err)
		}
	}},
	{"invalid ID error keeps ErrInvalidID", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		failing(m, "Mount", fmt.Errorf("mount: %w", csi.ValidateVolumeID("../etc")))
		h.Serve(t, "n1", m)
		err := h.Transport.Call(context.Background(), "n1", "Mount", &echoReq{}, nil)
		assertRemote(t, err, `mount: invalid volume ID "../etc": byte 2 ('/') is not a letter, digit, '-', '_' or '.'`, csi.ClassFinal, csi.ErrInvalidID)
	}},
	{"plugin NotFound keeps its code for teardown", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		failing(m, "Unmount", fmt.Errorf("unpublish volume v1: %w",
			&csi.RPCError{Method: "NodeUnpublishVolume", Code: csi.CodeNotFound, Message: "volume v1 is not published"}))
		h.Serve(t, "n1", m)
		err := h.Transport.Call(context.Background(), "n1", "Unmount", &echoReq{}, &echoResp{})
		assertRemote(t, err, "unpublish volume v1: NodeUnpublishVolume: NotFound: volume v1 is not published", csi.ClassFinal, nil)
		expectEqual(t, csi.CodeOf(err), csi.CodeNotFound)
		expectEqual(t, csi.TeardownDone(err), true)
		var rpc *csi.RPCError
		if !errors.As(err, &rpc) {
			t.Fatalf("error %v holds no *csi.RPCError", err)
		}
		expectEqual(t, *rpc, csi.RPCError{Method: "NodeUnpublishVolume", Code: csi.CodeNotFound, Message: "volume v1 is not published"})
	}},
	{"plugin deadline stays uncertain", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		failing(m, "Stage", &csi.RPCError{Method: "NodeStageVolume", Code: csi.CodeDeadlineExceeded, Message: "timed out"})
		h.Serve(t, "n1", m)
		err := h.Transport.Call(context.Background(), "n1", "Stage", &echoReq{}, nil)
		assertRemote(t, err, "NodeStageVolume: DeadlineExceeded: timed out", csi.ClassUncertain, nil)
		expectEqual(t, csi.CodeOf(err), csi.CodeDeadlineExceeded)
	}},
	{"node-side context error stays uncertain", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		failing(m, "Stage", fmt.Errorf("plugin call timed out on the node: %w", context.DeadlineExceeded))
		h.Serve(t, "n1", m)
		err := h.Transport.Call(context.Background(), "n1", "Stage", &echoReq{}, nil)
		assertRemote(t, err, "plugin call timed out on the node: context deadline exceeded", csi.ClassUncertain, nil)
	}},
	{"plain error is final", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		failing(m, "Stage", errors.New("disk on fire"))
		h.Serve(t, "n1", m)
		err := h.Transport.Call(context.Background(), "n1", "Stage", &echoReq{}, nil)
		assertRemote(t, err, "disk on fire", csi.ClassFinal, nil)
		expectEqual(t, csi.CodeOf(err), csi.CodeUnknown)
	}},
	{"unknown node is not ready", func(t *testing.T, h *Harness) {
		err := h.Transport.Call(context.Background(), "ghost", "Echo", &echoReq{}, &echoResp{})
		expectUnreachable(t, err, "ghost")
	}},
	{"down node is unreachable", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Echo", echo)
		h.Serve(t, "n1", m)
		must(t, h.Transport.Call(context.Background(), "n1", "Echo", &echoReq{}, nil))
		h.Down(t, "n1")
		err := h.Transport.Call(context.Background(), "n1", "Echo", &echoReq{}, &echoResp{})
		expectUnreachable(t, err, "n1")
	}},
	{"deadline reaches the handler", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		sawDeadline := make(chan bool, 1)
		rpcshim.Handle(m, "Block", func(ctx context.Context, _ *echoReq) (*echoResp, error) {
			_, ok := ctx.Deadline()
			sawDeadline <- ok
			<-ctx.Done()
			return nil, ctx.Err()
		})
		h.Serve(t, "n1", m)
		// The deadline is what the call is about, not a threshold: the
		// handler blocks until it passes, however long that takes.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		err := h.Transport.Call(ctx, "n1", "Block", &echoReq{}, &echoResp{})
		mustErr(t, err)
		expectIs(t, err, context.DeadlineExceeded)
		expectClass(t, err, csi.ClassUncertain)
		expectContains(t, err.Error(), "n1")
		if !<-sawDeadline {
			t.Error("the handler's ctx has no deadline")
		}
	}},
	{"cancel reaches the handler", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		started := make(chan struct{})
		returned := make(chan error, 1)
		rpcshim.Handle(m, "Block", func(ctx context.Context, _ *echoReq) (*echoResp, error) {
			close(started)
			<-ctx.Done()
			returned <- ctx.Err()
			return nil, ctx.Err()
		})
		h.Serve(t, "n1", m)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-started; cancel() }()
		err := h.Transport.Call(ctx, "n1", "Block", &echoReq{}, &echoResp{})
		expectIs(t, err, context.Canceled)
		expectClass(t, err, csi.ClassUncertain)
		expectIs(t, <-returned, context.Canceled)
	}},
	{"done ctx is not sent", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		ran := make(chan struct{}, 1)
		rpcshim.Handle(m, "Echo", func(ctx context.Context, req *echoReq) (*echoResp, error) {
			ran <- struct{}{}
			return echo(ctx, req)
		})
		h.Serve(t, "n1", m)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := h.Transport.Call(ctx, "n1", "Echo", &echoReq{}, &echoResp{})
		expectIs(t, err, context.Canceled)
		if len(ran) != 0 {
			t.Error("the handler ran")
		}
	}},
	{"invalid node ID is refused", func(t *testing.T, h *Harness) {
		err := h.Transport.Call(context.Background(), "../n1", "Echo", &echoReq{}, &echoResp{})
		expectIs(t, err, csi.ErrInvalidID)
		expectClass(t, err, csi.ClassFinal)
	}},
	{"request that does not encode is not sent", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Echo", echo)
		h.Serve(t, "n1", m)
		err := h.Transport.Call(context.Background(), "n1", "Echo", make(chan int), &echoResp{})
		expectIs(t, err, csi.ErrInvalidRequest)
		expectClass(t, err, csi.ClassFinal)
	}},
	{"request of the wrong shape is invalid", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Echo", echo)
		h.Serve(t, "n1", m)
		err := h.Transport.Call(context.Background(), "n1", "Echo", map[string]int{"Name": 3}, &echoResp{})
		expectIs(t, err, csi.ErrInvalidRequest)
		expectClass(t, err, csi.ClassFinal)
	}},
	{"reply of the wrong shape is final", func(t *testing.T, h *Harness) {
		m := rpcshim.NewMux()
		rpcshim.Handle(m, "Echo", echo)
		h.Serve(t, "n1", m)
		var wrong struct{ Greeting int }
		err := h.Transport.Call(context.Background(), "n1", "Echo", &echoReq{}, &wrong)
		mustErr(t, err)
		expectClass(t, err, csi.ClassFinal)
		expectContains(t, err.Error(), "n1")
	}},
	{"concurrent calls to several nodes", func(t *testing.T, h *Harness) {
		for _, id := range []string{"n1", "n2", "n3"} {
			m := rpcshim.NewMux()
			rpcshim.Handle(m, "Who", func(context.Context, *echoReq) (*echoResp, error) { return &echoResp{Greeting: id}, nil })
			h.Serve(t, id, m)
		}
		var wg sync.WaitGroup
		for i := range 60 {
			id := fmt.Sprintf("n%d", i%3+1)
			wg.Go(func() {
				var resp echoResp
				if err := h.Transport.Call(context.Background(), id, "Who", &echoReq{}, &resp); err != nil {
					t.Errorf("call %s: %v", id, err)
					return
				}
				expectEqual(t, resp.Greeting, id)
			})
		}
		wg.Wait()
	}},
}
