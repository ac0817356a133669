package plugintest

import (
	"context"
	"fmt"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// This file holds the faults of Config.Faults and Config.RestartPlugin:
// the orchestrator restarting its own node agent mid-lifecycle, calls
// cancelled after the plugin may have received them, and the plugin
// itself restarted between steps. None needs the plugin's cooperation.

// cancelAfter is the deadline of a call the harness cancels on purpose:
// long enough for the request to reach the plugin, shorter than a
// plugin that attaches real storage takes to answer.
const cancelAfter = 50 * time.Millisecond

// restartNode restarts the node agent, its mounter and node endpoint,
// from the state directory, as a node agent does after a crash, while
// the plugin keeps running. The new mounter must find every mount the
// old one made; the order check later holds the stack to calling the
// plugin once per step (a restart that made it stage again would show
// there).
func (l *run) restartNode(ctx context.Context, when string) {
	step := "restart the node agent (" + when + ")"
	if !l.begin(ctx, step) {
		return
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	if err := l.st.restartNode(); err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "the node agent to start again from its state directory", Detail: err.Error(), Fatal: true})
		return
	}
	for _, a := range l.allocs {
		has, err := l.st.mnt.HasMount(ctx, namespace, l.volID, a.id)
		switch {
		case err != nil:
			l.fail(ctx, Failure{Step: step, Expect: "the restarted mounter to read its state", Detail: err.Error(), Fatal: true})
			return
		case has != a.mounted:
			l.fail(ctx, Failure{Step: step, Got: fmt.Sprintf("the restarted mounter reports allocation %d mounted=%t, not %t", a.n, has, a.mounted),
				Expect: "a restarted node agent resumes from the node state on disk (a bug in csikit, not in the plugin)", Fatal: true})
			return
		}
	}
}

// cancelRetry sends each of the stack's publish and stage calls again
// with a deadline that ends at once, as a CO whose call timed out after
// the plugin received it, then retries it with the step's time: the
// retry must succeed.
func (l *run) cancelRetry(ctx context.Context) {
	type repeat struct {
		method string
		call   func(ctx context.Context, req any) error
	}
	for _, r := range []repeat{
		{methodControllerPublish, func(ctx context.Context, req any) error {
			_, err := l.ctrl.ControllerPublishVolume(ctx, req.(*plugin.ControllerPublishRequest))
			return err
		}},
		{methodNodeStage, func(ctx context.Context, req any) error {
			return l.node.NodeStageVolume(ctx, req.(*plugin.NodeStageRequest))
		}},
		{methodNodePublish, func(ctx context.Context, req any) error {
			return l.node.NodePublishVolume(ctx, req.(*plugin.NodePublishRequest))
		}},
	} {
		c, ok := l.calls.last(0, r.method, nil)
		if !ok || c.Err != nil {
			continue
		}
		step := "cancelled call retried (" + r.method + ")"
		if !l.begin(ctx, step) {
			return
		}
		short, cancel := context.WithTimeout(ctx, cancelAfter)
		_ = r.call(short, c.Req) // cancelled or done: either is fine
		cancel()
		sctx, cancel := l.stepCtx(ctx)
		if err := r.call(sctx, c.Req); err != nil {
			l.fail(sctx, l.failure(sctx, step, err, "the spec requires OK when a call the CO cancelled (or that timed out) is retried with identical arguments"))
		}
		cancel()
	}
}

// restartPlugin runs Config.RestartPlugin, waits until the plugin is
// ready again, and repeats the calls that hold the volume on the node:
// a restarted plugin must still know what it published.
func (l *run) restartPlugin(ctx context.Context) {
	const step = "restart the plugin"
	if l.cfg.RestartPlugin == nil || !l.begin(ctx, step) {
		return
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	if err := l.cfg.RestartPlugin(ctx); err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "Config.RestartPlugin to restart the plugin", Detail: err.Error(), Fatal: true})
		return
	}
	for _, socket := range uniq(l.ctrlSocket, l.nodeSocket) {
		conn, err := l.raw.conn(socket)
		if err != nil {
			l.fail(ctx, Failure{Step: step, Expect: "a gRPC client of " + socket, Detail: err.Error(), Fatal: true})
			return
		}
		if !l.waitReady(ctx, step, csipb.NewIdentityClient(conn), socket) {
			return
		}
	}
	if c, ok := l.calls.last(0, methodNodePublish, nil); ok && c.Err == nil {
		if err := reconnected(ctx, func(ctx context.Context) error {
			return l.node.NodePublishVolume(ctx, c.Req.(*plugin.NodePublishRequest))
		}); err != nil {
			l.fail(ctx, l.failure(ctx, step, err, "after a restart, the spec still requires OK when the volume is already published at target_path with identical arguments"))
		}
	}
	if c, ok := l.calls.last(0, methodControllerPublish, nil); ok && c.Err == nil && l.ctrl != nil {
		if err := reconnected(ctx, func(ctx context.Context) error {
			_, err := l.ctrl.ControllerPublishVolume(ctx, c.Req.(*plugin.ControllerPublishRequest))
			return err
		}); err != nil {
			l.fail(ctx, l.failure(ctx, step, err, "after a restart, "+expectPublishCtx))
		}
	}
}

// reconnected makes a call on a client whose plugin restarted: its
// connection may answer Unavailable until it notices, a bounded number
// of times.
func reconnected(ctx context.Context, call func(context.Context) error) error {
	delay := 20 * time.Millisecond
	for tries := 1; ; tries++ {
		err := call(ctx)
		if csi.CodeOf(err) != csi.CodeUnavailable || tries >= maxUnavailable || !sleep(ctx, delay) {
			return err
		}
		delay *= 2
	}
}

// waitReady probes the plugin until it answers ready or ctx ends.
func (l *run) waitReady(ctx context.Context, step string, ic csipb.IdentityClient, socket string) bool {
	for {
		resp, err := ic.Probe(ctx, &csipb.ProbeRequest{}, grpc.WaitForReady(true))
		if err == nil && (resp.GetReady() == nil || resp.GetReady().GetValue()) {
			return true
		}
		if ctx.Err() != nil || !sleep(ctx, 20*time.Millisecond) {
			l.fail(ctx, Failure{Step: step, Call: methodProbe, Code: csi.Code(status.Code(err)),
				Expect: fmt.Sprintf("the plugin at %s must be ready again within the step's %s (Config.Timeout) after Config.RestartPlugin", socket, l.cfg.Timeout), Fatal: true})
			return false
		}
	}
}

func uniq(a, b string) []string {
	if a == b || a == "" {
		return []string{b}
	}
	return []string{a, b}
}
