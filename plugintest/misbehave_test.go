package plugintest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/plugintest"
)

// full is a monolith fake with every capability the lifecycle uses.
func full(t *testing.T) *csitest.Plugin {
	return csitest.Start(t, csitest.Config{
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true},
		Node:       csi.NodeCapabilities{StageUnstageVolume: true},
	})
}

// fakeConfig runs the lifecycle alone: these tests count the
// lifecycle's failures, and a fault on one method would also fail the
// coverage rows that call it (see TestCheck_BrokenVariants for those).
func fakeConfig(p *csitest.Plugin) plugintest.Config {
	return plugintest.Config{Endpoint: p.Endpoint(), DataCheck: plugintest.DataWriterOnly, SkipChecks: "."}
}

// A second identical NodePublishVolume answers AlreadyExists: the
// idempotency check names it, and every other step still passes.
func TestCheck_NonIdempotentPublish(t *testing.T) {
	p := full(t)
	var mu sync.Mutex
	seen := map[string]bool{}
	p.SetHook(csitest.MethodNodePublishVolume, func(_ context.Context, _ string, req any) error {
		target := req.(*csipb.NodePublishVolumeRequest).GetTargetPath()
		mu.Lock()
		defer mu.Unlock()
		if seen[target] {
			return status.Errorf(codes.AlreadyExists, "%s is already published", target)
		}
		seen[target] = true
		return nil
	})

	r := check(t, fakeConfig(p))

	f := requireOneFailure(t, r, `step "publish (idempotent repeat)": NodePublishVolume returned AlreadyExists; the spec requires OK when the volume is already published at target_path with identical arguments`)
	if f.Fatal {
		t.Errorf("an idempotency failure stopped the lifecycle: %s", f)
	}
	requireClean(t, p, true, "")
	p.RequireNoViolations(t)
}

// ControllerPublishVolume answers NotFound for the volume CreateVolume
// just returned: the claim fails, the rest is skipped, and the cleanup
// deletes the volume.
func TestCheck_NotFoundForExistingVolume(t *testing.T) {
	p := full(t)
	p.FailAlways(csitest.MethodControllerPublishVolume, codes.NotFound)

	r := check(t, fakeConfig(p))

	f := requireOneFailure(t, r, `step "claim (allocation 1)": ControllerPublishVolume returned NotFound; the spec requires OK: the spec reserves NotFound for a volume or node that does not exist, and volume_id "vol-1" was returned by CreateVolume and not deleted while node_id "csitest-node" is what NodeGetInfo reported`)
	if !f.Fatal {
		t.Errorf("a failed claim did not stop the lifecycle: %s", f)
	}
	for _, s := range r.Steps() {
		if s.Name == "mount (allocation 1)" && s.Status != plugintest.StatusSkip {
			t.Errorf("mount after a failed claim: %s", s.Status)
		}
	}
	if n := p.CallCount(csitest.MethodNodeStageVolume) + p.CallCount(csitest.MethodNodePublishVolume); n != 0 {
		t.Errorf("%d node calls after a failed claim", n)
	}
	requireClean(t, p, true, "")
}

// A plugin that does not advertise STAGE_UNSTAGE_VOLUME but refuses
// NodePublishVolume because the volume is not staged: the failure says
// the plugin asked for an order its capabilities do not announce.
func TestCheck_StagingUnadvertisedButRequired(t *testing.T) {
	p := csitest.Start(t, csitest.Config{
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true},
	})
	p.SetHook(csitest.MethodNodePublishVolume, func(context.Context, string, any) error {
		return status.Error(codes.FailedPrecondition, "volume is not staged; call NodeStageVolume first")
	})

	r := check(t, fakeConfig(p))

	requireOneFailure(t, r, `step "mount (allocation 1)": NodePublishVolume returned FailedPrecondition; the spec requires OK: the plugin does not advertise STAGE_UNSTAGE_VOLUME, so the CO publishes without NodeStageVolume; a plugin that reports staging unnecessary must not require it (plugin message: "volume is not staged; call NodeStageVolume first")`)
	// The cleanups released the claim (ControllerUnpublish) and deleted
	// the volume.
	requireClean(t, p, true, "")
	p.RequireSequence(t, csitest.MethodControllerPublishVolume, csitest.MethodNodePublishVolume,
		csitest.MethodControllerUnpublishVolume, csitest.MethodDeleteVolume)
}

// With StrictUnstage, a plugin whose NodeUnstageVolume succeeds while a
// target is still published (csitest's fake tolerates it and records a
// violation) fails the probe; the harness stages the volume again and
// the lifecycle completes.
func TestCheck_UnstageWhilePublishedTolerated(t *testing.T) {
	p := full(t)
	cfg := fakeConfig(p)
	cfg.StrictUnstage = true

	r := check(t, cfg)

	requireOneFailure(t, r, `step "unstage while published (probe)": NodeUnstageVolume returned OK; with Config.StrictUnstage the harness requires FailedPrecondition while the volume is still published at 2 target(s)`)
	vs := p.Violations()
	if len(vs) != 1 || vs[0].Rule != csitest.RuleUnstageWhilePublished {
		t.Errorf("want the fake to record the probe as %s, got %v", csitest.RuleUnstageWhilePublished, vs)
	}
	requireClean(t, p, true, "")
}

// A plugin that refuses the probe passes it.
func TestCheck_UnstageWhilePublishedRefused(t *testing.T) {
	p := full(t)
	p.SetHook(csitest.MethodNodeUnstageVolume, func(_ context.Context, _ string, req any) error {
		id := req.(*csipb.NodeUnstageVolumeRequest).GetVolumeId()
		if v, ok := p.Volume(id); ok && len(v.Published) > 0 {
			return status.Errorf(codes.FailedPrecondition, "volume %s is still published", id)
		}
		return nil
	})
	cfg := fakeConfig(p)
	cfg.StrictUnstage = true

	r := check(t, cfg)

	if r.Failed() {
		t.Fatalf("failures:\n\t%s", strings.Join(failuresOf(r), "\n\t"))
	}
	p.RequireNoViolations(t)
}

// NodePublishVolume of an unknown volume answers Internal, not NotFound.
func TestCheck_WrongCodeForUnknownVolume(t *testing.T) {
	p := full(t)
	p.SetHook(csitest.MethodNodePublishVolume, func(_ context.Context, _ string, req any) error {
		id := req.(*csipb.NodePublishVolumeRequest).GetVolumeId()
		if _, ok := p.Volume(id); !ok {
			return status.Errorf(codes.Internal, "lookup of %s failed", id)
		}
		return nil
	})

	r := check(t, fakeConfig(p))

	f := requireOneFailure(t, r, `step "publish of an unknown volume": NodePublishVolume returned Internal; the spec requires NotFound when volume_id does not exist (volume_id "vol-`)
	if f.Call != "NodePublishVolume" || f.Code != csi.CodeInternal || f.Fatal {
		t.Errorf("failure fields: %+v", f)
	}
	requireClean(t, p, true, "")
}

// More misbehaviours, one failure each, none fatal.
func TestCheck_Misbehaviour(t *testing.T) {
	for _, c := range []struct {
		name      string
		misbehave func(p *csitest.Plugin)
		want      string
	}{{
		name: "CreateVolume repeat refused",
		misbehave: func(p *csitest.Plugin) {
			var mu sync.Mutex
			n := 0
			p.SetHook(csitest.MethodCreateVolume, func(_ context.Context, _ string, req any) error {
				mu.Lock()
				defer mu.Unlock()
				if req.(*csipb.CreateVolumeRequest).GetName() == "" {
					return nil
				}
				if n++; n == 2 {
					return status.Error(codes.AlreadyExists, "name taken")
				}
				return nil
			})
		},
		want: `step "create volume (idempotent repeat)": CreateVolume returned AlreadyExists; the spec requires OK and the same volume when CreateVolume is repeated with the same name and arguments`,
	}, {
		name: "missing field accepted",
		misbehave: func(p *csitest.Plugin) {
			p.SetHook(csitest.MethodControllerPublishVolume, func(_ context.Context, _ string, req any) error {
				if req.(*csipb.ControllerPublishVolumeRequest).GetNodeId() == "" {
					return status.Error(codes.NotFound, "no such node")
				}
				return nil
			})
		},
		want: `step "controller publish without a node ID": ControllerPublishVolume returned NotFound; the spec requires InvalidArgument when a required field is missing (ControllerPublishVolumeRequest.node_id)`,
	}, {
		name: "DeleteVolume of a deleted volume fails",
		misbehave: func(p *csitest.Plugin) {
			p.SetHook(csitest.MethodDeleteVolume, func(_ context.Context, _ string, req any) error {
				if _, ok := p.Volume(req.(*csipb.DeleteVolumeRequest).GetVolumeId()); !ok {
					return status.Error(codes.Internal, "no such volume")
				}
				return nil
			})
		},
		want: `step "delete volume (idempotent repeat)": DeleteVolume returned Internal; a repeated teardown must succeed: the spec requires OK, or NotFound where it allows it for something already gone; DeleteVolume of a volume that does not exist must reply OK`,
	}, {
		name: "ControllerPublish repeat returns another context",
		misbehave: func(p *csitest.Plugin) {
			var mu sync.Mutex
			n := 0
			p.SetHook(csitest.MethodControllerPublishVolume, func(context.Context, string, any) error {
				mu.Lock()
				defer mu.Unlock()
				if n++; n == 2 {
					return status.Error(codes.FailedPrecondition, "already attached")
				}
				return nil
			})
		},
		want: `step "controller publish (idempotent repeat)": ControllerPublishVolume returned FailedPrecondition; the spec requires OK and the same publish_context`,
	}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := full(t)
			c.misbehave(p)
			r := check(t, fakeConfig(p))
			if f := requireOneFailure(t, r, c.want); f.Fatal {
				t.Errorf("fatal: %s", f)
			}
			requireClean(t, p, true, "")
		})
	}
}

// A plugin whose NodeUnpublishVolume always fails: the unmount step
// fails and stops the lifecycle, and the cleanups report their own
// failures while they still detach and delete what they can.
func TestCheck_CleanupFailuresReported(t *testing.T) {
	p := full(t)
	p.FailAlways(csitest.MethodNodeUnpublishVolume, codes.Internal)

	r := check(t, fakeConfig(p))

	got := failuresOf(r)
	for _, want := range []string{
		`step "unmount (allocation 2)": NodeUnpublishVolume returned Internal; the spec requires OK for a valid request made in the lifecycle's order`,
		`step "cleanup: unmount (allocation 2)": NodeUnpublishVolume returned Internal`,
		`step "cleanup: unmount (allocation 1)": NodeUnpublishVolume returned Internal`,
		`step "cleanup: release claims": NodeUnpublishVolume returned Internal`,
	} {
		found := false
		for _, g := range got {
			found = found || strings.HasPrefix(g, want)
		}
		if !found {
			t.Errorf("no failure starting with\n\t%s\ngot:\n\t%s", want, strings.Join(got, "\n\t"))
		}
	}
	// The cleanups detached the volume and deleted it, although the node
	// still has it published.
	if v := p.Volumes(); len(v) != 0 {
		t.Errorf("volumes left: %v", v)
	}
}

// A plugin that never answers Probe ready fails the fingerprint once
// the step's timeout has passed on the harness's clock, and nothing
// else runs. The wait runs on a fake clock that the test moves to each
// retry, so the verdict does not depend on the machine's load; the
// wall-clock deadline of the step is a backstop it never reaches.
func TestCheck_NeverReady(t *testing.T) {
	p := full(t)
	p.SetProbeReady(false)
	cfg := fakeConfig(p)
	cfg.Timeout = 30 * time.Second
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	plugintest.SetClock(&cfg, clk)
	stop := driveClock(t, clk)
	r := check(t, cfg)
	stop()

	requireOneFailure(t, r, `step "fingerprint": Probe returned OK with ready=false; the plugin at `)
	if waited := clk.Now().Sub(start); waited > cfg.Timeout || waited < cfg.Timeout-time.Second {
		t.Errorf("the harness waited %s on its clock for Probe, want the step's %s less at most one retry's delay", waited, cfg.Timeout)
	}
	if n := p.CallCount(csitest.MethodCreateVolume); n != 0 {
		t.Errorf("CreateVolume called %d times on a plugin that is not ready", n)
	}
}

// A plugin that said not ready and then lets the step's deadline pass
// inside a Probe is reported as not ready, as it is when the deadline
// meets the wait between two Probes: which one it meets depends on the
// load.
func TestCheck_NotReadyThenStuck(t *testing.T) {
	p := full(t)
	p.SetProbeReady(false)
	var mu sync.Mutex
	probes := 0
	p.SetHook(csitest.MethodProbe, func(ctx context.Context, _ string, _ any) error {
		mu.Lock()
		probes++
		n := probes
		mu.Unlock()
		if n > 1 {
			<-ctx.Done() // the step's deadline, sent by gRPC
			return ctx.Err()
		}
		return nil
	})
	cfg := fakeConfig(p)
	cfg.Timeout = time.Second // the wall-clock deadline the second Probe meets
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	plugintest.SetClock(&cfg, clk)
	stop := driveClock(t, clk)
	r := check(t, cfg)
	stop()

	requireOneFailure(t, r, `step "fingerprint": Probe returned OK with ready=false; the plugin at `)
}

// A plugin that refuses a second target of a single-node-writer volume
// with FailedPrecondition, as the spec's NodePublishVolume table allows:
// the second mount is skipped with the reason, and the run passes with
// one allocation.
func TestCheck_SecondTargetRefused(t *testing.T) {
	p := full(t)
	p.SetHook(csitest.MethodNodePublishVolume, func(_ context.Context, _ string, req any) error {
		r := req.(*csipb.NodePublishVolumeRequest)
		if v, ok := p.Volume(r.GetVolumeId()); ok && r.GetTargetPath() != "" {
			for target := range v.Published {
				if target != r.GetTargetPath() {
					return status.Errorf(codes.FailedPrecondition, "volume is published at %s", target)
				}
			}
		}
		return nil
	})

	r := check(t, fakeConfig(p))

	if r.Failed() {
		t.Fatalf("failures:\n\t%s", strings.Join(failuresOf(r), "\n\t"))
	}
	var mount2 plugintest.StepResult
	for _, s := range r.Steps() {
		if s.Name == "mount (allocation 2)" {
			mount2 = s
		}
	}
	if mount2.Status != plugintest.StatusSkip || !strings.Contains(mount2.Reason, "which the spec's NodePublishVolume table allows") {
		t.Errorf("mount (allocation 2): %+v", mount2)
	}
	requireClean(t, p, true, "")
	p.RequireNoViolations(t)
}

// Cancelling the caller's ctx ends the steps; the cleanups still run.
func TestCheck_Interrupted(t *testing.T) {
	p := full(t)
	ctx, cancel := context.WithCancel(t.Context())
	p.SetHook(csitest.MethodNodeStageVolume, func(context.Context, string, any) error {
		cancel()
		return nil
	})
	r := &plugintest.Recorder{}
	dir := t.TempDir()
	cfg := fakeConfig(p)
	cfg.MountRoot, cfg.StateDir = dir+"/mnt", dir+"/state"
	if err := plugintest.Check(ctx, cfg, r); err != nil {
		t.Fatal(err)
	}
	skipped := false
	for _, s := range r.Steps() {
		if s.Status == plugintest.StatusSkip && strings.HasPrefix(s.Reason, "the run was interrupted") {
			skipped = true
		}
	}
	if !skipped {
		t.Errorf("no step skipped as interrupted: %+v", r.Steps())
	}
	requireClean(t, p, true, "")
}

// A plugin that leaves a file in the staging directory when it unstages,
// or whose target directory comes back after the unpublish, fails
// "nothing left behind", which lists what remains under the mount root:
// files, and empty directories at a path the plugin was given (the
// mounter's own empty parents are harmless and not listed).
func TestCheck_LeftBehind(t *testing.T) {
	for _, c := range []struct {
		name string
		// leave runs at NodeUnstageVolume, after the first target's
		// unpublish (whose checks passed), and returns what it left.
		leave func(target, staging string) (string, error)
		want  string
	}{{
		name: "file in the staging directory",
		leave: func(_, staging string) (string, error) {
			p := filepath.Join(staging, "stray")
			return p, os.WriteFile(p, []byte("left"), 0o600)
		},
		want: `step "nothing left behind": 1 path(s) remain under the mount root: staging/plugintest/vol-`,
	}, {
		name: "target directory",
		leave: func(target, _ string) (string, error) {
			return target, os.MkdirAll(target, 0o750)
		},
		want: `step "nothing left behind": 1 path(s) remain under the mount root: per-alloc/alloc-`,
	}} {
		t.Run(c.name, func(t *testing.T) {
			p := full(t)
			var mu sync.Mutex
			var target, left string
			p.SetHook(csitest.MethodNodeUnpublishVolume, func(_ context.Context, _ string, req any) error {
				mu.Lock()
				defer mu.Unlock()
				if target == "" {
					target = req.(*csipb.NodeUnpublishVolumeRequest).GetTargetPath()
				}
				return nil
			})
			p.SetHook(csitest.MethodNodeUnstageVolume, func(_ context.Context, _ string, req any) error {
				mu.Lock()
				defer mu.Unlock()
				if left == "" {
					var err error
					if left, err = c.leave(target, req.(*csipb.NodeUnstageVolumeRequest).GetStagingTargetPath()); err != nil {
						t.Error(err)
					}
				}
				return nil
			})
			cfg := fakeConfig(p)
			cfg.SkipIdempotency, cfg.SkipNegative = true, true
			dir := t.TempDir()
			cfg.MountRoot, cfg.StateDir = filepath.Join(dir, "mnt"), filepath.Join(dir, "state")
			r := check(t, cfg)
			f := requireOneFailure(t, r, c.want)
			if rel, err := filepath.Rel(cfg.MountRoot, left); err != nil || !strings.Contains(f.String(), rel) {
				t.Errorf("the failure does not name %s: %s", left, f)
			}
		})
	}
}

// A step that reaches Config.Timeout fails, and the steps after it are
// skipped for that failure: the run was not interrupted, its caller's
// ctx is still live.
func TestCheck_StepTimeout(t *testing.T) {
	p := full(t)
	p.SetHook(csitest.MethodCreateVolume, func(ctx context.Context, _ string, _ any) error {
		<-ctx.Done() // the step's deadline, sent by gRPC
		return ctx.Err()
	})
	cfg := fakeConfig(p)
	cfg.Timeout = 200 * time.Millisecond // a bound on the wait, not a measurement

	r := check(t, cfg)

	if fs := r.Failures(); len(fs) == 0 || fs[0].Step != "create volume" {
		t.Fatalf("want the first failure in step create volume, got:\n\t%s", strings.Join(failuresOf(r), "\n\t"))
	}
	skipped := 0
	for _, s := range r.Steps() {
		if s.Status != plugintest.StatusSkip {
			continue
		}
		skipped++
		if s.Reason != `step "create volume" failed` {
			t.Errorf("step %q skipped because %q, want the create volume failure", s.Name, s.Reason)
		}
	}
	if skipped == 0 {
		t.Errorf("no step skipped after the timeout: %+v", r.Steps())
	}
}

// driveClock fires each timer of clk as soon as one is pending, until
// the returned stop, which waits for the driver to end.
func driveClock(t *testing.T, clk *clock.Fake) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for clk.BlockUntil(ctx, 1) == nil {
			clk.AdvanceToNext()
		}
	}()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the clock's driver did not stop")
		}
	}
}
