package plugintest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/mounter"
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

// errAgentCrash is what the node agent's NodeUnstageVolume returns when
// the harness stops it there: as if the agent died after
// NodeUnpublishVolume, the call never reaches the plugin.
var errAgentCrash = fmt.Errorf("%w: plugintest: the node agent stopped before NodeUnstageVolume (a fault the harness injects)", csi.ErrUnavailable)

// crashPoint, armed, makes the next NodeUnstageVolume of the node agent
// fail with errAgentCrash before it reaches the plugin.
type crashPoint struct{ armed atomic.Bool }

// faultPlugins hands out node clients that stop at the crash point; the
// calls they pass on are logged by the recordingPlugins below them.
type faultPlugins struct {
	recordingPlugins
	crash *crashPoint
}

func (p faultPlugins) NodePlugin(id string) (plugin.NodeClient, *csi.PluginInfo, error) {
	c, info, err := p.recordingPlugins.NodePlugin(id)
	if err != nil || c == nil {
		return c, info, err
	}
	return &crashingNode{NodeClient: c, crash: p.crash}, info, nil
}

// crashingNode is a node client that stops at the crash point.
type crashingNode struct {
	plugin.NodeClient
	crash *crashPoint
}

func (n *crashingNode) NodeUnstageVolume(ctx context.Context, r *plugin.NodeUnstageRequest) error {
	if n.crash.armed.CompareAndSwap(true, false) {
		return errAgentCrash
	}
	return n.NodeClient.NodeUnstageVolume(ctx, r)
}

// unmountAcrossRestart is the last unmount under Config.Faults: the
// node agent stops after NodeUnpublishVolume, before NodeUnstageVolume
// (and so before the release's ControllerUnpublishVolume), restarts
// from its state directory and unmounts again. The plugin must then see
// nothing but the outstanding NodeUnstageVolume and repeats, with
// identical arguments, of what it already answered.
func (l *run) unmountAcrossRestart(ctx context.Context, a *alloc) {
	if !l.stages() {
		l.unmount(ctx, a)
		return
	}
	step := fmt.Sprintf("unmount stopped before NodeUnstageVolume (allocation %d)", a.n)
	if !l.begin(ctx, step) {
		return
	}
	from := l.calls.len()
	sctx, cancel := l.stepCtx(ctx)
	l.st.crash.armed.Store(true)
	err := l.st.mnt.UnmountVolume(sctx, mounter.NewUnmountRequest(namespace, l.volID, a.claim))
	cancel()
	if l.st.crash.armed.Swap(false) || !errors.Is(err, errAgentCrash) {
		l.fail(ctx, Failure{Step: step, Expect: "the mounter to send NodeUnstageVolume after NodeUnpublishVolume (a bug in the harness or csikit, not in the plugin)",
			Detail: fmt.Sprint(err), Fatal: true})
		return
	}
	before := l.calls.all()[from:]
	a.mounted = false // unpublished: the mounter tracks only the stage
	l.restartNode(ctx, "during the release, after NodeUnpublishVolume")
	after := l.calls.len()
	if !l.unmount(ctx, a) {
		return
	}
	l.onlyRepeats(ctx, before, l.calls.all()[after:])
}

// onlyRepeats checks that the calls the restarted stack made are the
// outstanding NodeUnstageVolume and repeats of calls in before.
func (l *run) onlyRepeats(ctx context.Context, before, since []call) {
	const step = "only idempotent repeats after the restart (release)"
	if !l.begin(ctx, step) {
		return
	}
	unstages := 0
	for _, c := range since {
		if c.Method == methodNodeUnstage {
			unstages++
			continue
		}
		if !slices.ContainsFunc(before, func(b call) bool { return b.Method == c.Method && reflect.DeepEqual(b.Req, c.Req) }) {
			l.fail(ctx, Failure{Step: step, Call: c.Method, Got: "the restarted node agent sent " + c.Method + " with new arguments",
				Expect: "a node agent that restarts mid-release repeats only what the plugin already answered, then NodeUnstageVolume (a bug in csikit, not in the plugin)"})
		}
	}
	if unstages != 1 {
		l.fail(ctx, Failure{Step: step, Call: methodNodeUnstage, Got: fmt.Sprintf("%d NodeUnstageVolume calls after the restart", unstages),
			Expect: "exactly one: the one the stopped agent never sent (a bug in csikit, not in the plugin)"})
	}
}
