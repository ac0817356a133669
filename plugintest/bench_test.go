package plugintest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/plugintest"
)

// bareConfig is the lifecycle the benchmark measures: every step through
// the csikit stack, without the harness's extra calls (repeats and
// refusals), which the raw sequence would only mirror.
func bareConfig(endpoint string, data plugintest.DataCheck, dir string) plugintest.Config {
	return plugintest.Config{
		Endpoint:        endpoint,
		SkipIdempotency: true,
		SkipNegative:    true,
		SkipChecks:      ".", // the coverage rows: the raw sequence has none
		DataCheck:       data,
		MountRoot:       filepath.Join(dir, "mnt"),
		StateDir:        filepath.Join(dir, "state"),
	}
}

// rawLifecycle makes the CSI calls of a bare lifecycle straight on a raw
// csipb client, in the same order, for a plugin that advertises
// CONTROLLER_SERVICE, CREATE_DELETE_VOLUME, PUBLISH_UNPUBLISH_VOLUME and
// STAGE_UNSTAGE_VOLUME: the harness's fingerprint, the node registry's
// fingerprint, then create, attach, stage, two publishes, the data
// check, two unpublishes, unstage, detach and delete. It does the CO's
// share of the file system work too (directories, the file), at the
// paths csikit's mounter uses, so that every call carries the same
// arguments as the lifecycle's, one step after the other: the mounter
// instead makes the first target's parent while the plugin stages and
// removes the last one while it unstages. name is the volume's CSI
// name.
func rawLifecycle(ctx context.Context, endpoint, dir, name string, shared bool) error {
	conn, err := rawDial(endpoint, false)
	if err != nil {
		return err
	}
	defer conn.Close()
	return rawCalls(ctx, conn, dir, name, shared)
}

// rawDial makes the raw client's connection (it connects on first use).
// With bounded, each call gets a deadline of its own, as a CO bounds its
// calls: plugintest.DefaultTimeout, csikit's bound on a step.
func rawDial(endpoint string, bounded bool) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if bounded {
		opts = append(opts, grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
			cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
			ctx, cancel := context.WithTimeout(ctx, plugintest.DefaultTimeout)
			defer cancel()
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}))
	}
	return grpc.NewClient("unix://"+endpoint, opts...)
}

// rawCalls is rawLifecycle on a connection the caller made and closes.
func rawCalls(ctx context.Context, conn *grpc.ClientConn, dir, name string, shared bool) error {
	ident, ctrl, node := csipb.NewIdentityClient(conn), csipb.NewControllerClient(conn), csipb.NewNodeClient(conn)

	if _, err := ident.GetPluginCapabilities(ctx, &csipb.GetPluginCapabilitiesRequest{}); err != nil {
		return err
	}
	var nodeID string
	for range 2 { // the harness's fingerprint, then the registry's
		if _, err := ident.Probe(ctx, &csipb.ProbeRequest{}); err != nil {
			return err
		}
		if _, err := ident.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{}); err != nil {
			return err
		}
		if _, err := ident.GetPluginCapabilities(ctx, &csipb.GetPluginCapabilitiesRequest{}); err != nil {
			return err
		}
		ni, err := node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
		if err != nil {
			return err
		}
		nodeID = ni.GetNodeId()
		if _, err := ctrl.ControllerGetCapabilities(ctx, &csipb.ControllerGetCapabilitiesRequest{}); err != nil {
			return err
		}
		if _, err := node.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{}); err != nil {
			return err
		}
	}

	vc := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	cv, err := ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csipb.VolumeCapability{vc}})
	if err != nil {
		return err
	}
	id, vctx := cv.GetVolume().GetVolumeId(), cv.GetVolume().GetVolumeContext()
	cp, err := ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeID, VolumeCapability: vc, VolumeContext: vctx})
	if err != nil {
		return err
	}
	pc := cp.GetPublishContext()
	vol := "vol-raw"
	staging := filepath.Join(dir, "staging", "plugintest", vol, "snw-fs")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return err
	}
	if _, err := node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, PublishContext: pc, StagingTargetPath: staging, VolumeCapability: vc, VolumeContext: vctx}); err != nil {
		return err
	}
	var targets []string
	for i, ro := range []bool{false, true} {
		usage := "w-snw-fs"
		if ro {
			usage = "r-snw-fs"
		}
		t := filepath.Join(dir, "per-alloc", fmt.Sprintf("alloc-%d", i+1), vol, usage)
		if err := os.MkdirAll(filepath.Dir(t), 0o750); err != nil {
			return err
		}
		if _, err := node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
			VolumeId: id, PublishContext: pc, StagingTargetPath: staging, TargetPath: t, VolumeCapability: vc, Readonly: ro, VolumeContext: vctx,
		}); err != nil {
			return err
		}
		targets = append(targets, t)
	}
	data := []byte("raw\n")
	if err := os.WriteFile(filepath.Join(targets[0], "data"), data, 0o644); err != nil {
		return err
	}
	readers := targets[:1]
	if shared {
		readers = targets
	}
	for _, t := range readers {
		got, err := os.ReadFile(filepath.Join(t, "data"))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, data) {
			return errors.New("data differs")
		}
	}
	if err := os.Remove(filepath.Join(targets[0], "data")); err != nil {
		return err
	}
	for _, t := range slices.Backward(targets) {
		if _, err := node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: t}); err != nil {
			return err
		}
		_ = os.Remove(filepath.Dir(t))
		_ = os.Remove(filepath.Dir(filepath.Dir(t)))
	}
	if _, err := node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		return err
	}
	for p := staging; p != filepath.Join(dir, "staging"); p = filepath.Dir(p) {
		_ = os.Remove(p)
	}
	if _, err := ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: nodeID}); err != nil {
		return err
	}
	_, err = ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
	return err
}

// The raw sequence makes exactly the calls of the bare lifecycle, so the
// benchmark compares like with like.
func TestRawLifecycle_SameCallsAsBareLifecycle(t *testing.T) {
	fake := func() *csitest.Plugin {
		return csitest.Start(t, csitest.Config{
			Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true},
			Node:       csi.NodeCapabilities{StageUnstageVolume: true},
		})
	}
	stack, raw := fake(), fake()
	r := &plugintest.Recorder{}
	if err := plugintest.Check(t.Context(), bareConfig(stack.Endpoint(), plugintest.DataWriterOnly, t.TempDir()), r); err != nil {
		t.Fatal(err)
	}
	if r.Failed() {
		t.Fatalf("the bare lifecycle failed: %v", failuresOf(r))
	}
	if err := rawLifecycle(t.Context(), raw.Endpoint(), t.TempDir(), "raw", false); err != nil {
		t.Fatal(err)
	}
	if s, w := stack.Methods(), raw.Methods(); !slices.Equal(s, w) {
		t.Errorf("calls differ:\n\tlifecycle: %v\n\traw:       %v", s, w)
	}
	raw.RequireNoViolations(t)
}

// BenchmarkLifecycle reports lifecycle-vs-raw: one bare lifecycle through
// the csikit stack (store, router, server, fingerprint registry, mounter,
// claim release worker) divided by the same CSI calls made straight on a
// raw client, on the same plugin, interleaved in one run (medians of the
// iterations, so a noisy neighbour does not skew one side). The hostpath
// plugin uses bind mounts where they work, else symbolic links.
//
// What each side's time covers:
//   - lifecycle-ns: from the harness's first step (fingerprint, which
//     dials the plugin) to the end of its last lifecycle step (delete
//     volume): the registry's fingerprint and report, the store writes,
//     the transport, the mounter with its state file writes and
//     directories, the release worker. Left out, because a host does
//     them once and not per volume, or not at all: building the stack
//     and its directories (mount root, state directory, which every
//     lifecycle of the run shares, as a node's lifecycles do), starting
//     its claim release worker (a host runs one with its server), the
//     harness's own checks after the lifecycle (order of calls,
//     leftovers), and stopping the stack. Left out too, as the raw
//     sequence has none of their calls: the volume operations steps
//     (expansion, snapshot, restore, clone, modify) that the harness
//     runs for a plugin advertising them, as hostpath does; their time
//     is volume-ops-ns.
//   - raw-ns: dialling the plugin and every call, with the CO's
//     directories below the same kind of roots, which exist beforehand
//     and are shared by the run's lifecycles as the mounter's are;
//     closing the connection is left out as stopping the stack is.
//   - check-ns and check-vs-raw: the whole plugintest.Check, everything
//     above included, against the same raw time.
//   - overhead-ns: lifecycle-ns minus raw-ns, the stack's own cost. The
//     ratio moves with the disk's load (the raw time does); this moves
//     far less, so it is the figure to compare across runs on a shared
//     machine.
//   - raw-deadline-ns and lifecycle-vs-raw-deadline: the raw sequence
//     once more, each call with a deadline of its own, as a CO bounds
//     its calls. csikit bounds every plugin call, and gRPC sends the
//     deadline to the plugin, whose server arms a timer for each call;
//     the raw-ns side sends none. The difference between the two raw
//     times is what the deadlines cost; the goal is on
//     lifecycle-vs-raw, against the bare calls.
func BenchmarkLifecycle(b *testing.B) {
	method := hostpath.MountSymlink
	if hostpath.CanBindMount() == nil {
		method = hostpath.MountBind
	}
	b.Run("hostpath-"+string(method), func(b *testing.B) {
		endpoint := startHostpath(b, hostpath.Config{ControllerPublish: true, Staging: true, Mount: method})
		benchLifecycle(b, endpoint, plugintest.DataShared, true)
	})
	b.Run("fake", func(b *testing.B) {
		p := csitest.Start(b, csitest.Config{
			Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true},
			Node:       csi.NodeCapabilities{StageUnstageVolume: true},
		})
		benchLifecycle(b, p.Endpoint(), plugintest.DataWriterOnly, false)
		p.ResetCalls()
	})
}

// The steps that bound the timed part of a lifecycle: the first one, and
// the harness's first check after the lifecycle.
const (
	firstStep      = "fingerprint"
	firstCheckStep = "order of calls"
)

// volumeOpsSteps are the volume operations steps the harness runs
// between the data check and the unmounts for a plugin that advertises
// them (hostpath: expansion, snapshots, clones). The raw sequence makes
// none of their calls, and the harness drops them from its call log,
// so the timed part leaves them out: from the start of the first to the
// start of the step after the last.
var volumeOpsSteps = map[string]bool{
	"expand online (data kept)":    true,
	"snapshot":                     true,
	"restore snapshot (read back)": true,
	"clone volume (read back)":     true,
	"modify volume":                true,
}

// stepTimer is a Recorder that notes when the timed steps start and end,
// and how long the volume operations steps took.
type stepTimer struct {
	plugintest.Recorder
	start, end time.Time
	opsStart   time.Time // zero unless a volume operations step runs
	ops        time.Duration
}

func (s *stepTimer) Step(name string) {
	now := time.Now()
	switch {
	case volumeOpsSteps[name]:
		if s.opsStart.IsZero() {
			s.opsStart = now
		}
	case !s.opsStart.IsZero():
		s.ops += now.Sub(s.opsStart)
		s.opsStart = time.Time{}
	}
	switch name {
	case firstStep:
		s.start = now
	case firstCheckStep:
		s.end = now
	}
	s.Recorder.Step(name)
}

// lifecycle is the timed part: the steps from the first to the first
// check, less the volume operations steps.
func (s *stepTimer) lifecycle() time.Duration { return s.end.Sub(s.start) - s.ops }

func benchLifecycle(b *testing.B, endpoint string, data plugintest.DataCheck, shared bool) {
	ctx := context.Background()
	// Each side keeps its directories from one lifecycle to the next,
	// as a node does: the stack its mount root and state directory, the
	// raw client the same roots below its own directory. A lifecycle
	// leaves nothing in them (the harness checks, and the raw sequence
	// removes what it made). Fresh ones per lifecycle would put their
	// creation, which a host does once, into the timed part after all:
	// on a journaling file system the plugin's first fsync commits it.
	root := b.TempDir()
	stackDir, rawDir := filepath.Join(root, "stack"), filepath.Join(root, "raw")
	for _, sub := range []string{"staging", "per-alloc"} {
		if err := os.MkdirAll(filepath.Join(rawDir, sub), 0o750); err != nil {
			b.Fatal(err)
		}
	}
	var stackNs, checkNs, rawNs, boundedNs, opsNs []float64
	i := 0
	for b.Loop() {
		i++
		stackRun := func() {
			cfg := bareConfig(endpoint, data, stackDir)
			r := &stepTimer{}
			start := time.Now()
			if err := plugintest.Check(ctx, cfg, r); err != nil {
				b.Fatal(err)
			}
			checkNs = append(checkNs, float64(time.Since(start)))
			if r.Failed() {
				b.Fatalf("lifecycle failed: %v", failuresOf(&r.Recorder))
			}
			if r.start.IsZero() || r.end.IsZero() {
				b.Fatalf("the lifecycle did not report steps %q and %q", firstStep, firstCheckStep)
			}
			stackNs = append(stackNs, float64(r.lifecycle()))
			opsNs = append(opsNs, float64(r.ops))
		}
		rawRun := func(bounded bool, ns *[]float64) func() {
			return func() {
				start := time.Now()
				conn, err := rawDial(endpoint, bounded)
				if err != nil {
					b.Fatal(err)
				}
				err = rawCalls(ctx, conn, rawDir, fmt.Sprintf("raw-%d", i), shared)
				*ns = append(*ns, float64(time.Since(start)))
				_ = conn.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		// Rotate which goes first, so that none always meets a plugin
		// warmed up by another.
		runs := []func(){stackRun, rawRun(false, &rawNs), rawRun(true, &boundedNs)}
		for j := range runs {
			runs[(i+j)%len(runs)]()
		}
	}
	s, c, r, d := median(stackNs), median(checkNs), median(rawNs), median(boundedNs)
	b.ReportMetric(s/r, "lifecycle-vs-raw")
	b.ReportMetric(s, "lifecycle-ns")
	b.ReportMetric(r, "raw-ns")
	b.ReportMetric(s-r, "overhead-ns")
	b.ReportMetric(c/r, "check-vs-raw")
	b.ReportMetric(c, "check-ns")
	b.ReportMetric(d, "raw-deadline-ns")
	b.ReportMetric(s/d, "lifecycle-vs-raw-deadline")
	b.ReportMetric(median(opsNs), "volume-ops-ns")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
