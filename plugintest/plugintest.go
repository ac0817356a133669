package plugintest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// Run drives the plugin that cfg names through the orchestrator's
// lifecycle with the real csikit stack, in-process, and reports to t:
// every failed check is a t.Errorf naming the step, the CSI call, the
// gRPC code and what the spec expects. With a *testing.T, each step is
// reported as a subtest of its own, once the run is over, so that
// go test -run TestPlugin/ListVolumes selects what to show. When a step fails that later
// steps depend on, the rest are skipped and Run ends the test with
// t.FailNow, after the cleanups.
//
// The cleanups (unmount, release, delete what the run created) run in
// reverse order before Run returns, while the plugin is certainly still
// serving, even when a test stops its plugin with a deferred call; they
// are also registered with t.Cleanup, where they find nothing left to
// do. A cleanup that fails is reported as a failure too.
//
// Run may be called many times in one test binary and from parallel
// tests: every run has its own stack, temporary directories and volume
// name. MountRoot and StateDir default to directories under t.TempDir().
// With bind mounts, a mount that a failed cleanup left behind is emptied
// by t.TempDir's removal; give MountRoot explicitly to keep it for
// inspection.
func Run(t testing.TB, cfg Config) {
	t.Helper()
	if cfg.MountRoot == "" || cfg.StateDir == "" {
		dir := t.TempDir()
		if cfg.MountRoot == "" {
			cfg.MountRoot = filepath.Join(dir, "mnt")
		}
		if cfg.StateDir == "" {
			cfg.StateDir = filepath.Join(dir, "state")
		}
	}
	var r Reporter = TestReporter(t)
	rec := &Recorder{}
	tt, subtests := t.(*testing.T)
	if subtests {
		r = rec
	}
	res, err := lifecycle(t.Context(), cfg, r, t.Cleanup)
	if err != nil {
		t.Fatalf("plugintest: %v", err)
	}
	if subtests {
		replay(tt, rec)
	}
	if res.stopped != "" {
		t.FailNow()
	}
}

// replay reports each step rec holds as a subtest of t, so that go test
// -run selects the checks to show ("TestPlugin/ListVolumes_(paging)"),
// and each failure is the subtest's t.Errorf.
func replay(t *testing.T, rec *Recorder) {
	t.Helper()
	for _, n := range rec.Notes() {
		t.Logf("plugintest: %s", n)
	}
	for _, s := range rec.Steps() {
		t.Run(s.Name, func(t *testing.T) {
			for _, f := range s.Failures {
				t.Errorf("plugintest: %s", f)
			}
			if s.Status == StatusSkip {
				t.Skip(s.Reason)
			}
		})
	}
}

// Check runs the same lifecycle and checks as Run outside of a test,
// reporting to r; csicheck uses it. It returns an error only when the
// harness itself cannot start (a bad Config, a directory it cannot
// create): the plugin's failures go to r. ctx ends the steps early; the
// cleanups still run, each bounded by Config.Timeout.
//
// Without Config.MountRoot and StateDir, Check makes a temporary
// directory and removes it afterwards, unless something was left
// mounted there, in which case it keeps it and says so through r.Logf.
func Check(ctx context.Context, cfg Config, r Reporter) error {
	if r == nil {
		return fmt.Errorf("%w: plugintest: Check needs a Reporter (a *Recorder keeps the results)", csi.ErrInvalidRequest)
	}
	var tmp string
	ownRoot := cfg.MountRoot == ""
	if cfg.MountRoot == "" || cfg.StateDir == "" {
		d, err := os.MkdirTemp("", "plugintest")
		if err != nil {
			return fmt.Errorf("plugintest: create a temporary directory for the mount root: %w", err)
		}
		tmp = d
		if cfg.MountRoot == "" {
			cfg.MountRoot = filepath.Join(d, "mnt")
		}
		if cfg.StateDir == "" {
			cfg.StateDir = filepath.Join(d, "state")
		}
	}
	res, err := lifecycle(ctx, cfg, r, nil)
	if tmp != "" {
		if err == nil && ownRoot && len(res.leftovers) > 0 {
			r.Logf("kept %s: the run left %d entries under the mount root", tmp, len(res.leftovers))
		} else if rerr := os.RemoveAll(tmp); rerr != nil {
			r.Logf("could not remove %s: %v", tmp, rerr)
		}
	}
	return err
}

// result is what a lifecycle run tells its caller beyond the Reporter.
type result struct {
	// stopped says why the lifecycle stopped early; "" when it ran to
	// the end.
	stopped string
	// leftovers are the paths left under the mount root after the
	// cleanups.
	leftovers []string
}

// run is one lifecycle run: its configuration, its csikit stack, what
// the plugin reported and where the volume stands.
type run struct {
	cfg      Config
	rep      Reporter
	log      hclog.Logger
	st       *stack
	calls    *callLog
	cleanups cleanups

	stopped string // why the lifecycle stopped early; "" while it runs

	// The node registry's plugin clients, for the harness's own calls
	// (repeats, probes); ctrl is nil for a node-only plugin.
	ctrl                   plugin.ControllerClient
	node                   plugin.NodeClient
	ctrlSocket, nodeSocket string
	raw                    rawClients
	// instances are registered with the node's registry.
	instances []instance

	// What the plugin reported.
	hasController bool
	ctrlCaps      csi.ControllerCapabilities
	nodeCaps      csi.NodeCapabilities
	csiNode       string
	provider      string // GetPluginInfo's name
	maxVolumes    int64  // NodeGetInfo's max_volumes_per_node; 0: no limit

	// The volume.
	volID      string // csikit's ID
	name       string // the CSI name given to CreateVolume
	externalID string // the plugin's ID
	created    bool   // created by this run and not deleted yet
	registered bool   // registered and not deregistered yet
	allocs     []*alloc
	probeDir   string
	// made are the directories made through Config.CreatePath.
	made *madePaths
	// scratchIDs are the volumes coverage checks created and did not
	// delete yet.
	scratchIDs []string
	// The hand-over to the second node: its allocation, the node_id
	// the plugin reported there, whether its node service stages, the
	// call log's indexes at the step's start and end, and whether every
	// stack call of the step succeeded (see checkOrder).
	handover                 *alloc
	secondCSINode            string
	secondStages             bool
	handoverFrom, handoverTo int
	handoverDone             bool
	// deletedSnapshots are the snapshots coverage checks deleted.
	deletedSnapshots []string
}

// instance is one plugin instance the node's registry runs.
type instance struct {
	allocID string
	typ     csi.PluginType
	socket  string
}

// alloc is one of the run's workloads.
type alloc struct {
	n     int
	id    string
	node  string // the stack's node; "" is hostNode
	mode  csi.ClaimMode
	claim *csi.Claim
	vol   *csi.Volume // as the claim returned it, secrets included
	path  string      // the published target, once mounted
	// claimed: the claim was written; mounted: MountVolume succeeded and
	// UnmountVolume has not yet; refused: the plugin refused a second
	// target (see mountAlloc).
	claimed, mounted, refused, released bool
}

// allocation is a's record in the store: running, or stopped when
// terminal.
func (a *alloc) allocation(terminal bool) csi.Allocation {
	return csi.Allocation{ID: a.id, Namespace: namespace, NodeID: cmp.Or(a.node, hostNode), JobID: "plugintest", Terminal: terminal}
}

// lifecycle builds the stack and runs every step, then the cleanups.
// register, when set, also receives the cleanups (t.Cleanup). ctx is
// the caller's: the steps end with it, the cleanups do not (see
// cleanupCtx).
func lifecycle(ctx context.Context, cfg Config, r Reporter, register func(func())) (result, error) {
	l, err := newRun(cfg, r)
	if err != nil {
		return result{}, err
	}
	if register != nil {
		register(func() { l.cleanups.run(ctx) })
	}
	defer l.close(ctx)
	if err := l.createRoots(ctx); err != nil {
		return result{}, err
	}
	defer l.removeMade(ctx)
	l.st.startWorker(ctx)
	l.steps(ctx)
	l.cleanups.run(ctx)
	if l.probeDir != "" {
		_ = os.Remove(l.probeDir) // only when empty: a probe's mount stays visible
	}
	return result{stopped: l.stopped, leftovers: l.leftovers(false)}, nil
}

// newRun makes the run's directories and builds its stack; the caller
// starts the stack's worker and closes the run.
func newRun(cfg Config, r Reporter) (*run, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := preflight(c); err != nil {
		return nil, err
	}
	suffix := randomHex(6)
	l := &run{
		cfg:   c,
		rep:   r,
		log:   c.Logger.Named("plugintest"),
		calls: &callLog{},
		volID: "vol-" + suffix,
		name:  "plugintest-" + suffix,
		made:  &madePaths{create: c.CreatePath, timeout: c.Timeout, rename: c.renameErr},
	}
	for _, d := range []string{c.MountRoot, c.StateDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("plugintest: create %s: %w", d, err)
		}
	}
	if l.st, err = newStack(c, c.MountRoot, c.StateDir, l.calls, l.made); err != nil {
		return nil, fmt.Errorf("plugintest: build the csikit stack: %w", err)
	}
	return l, nil
}

// steps runs the lifecycle in order. Each step checks that the ones it
// depends on succeeded.
//
// Every step and check takes its caller's ctx: the run's, or one
// derived from it by stepCtx. begin, fail and failure read from it
// whether the run was interrupted (see interruption).
func (l *run) steps(ctx context.Context) {
	l.fingerprint(ctx)
	l.registerPlugin(ctx)
	l.provision(ctx)
	l.coverage(ctx, phaseProvisioned)
	l.claimAll(ctx)
	l.mountAll(ctx)
	l.checkData(ctx)
	l.volumeOps(ctx)
	l.coverage(ctx, phaseMounted)
	l.probeUnstage(ctx)
	l.unmountAll(ctx)
	l.coverage(ctx, phaseUnmounted)
	l.release(ctx)
	l.secondNode(ctx)
	l.deleteVolume(ctx)
	l.checkOrder(ctx)
	l.checkLeftovers(ctx)
}

// close runs what is left of the cleanups and stops the stack, whose
// registry closes the plugin clients.
func (l *run) close(ctx context.Context) {
	l.cleanups.run(ctx)
	l.st.stop()
	l.raw.close()
}

// begin starts a step. It returns false, and reports the step skipped,
// when an earlier failure stopped the lifecycle.
func (l *run) begin(ctx context.Context, step string) bool {
	if err := interruption(ctx); err != nil && l.stopped == "" {
		l.stopped = fmt.Sprintf("the run was interrupted (%v)", err)
	}
	if l.stopped != "" {
		l.rep.Skip(step, l.cfg.rename(l.stopped))
		return false
	}
	l.rep.Step(step)
	l.log.Debug("step", "name", step)
	return true
}

// errStepTimeout is the cause of a step's or a cleanup's ctx that
// reached Config.Timeout.
var errStepTimeout = errors.New("plugintest: the step reached Config.Timeout")

// stepCtx bounds one step by Config.Timeout.
func (l *run) stepCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, l.cfg.Timeout, errStepTimeout)
}

// interruption returns why the caller's ctx ended, or nil while it has
// not. ctx is the run's, or one derived from it by stepCtx or
// cleanupCtx: their own timeout is a step's failure, not an
// interruption.
func interruption(ctx context.Context) error {
	if err := ctx.Err(); err != nil && !errors.Is(context.Cause(ctx), errStepTimeout) {
		return err
	}
	return nil
}

// fail reports f; a fatal failure stops the lifecycle.
func (l *run) fail(ctx context.Context, f Failure) {
	if f.Fatal && l.stopped == "" {
		l.stopped = fmt.Sprintf("step %q failed", f.Step)
		if err := interruption(ctx); err != nil {
			l.stopped = fmt.Sprintf("the run was interrupted (%v)", err)
		}
	}
	f.Expect, f.Got, f.Detail = l.cfg.rename(f.Expect), l.cfg.rename(f.Got), l.cfg.rename(f.Detail)
	l.rep.Fail(f)
}

// failure describes err, the error a step met, against what was
// expected of the call that failed.
func (l *run) failure(ctx context.Context, step string, err error, expect string) Failure {
	f := Failure{Step: step, Expect: expect}
	var rerr *csi.RPCError
	var resp *plugin.ResponseError
	switch {
	case errors.As(err, &rerr):
		f.Call, f.Code = rerr.Method, rerr.Code
		if rerr.Message != "" {
			f.Detail = "plugin message: " + strconv.Quote(rerr.Message)
		}
		if rerr.Code == csi.CodeDeadlineExceeded || rerr.Code == csi.CodeCanceled {
			if interruption(ctx) != nil {
				f.Expect += "; the run was interrupted"
			} else {
				f.Expect += fmt.Sprintf("; the step had %s (Config.Timeout)", l.cfg.Timeout)
			}
		}
	case errors.As(err, &resp):
		f.Call, f.Code = resp.Method, csi.CodeOK
		f.Got = "with a response the spec does not allow"
		f.Expect = "a response in the spec's format"
		f.Detail = resp.Reason
	default:
		f.Expect = "the step to succeed; it failed in the csikit stack, without a plugin error"
		f.Detail = err.Error()
	}
	return f
}

func randomHex(n int) string { return hex.EncodeToString(randomBytes(n)) }

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go ≥ 1.24)
	return b
}
