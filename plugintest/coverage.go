package plugintest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// This file runs the per-RPC coverage: the spec's rules for each call a
// plugin advertises, beyond what the lifecycle itself exercises. Each
// rule is one row of a table (see checks_*.go); a new check is a new
// row.

// phase says where in the lifecycle a coverage check runs.
type phase int

const (
	// phaseProvisioned: the volume exists and nothing claims it yet.
	phaseProvisioned phase = iota
	// phaseMounted: the volume is staged and published for allocation 1.
	phaseMounted
	// phaseUnmounted: the volume was published and is unpublished and
	// unstaged again; it is still attached.
	phaseUnmounted
)

// coverageCheck is one row of the coverage table.
type coverageCheck struct {
	// name is the step's name, unique among the rows and the lifecycle's
	// steps.
	name  string
	phase phase
	// needs says why the check does not apply to this plugin ("the
	// controller does not advertise LIST_VOLUMES"), or "" when it does.
	needs func(l *run) string
	// run makes the calls and reports each failure under step.
	run func(l *run, ctx context.Context, step string)
}

// coverageChecks is the whole table, in the order the rows run.
func coverageChecks() []coverageCheck {
	return slices.Concat(controllerChecks, volumeSourceChecks, snapshotChecks, expansionChecks, nodeChecks, healthChecks)
}

// coverage runs the rows of phase p. A row whose call keeps answering
// Unavailable fails alone; the rows after it still run.
func (l *run) coverage(ctx context.Context, p phase) {
	for _, c := range coverageChecks() {
		if c.phase != p {
			continue
		}
		if l.stopped == "" && !l.cfg.selected(c.name) {
			continue
		}
		if l.stopped == "" && c.needs != nil {
			if why := c.needs(l); why != "" {
				l.rep.Skip(c.name, why)
				continue
			}
		}
		if !l.begin(ctx, c.name) {
			continue
		}
		sctx, cancel := l.stepCtx(ctx)
		c.run(l, sctx, c.name)
		cancel()
	}
}

// Gates for the rows' needs.

func needController(cap func(csi.ControllerCapabilities) bool, name string) func(l *run) string {
	return func(l *run) string {
		switch {
		case !l.hasController:
			return "the plugin serves no controller"
		case !cap(l.ctrlCaps):
			return "the controller does not advertise " + name
		}
		return ""
	}
}

func needNode(cap func(csi.NodeCapabilities) bool, name string) func(l *run) string {
	return func(l *run) string {
		if !cap(l.nodeCaps) {
			return "the node plugin does not advertise " + name
		}
		return ""
	}
}

// needBoth joins gates: the first reason wins.
func needBoth(gates ...func(l *run) string) func(l *run) string {
	return func(l *run) string {
		for _, g := range gates {
			if why := g(l); why != "" {
				return why
			}
		}
		return ""
	}
}

var needCreate = needController(func(c csi.ControllerCapabilities) bool { return c.CreateDeleteVolume }, "CREATE_DELETE_VOLUME")

// retry calls fn until it answers something other than Unavailable, at
// most maxUnavailable times, with a short backoff.
func retry[T any](ctx context.Context, fn func(context.Context) (T, error)) (T, error) {
	delay := 20 * time.Millisecond
	for tries := 1; ; tries++ {
		v, err := fn(ctx)
		if status.Code(err) != codes.Unavailable || tries >= maxUnavailable || !sleep(ctx, delay) {
			return v, err
		}
		delay *= 2
	}
}

// expectRPC makes a call that must answer want, retrying Unavailable.
func expectRPC[T any](ctx context.Context, l *run, step, method string, want csi.Code, expect string, fn func(context.Context) (T, error)) (T, bool) {
	v, err := retry(ctx, fn)
	l.expectCode(ctx, step, method, err, want, expect)
	return v, csi.Code(status.Code(err)) == want
}

// callOK makes a call that must succeed, retrying Unavailable; it
// reports a failure with expect and returns false otherwise.
func callOK[T any](ctx context.Context, l *run, step, method, expect string, fn func(context.Context) (T, error)) (T, bool) {
	v, err := retry(ctx, fn)
	if err != nil {
		l.expectCode(ctx, step, method, err, csi.CodeOK, expect)
		return v, false
	}
	return v, true
}

// wrong reports a successful call whose answer breaks a rule.
func (l *run) wrong(ctx context.Context, step, method, got, expect string) {
	l.fail(ctx, Failure{Step: step, Call: method, Code: csi.CodeOK, Got: got, Expect: expect})
}

func (l *run) ctrlRaw(ctx context.Context, step string) (csipb.ControllerClient, bool) {
	c, err := l.raw.controller(l.ctrlSocket)
	if err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "a gRPC client of the controller", Detail: err.Error()})
		return nil, false
	}
	return c, true
}

func (l *run) nodeRaw(ctx context.Context, step string) (csipb.NodeClient, bool) {
	c, err := l.raw.node(l.nodeSocket)
	if err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "a gRPC client of the node plugin", Detail: err.Error()})
		return nil, false
	}
	return c, true
}

// capPB is the run's capability as the spec's message.
func (l *run) capPB() *csipb.VolumeCapability {
	return plugin.CapabilityToPB(l.cfg.Capability, l.cfg.MountOptions)
}

// scratch creates a volume of the run's own for a check that must not
// touch the lifecycle's volume, with src as its content source (nil for
// an empty one). The volume is deleted by dropScratch, or by the
// cleanups if the check stops first.
func (l *run) scratch(ctx context.Context, step, suffix string, src *csipb.VolumeContentSource) (*csipb.Volume, error) {
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return nil, fmt.Errorf("no controller client")
	}
	resp, err := retry(ctx, func(ctx context.Context) (*csipb.CreateVolumeResponse, error) {
		return cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{
			Name:                l.name + "-" + suffix,
			CapacityRange:       l.capacityRange(),
			VolumeCapabilities:  []*csipb.VolumeCapability{l.capPB()},
			Parameters:          l.cfg.Parameters,
			Secrets:             l.cfg.Secrets,
			VolumeContentSource: src,
		})
	})
	if err != nil {
		return nil, err
	}
	v := resp.GetVolume()
	if id := v.GetVolumeId(); id != "" {
		l.scratchIDs = append(l.scratchIDs, id)
		l.cleanups.push(l.undoScratch(id))
	}
	return v, nil
}

// capacityRange is CreateVolume's capacity range for the run's volumes.
func (l *run) capacityRange() *csipb.CapacityRange {
	if l.cfg.CapacityBytes == 0 {
		return nil
	}
	return &csipb.CapacityRange{RequiredBytes: l.cfg.CapacityBytes}
}

// dropScratch deletes a scratch volume and reports a failure to do so.
func (l *run) dropScratch(ctx context.Context, step, id string) {
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return
	}
	if _, ok := callOK(ctx, l, step, methodDeleteVolume, fmt.Sprintf("the spec requires OK from DeleteVolume of volume %q, which CreateVolume returned and nothing uses", id),
		func(ctx context.Context) (*csipb.DeleteVolumeResponse, error) {
			return cc.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id, Secrets: l.cfg.Secrets})
		}); ok {
		l.scratchIDs = slices.DeleteFunc(l.scratchIDs, func(s string) bool { return s == id })
	}
}

// undoScratch deletes a scratch volume a check left behind.
func (l *run) undoScratch(id string) func(context.Context) {
	return func(ctx context.Context) {
		if !slices.Contains(l.scratchIDs, id) {
			return
		}
		ctx, cancel := l.cleanupCtx(ctx)
		defer cancel()
		step := fmt.Sprintf("cleanup: delete volume %q", id)
		l.rep.Step(step)
		l.dropScratch(ctx, step, id)
	}
}

// invalidToken is a starting_token no plugin issued.
func invalidToken() string { return "plugintest-invalid-token-" + randomHex(6) }

// longName is a CreateVolume name of n bytes starting with prefix.
func longName(prefix string, n int) string {
	if len(prefix) >= n {
		return prefix[:n]
	}
	return prefix + strings.Repeat("x", n-len(prefix))
}

// selected reports whether the check named name runs; see
// Config.RunChecks and SkipChecks.
func (c Config) selected(name string) bool {
	return (c.runRE == nil || c.runRE.MatchString(name)) && (c.skipRE == nil || !c.skipRE.MatchString(name))
}
