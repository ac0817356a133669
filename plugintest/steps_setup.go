package plugintest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/fingerprint"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// fingerprint asks each socket what the plugin is, the way a node's
// registry does (Probe, GetPluginInfo, GetPluginCapabilities, the
// capability calls, NodeGetInfo), waiting for Probe to say ready. It
// decides the plugin's shape (monolith, node-only, or split) and
// registers its instances with the node's registry, whose clients the
// harness then shares: one connection per socket, as a raw client has.
func (l *run) fingerprint(ctx context.Context) {
	const step = "fingerprint"
	if !l.begin(ctx, step) {
		return
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	if l.cfg.Endpoint != "" {
		l.fingerprintSocket(ctx, step)
	} else {
		l.fingerprintSplit(ctx, step)
	}
	if l.stopped != "" {
		return
	}
	if l.hasController {
		c, _, err := l.st.mgr.ControllerPlugin(pluginID)
		if err != nil {
			l.fail(ctx, Failure{Step: step, Expect: "the node's registry to hand out the controller it registered", Detail: err.Error(), Fatal: true})
			return
		}
		l.ctrl = c
	}
	l.checkVolumeSource(ctx, step)
}

// fingerprintSocket fingerprints the plugin at Config.Endpoint, a
// monolith or a node-only plugin: the one GetPluginCapabilities tells.
func (l *run) fingerprintSocket(ctx context.Context, step string) {
	l.ctrlSocket, l.nodeSocket = l.cfg.Endpoint, l.cfg.Endpoint
	in := instance{allocID: "plugin", typ: csi.PluginTypeMonolith, socket: l.cfg.Endpoint}
	c, ok := l.registerInstance(ctx, step, in)
	if !ok {
		return
	}
	caps, err := c.GetPluginCapabilities(ctx)
	if err != nil {
		f := l.failure(ctx, step, err, "the spec requires every plugin to answer GetPluginCapabilities")
		f.Fatal = true
		l.fail(ctx, f)
		return
	}
	if !caps.ControllerService {
		// A node-only plugin: registering it again with another type
		// replaces the instance.
		in.typ = csi.PluginTypeNode
		if c, ok = l.registerInstance(ctx, step, in); !ok {
			return
		}
	}
	info, ok := l.fingerprintOne(ctx, step, c, in, true)
	if !ok {
		return
	}
	l.instances = []instance{in}
	l.learn(ctx, step, info)
}

// fingerprintSplit fingerprints a split plugin: its controller at
// Config.ControllerEndpoint, which must advertise CONTROLLER_SERVICE,
// and its node at Config.NodeEndpoint.
func (l *run) fingerprintSplit(ctx context.Context, step string) {
	l.ctrlSocket, l.nodeSocket = l.cfg.ControllerEndpoint, l.cfg.NodeEndpoint
	ctrl := instance{allocID: "plugin-controller", typ: csi.PluginTypeController, socket: l.cfg.ControllerEndpoint}
	node := instance{allocID: "plugin-node", typ: csi.PluginTypeNode, socket: l.cfg.NodeEndpoint}
	cc, ok := l.registerInstance(ctx, step, ctrl)
	if !ok {
		return
	}
	nc, ok := l.registerInstance(ctx, step, node)
	if !ok {
		return
	}
	ci, ok := l.fingerprintOne(ctx, step, cc, ctrl, true)
	if !ok {
		return
	}
	if !ci.RequiresController {
		l.fail(ctx, Failure{Step: step, Call: methodGetPluginCaps, Code: csi.CodeOK, Got: "without CONTROLLER_SERVICE",
			Expect: "the plugin at Config.ControllerEndpoint must advertise CONTROLLER_SERVICE; for a node-only plugin set Config.Endpoint", Fatal: true})
		return
	}
	ni, ok := l.fingerprintOne(ctx, step, nc, node, true)
	if !ok {
		return
	}
	l.instances = []instance{ctrl, node}
	l.learn(ctx, step, ci)
	l.learn(ctx, step, ni)
}

// checkVolumeSource checks that the run has a volume to use: one the
// controller can create, or Config.VolumeID.
func (l *run) checkVolumeSource(ctx context.Context, step string) {
	switch {
	case l.cfg.VolumeID == "" && !l.hasController:
		l.fail(ctx, Failure{Step: step, Got: "the plugin serves no controller",
			Expect: "a node-only plugin cannot create volumes, so the harness needs a pre-provisioned one: set Config.VolumeID", Fatal: true})
	case l.cfg.VolumeID == "" && !l.ctrlCaps.CreateDeleteVolume:
		l.fail(ctx, Failure{Step: step, Got: "the controller does not advertise CREATE_DELETE_VOLUME",
			Expect: "the harness needs a pre-provisioned volume: set Config.VolumeID", Fatal: true})
	}
}

// registerInstance registers in with the node's registry and returns
// the registry's client of its socket. The node role's client is kept
// for the harness's own node calls.
func (l *run) registerInstance(ctx context.Context, step string, in instance) (fingerprint.Client, bool) {
	bad := func(err error) (fingerprint.Client, bool) {
		l.fail(ctx, Failure{Step: step, Expect: "the node's registry to take the plugin at " + in.socket, Detail: err.Error(), Fatal: true})
		return nil, false
	}
	if err := l.st.mgr.Register(fingerprint.Instance{PluginID: pluginID, AllocationID: in.allocID, Type: in.typ, Socket: in.socket}); err != nil {
		return bad(err)
	}
	var c any
	var err error
	if in.typ.HasNode() {
		var nc plugin.NodeClient
		nc, _, err = l.st.mgr.NodePlugin(pluginID)
		l.node, c = nc, nc
	} else {
		c, _, err = l.st.mgr.ControllerPlugin(pluginID)
	}
	if err != nil {
		return bad(err)
	}
	fc, ok := c.(fingerprint.Client)
	if !ok {
		return bad(fmt.Errorf("the registry's client of %s (%T) does not serve the identity calls", in.socket, c))
	}
	return fc, true
}

// fingerprintOne fingerprints one instance as a registry would,
// retrying while Probe says not ready or the plugin is unavailable. A
// failure stops the lifecycle when fatal.
func (l *run) fingerprintOne(ctx context.Context, step string, c fingerprint.Client, in instance, fatal bool) (*csi.PluginInfo, bool) {
	fp, err := fingerprint.NewFingerprinter(fingerprint.FingerprinterConfig{
		PluginID: pluginID, AllocationID: in.allocID, Type: in.typ, Client: c,
	})
	if err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "a fingerprinter for the plugin", Detail: err.Error(), Fatal: true})
		return nil, false
	}
	clk := clock.Or(l.cfg.clock)
	start := clk.Now()
	delay := 20 * time.Millisecond
	sawNotReady := false
	for tries := 1; ; tries++ {
		info, err := fp.Fingerprint(ctx)
		if err == nil {
			return info, true
		}
		// Probe's ready=false may last the step's Timeout, on the clock;
		// any other retryable answer (Unavailable) only maxUnavailable
		// times.
		notReady := errors.Is(err, csi.ErrPluginUnhealthy)
		sawNotReady = sawNotReady || notReady
		retry := csi.Classify(err) == csi.ClassRetryable && tries < maxUnavailable
		if notReady {
			retry = clk.Now().Sub(start)+delay <= l.cfg.Timeout
		}
		if retry && clock.Sleep(ctx, clk, delay) == nil {
			delay = min(2*delay, time.Second)
			continue
		}
		var f Failure
		// A plugin that said not ready and then let the step's deadline
		// pass in a call was still not ready: the verdict is the same
		// whichever call the deadline met.
		stepEnded := ctx.Err() != nil || csi.CodeOf(err) == csi.CodeDeadlineExceeded
		if notReady || sawNotReady && stepEnded && interruption(ctx) == nil {
			f = Failure{Step: step, Call: methodProbe, Code: csi.CodeOK, Got: "with ready=false",
				Expect: fmt.Sprintf("the plugin at %s must report ready within the step's %s (Config.Timeout)", in.socket, l.cfg.Timeout)}
		} else {
			f = l.failure(ctx, step, err, fmt.Sprintf("the spec requires OK from the identity, capability and node-info calls of a running %s plugin (at %s)", in.typ, in.socket))
		}
		f.Fatal = fatal
		l.fail(ctx, f)
		return nil, false
	}
}

// learn records what a fingerprint says and checks the fields the spec
// requires.
func (l *run) learn(ctx context.Context, step string, info *csi.PluginInfo) {
	l.provider = info.Provider
	if info.Provider == "" {
		l.fail(ctx, Failure{Step: step, Call: methodGetPluginInfo, Code: csi.CodeOK, Got: "with an empty name", Expect: "the spec requires the plugin's name"})
	}
	if info.ProviderVersion == "" {
		l.fail(ctx, Failure{Step: step, Call: methodGetPluginInfo, Code: csi.CodeOK, Got: "with an empty vendor_version", Expect: "the spec requires the plugin's vendor_version"})
	}
	if info.ControllerInfo != nil {
		l.hasController = true
		l.ctrlCaps = info.ControllerInfo.Capabilities
	}
	if info.NodeInfo != nil {
		l.nodeCaps = info.NodeInfo.Capabilities
		l.csiNode = info.NodeInfo.ID
		l.maxVolumes = info.NodeInfo.MaxVolumes
		if info.NodeInfo.ID == "" {
			l.fail(ctx, Failure{Step: step, Call: methodNodeGetInfo, Code: csi.CodeOK, Got: "with an empty node_id",
				Expect: "the spec requires node_id, which ControllerPublishVolume takes", Fatal: true})
		}
	}
}

// registerPlugin starts the node's registry (the fingerprint Manager),
// which fingerprints the instances registered in step fingerprint and
// reports them, and waits until the store sees the plugin healthy on the
// node, then reports the run's workloads to the store. It waits first:
// the registry's goroutines then start on the harness's own processor
// as it blocks, where a write meanwhile would have the scheduler wake
// another processor for them, which costs more than the write.
func (l *run) registerPlugin(ctx context.Context) {
	const step = "register plugin on the node"
	if !l.begin(ctx, step) {
		return
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	wantController := false
	for _, in := range l.instances {
		wantController = wantController || in.typ.HasController()
	}
	l.st.startRegistry(ctx)
	if err := l.st.waitHealthy(ctx, hostNode, wantController, true, l.st.lastReport); err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "the node's registry must find the plugin healthy, as the harness did in step \"fingerprint\"",
			Detail: err.Error(), Fatal: true})
		return
	}
	n := 2
	if l.cfg.Capability.AccessMode == csi.AccessModeSingleNodeSingleWriter {
		n = 1
		l.rep.Logf("%s allows one claim: the run uses one allocation", l.cfg.Capability.AccessMode)
	}
	var allocs []csi.Allocation
	for i := 1; i <= n; i++ {
		a := &alloc{n: i, id: fmt.Sprintf("alloc-%d", i), mode: csi.ClaimRead}
		if i == 1 && !l.cfg.Capability.AccessMode.ReadOnly() {
			a.mode = csi.ClaimWrite
		}
		l.allocs = append(l.allocs, a)
		allocs = append(allocs, a.allocation(false))
	}
	if _, err := l.st.applier.Apply(ctx, state.UpsertAllocations{Allocations: allocs}); err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "the store to take the run's allocations", Detail: err.Error(), Fatal: true})
	}
}

// provision creates the volume through the csikit server (CreateVolume
// through the router), or registers the pre-provisioned one
// (ValidateVolumeCapabilities when the plugin has a controller).
func (l *run) provision(ctx context.Context) {
	v := csi.Volume{
		ID:                   l.volID,
		Namespace:            namespace,
		Name:                 l.name,
		PluginID:             pluginID,
		Capabilities:         []csi.Capability{l.cfg.Capability},
		MountOptions:         l.cfg.MountOptions.Copy(),
		Secrets:              l.cfg.Secrets.Copy(),
		Parameters:           maps.Clone(l.cfg.Parameters),
		RequestedCapacityMin: l.cfg.CapacityBytes,
	}
	if l.cfg.VolumeID != "" {
		l.register(ctx, v)
		return
	}
	const step = "create volume"
	if !l.begin(ctx, step) {
		return
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	resp, err := l.st.server.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{Volume: v})
	if err != nil {
		f := l.failure(ctx, step, err, l.expectOK(methodCreateVolume, csi.CodeOf(err)))
		f.Fatal = true
		l.fail(ctx, f)
		return
	}
	l.externalID = resp.Volume.ExternalID
	l.created, l.registered = true, true
	l.cleanups.push(l.undoVolume)

	if !l.cfg.SkipIdempotency && l.begin(ctx, step+" (idempotent repeat)") {
		l.repeatCreate(ctx, step+" (idempotent repeat)")
	}
	if !l.cfg.SkipNegative && l.begin(ctx, "create volume without a name") {
		l.createWithoutName(ctx, "create volume without a name")
	}
}

// register registers the pre-provisioned volume.
func (l *run) register(ctx context.Context, v csi.Volume) {
	const step = "register volume"
	if !l.begin(ctx, step) {
		return
	}
	ctx, cancel := l.stepCtx(ctx)
	defer cancel()
	v.ExternalID = l.cfg.VolumeID
	v.Context = maps.Clone(l.cfg.VolumeContext)
	_, err := l.st.server.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: v})
	switch {
	case errors.Is(err, csi.ErrAccessModeNotAllowed):
		l.fail(ctx, Failure{Step: step, Call: methodValidate, Code: csi.CodeOK, Got: "without confirming " + l.cfg.Capability.String(),
			Expect: "the pre-provisioned volume must support the capability the harness uses; set Config.Capability to one it supports",
			Detail: err.Error(), Fatal: true})
		return
	case err != nil:
		f := l.failure(ctx, step, err, l.expectOK(methodValidate, csi.CodeOf(err)))
		f.Fatal = true
		l.fail(ctx, f)
		return
	}
	l.externalID = l.cfg.VolumeID
	l.registered = true
	l.cleanups.push(l.undoVolume)
}

// repeatCreate repeats the CreateVolume the stack sent.
func (l *run) repeatCreate(ctx context.Context, step string) {
	c, ok := l.calls.last(0, methodCreateVolume, nil)
	if !ok {
		l.rep.Skip(step, "the csikit stack's CreateVolume was not seen")
		return
	}
	v, err := l.ctrl.CreateVolume(ctx, c.Req.(*plugin.CreateVolumeRequest))
	switch {
	case err != nil:
		l.fail(ctx, l.failure(ctx, step, err, expectCreateRepeat))
	case v.ExternalID != l.externalID:
		l.cleanups.push(l.undoCreate(v.ExternalID))
		l.fail(ctx, Failure{Step: step, Call: methodCreateVolume, Code: csi.CodeOK,
			Got: fmt.Sprintf("with volume_id %q, not %q", v.ExternalID, l.externalID), Expect: expectCreateRepeat})
	}
}

// createWithoutName sends CreateVolume without its required name.
func (l *run) createWithoutName(ctx context.Context, step string) {
	cc, err := l.raw.controller(l.ctrlSocket)
	if err != nil {
		l.fail(ctx, Failure{Step: step, Expect: "a gRPC client of the controller", Detail: err.Error()})
		return
	}
	resp, err := cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		VolumeCapabilities: []*csipb.VolumeCapability{plugin.CapabilityToPB(l.cfg.Capability, l.cfg.MountOptions)},
		Parameters:         l.cfg.Parameters,
	})
	if err == nil && resp.GetVolume().GetVolumeId() != "" {
		l.cleanups.push(l.undoCreate(resp.GetVolume().GetVolumeId()))
	}
	l.expectCode(ctx, step, methodCreateVolume, err, csi.CodeInvalidArgument, expectMissingField+" (CreateVolumeRequest.name)")
}

// claimAll claims the volume for each allocation: the first claim
// ControllerPublishes (when the plugin needs it), the second shares its
// attachment.
func (l *run) claimAll(ctx context.Context) {
	for _, a := range l.allocs {
		step := fmt.Sprintf("claim (allocation %d)", a.n)
		if !l.begin(ctx, step) {
			continue
		}
		ctx, cancel := l.stepCtx(ctx)
		from := l.calls.len()
		resp, err := l.st.server.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: namespace, VolumeID: l.volID, Claim: csi.Claim{
			AllocationID:   a.id,
			NodeID:         hostNode,
			Mode:           a.mode,
			AccessMode:     l.cfg.Capability.AccessMode,
			AttachmentMode: l.cfg.Capability.AttachmentMode,
		}})
		if err != nil {
			f := l.failure(ctx, step, err, l.expectOK(methodControllerPublish, csi.CodeOf(err)))
			f.Fatal = true
			l.fail(ctx, f)
			cancel()
			continue
		}
		a.claim, a.vol, a.claimed = resp.Claim, resp.Volume, true
		if a.n == 1 {
			l.cleanups.push(l.undoClaims)
			if l.publishes() {
				l.controllerPublishChecks(ctx, from)
			}
		}
		cancel()
	}
}

// controllerPublishChecks repeats the ControllerPublishVolume the first
// claim made and sends the requests the plugin must refuse.
func (l *run) controllerPublishChecks(ctx context.Context, from int) {
	c, ok := l.calls.last(from, methodControllerPublish, nil)
	if !ok {
		return
	}
	req := c.Req.(*plugin.ControllerPublishRequest)
	if step := "controller publish (idempotent repeat)"; !l.cfg.SkipIdempotency && l.begin(ctx, step) {
		pc, err := l.ctrl.ControllerPublishVolume(ctx, req)
		switch want, _ := c.Result.(map[string]string); {
		case err != nil:
			l.fail(ctx, l.failure(ctx, step, err, expectPublishCtx))
		case !maps.Equal(pc, want):
			l.fail(ctx, Failure{Step: step, Call: methodControllerPublish, Code: csi.CodeOK,
				Got: fmt.Sprintf("with publish_context %v, not %v", pc, want), Expect: expectPublishCtx})
		}
	}
	if l.cfg.SkipNegative {
		return
	}
	if step := "controller publish of an unknown volume"; l.begin(ctx, step) {
		r := *req
		r.ExternalID = unknownID(l.externalID)
		_, err := l.ctrl.ControllerPublishVolume(ctx, &r)
		if err == nil {
			l.cleanups.push(l.undoControllerPublish(&r))
		}
		l.expectCode(ctx, step, methodControllerPublish, err, csi.CodeNotFound, fmt.Sprintf("%s (volume_id %q)", expectUnknownVol, r.ExternalID))
	}
	if step := "controller publish without a node ID"; l.begin(ctx, step) {
		cc, err := l.raw.controller(l.ctrlSocket)
		if err != nil {
			l.fail(ctx, Failure{Step: step, Expect: "a gRPC client of the controller", Detail: err.Error()})
			return
		}
		_, err = cc.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
			VolumeId:         req.ExternalID,
			VolumeCapability: plugin.CapabilityToPB(req.Capability, req.MountOptions),
			Readonly:         req.ReadOnly,
			VolumeContext:    req.VolumeContext,
		})
		l.expectCode(ctx, step, methodControllerPublish, err, csi.CodeInvalidArgument, expectMissingField+" (ControllerPublishVolumeRequest.node_id)")
	}
}

// expectCode checks that a call answered want. err is a gRPC status
// error (raw clients) or a *csi.RPCError (csi/plugin clients).
func (l *run) expectCode(ctx context.Context, step, method string, err error, want csi.Code, expect string) {
	got := csi.CodeOf(err)
	msg := ""
	var rerr *csi.RPCError
	switch {
	case err == nil:
	case errors.As(err, &rerr):
		msg = rerr.Message
	default:
		st := status.Convert(err)
		got, msg = csi.Code(st.Code()), st.Message()
	}
	if got == want {
		return
	}
	f := Failure{Step: step, Call: method, Code: got, Expect: expect}
	if msg != "" {
		f.Detail = fmt.Sprintf("plugin message: %q", msg)
	}
	l.fail(ctx, f)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
