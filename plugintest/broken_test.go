package plugintest_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/plugintest"
)

// A broken variant: a well-behaved plugin (csitest with every
// capability) behind a proxy that breaks one rule, and the check that
// must catch it.
type variant struct {
	name, area string
	brk        func() breakFunc // new state per run
	step, call string           // the failure expected
	code       codes.Code       // the code the failure reports; area "faults" runs with Config.Faults
}

// mutate changes each successful answer of method.
func mutate[Req, Resp proto.Message](method string, fn func(req Req, resp Resp)) func() breakFunc {
	return func() breakFunc {
		return breakFunc{after: func(m string, req, resp proto.Message, err error) (proto.Message, error) {
			if m == method && err == nil {
				fn(req.(Req), resp.(Resp))
			}
			return resp, err
		}}
	}
}

// answer answers method in the plugin's place when cond holds.
func answer[Req proto.Message](method string, cond func(req Req) bool, resp proto.Message, err error) func() breakFunc {
	return func() breakFunc {
		return breakFunc{before: func(m string, req proto.Message) (proto.Message, error) {
			if m == method && cond(req.(Req)) {
				return resp, err
			}
			return nil, nil
		}}
	}
}

// recode turns the plugin's code from into to for method.
func recode(method string, from codes.Code, to codes.Code) func() breakFunc {
	return func() breakFunc {
		return breakFunc{after: func(m string, _, resp proto.Message, err error) (proto.Message, error) {
			if m == method && status.Code(err) == from {
				if to == codes.OK {
					return resp, nil
				}
				return nil, status.Error(to, "broken variant")
			}
			return resp, err
		}}
	}
}

// repeatRefused answers AlreadyExists to the second identical call.
func repeatRefused(method string) func() breakFunc {
	return func() breakFunc {
		var mu sync.Mutex
		seen := map[string]bool{}
		return breakFunc{before: func(m string, req proto.Message) (proto.Message, error) {
			if m != method {
				return nil, nil
			}
			k := req.(fmt.Stringer).String()
			mu.Lock()
			defer mu.Unlock()
			if seen[k] {
				return nil, status.Error(codes.AlreadyExists, "already done")
			}
			seen[k] = true
			return nil, nil
		}}
	}
}

// renamed gives every repeat of a named create a new ID.
func renamed[Req, Resp proto.Message](method string, name func(Req) string, setID func(Resp, string)) func() breakFunc {
	return func() breakFunc {
		var mu sync.Mutex
		n := map[string]int{}
		return mutate(method, func(req Req, resp Resp) {
			mu.Lock()
			defer mu.Unlock()
			n[name(req)]++
			if n[name(req)] > 1 {
				setID(resp, fmt.Sprintf("other-%d", n[name(req)]))
			}
		})()
	}
}

func always[Req proto.Message](Req) bool { return true }

// unknownVolume holds for the IDs the harness makes up for volumes that
// do not exist: csitest numbers its volumes "vol-1", "vol-2", …, and
// the harness's unknown ID adds nine digits to the counter.
func unknownVolume[Req interface{ GetVolumeId() string }](r Req) bool {
	return len(r.GetVolumeId()) > len("vol-")+6
}

var brokenVariants = []variant{
	// identity
	{"empty plugin name", "identity", mutate("GetPluginInfo", func(_ *csipb.GetPluginInfoRequest, r *csipb.GetPluginInfoResponse) { r.Name = "" }), "fingerprint", "GetPluginInfo", codes.OK},
	{"plugin name not a domain name", "identity", mutate("GetPluginInfo", func(_ *csipb.GetPluginInfoRequest, r *csipb.GetPluginInfoResponse) { r.Name = "my plugin!" }), "GetPluginInfo (name)", "GetPluginInfo", codes.OK},
	{"empty vendor version", "identity", mutate("GetPluginInfo", func(_ *csipb.GetPluginInfoRequest, r *csipb.GetPluginInfoResponse) { r.VendorVersion = "" }), "fingerprint", "GetPluginInfo", codes.OK},
	{"empty node ID", "identity", mutate("NodeGetInfo", func(_ *csipb.NodeGetInfoRequest, r *csipb.NodeGetInfoResponse) { r.NodeId = "" }), "fingerprint", "NodeGetInfo", codes.OK},
	// controller
	{"ListVolumes leaves the volume out", "controller", mutate("ListVolumes", func(_ *csipb.ListVolumesRequest, r *csipb.ListVolumesResponse) { r.Entries, r.NextToken = nil, "" }), "ListVolumes", "ListVolumes", codes.OK},
	{"GetCapacity negative", "controller", mutate("GetCapacity", func(_ *csipb.GetCapacityRequest, r *csipb.GetCapacityResponse) { r.AvailableCapacity = -1 }), "GetCapacity", "GetCapacity", codes.OK},
	{"GetCapacity unimplemented though advertised", "controller", answer("GetCapacity", always[*csipb.GetCapacityRequest], nil, status.Error(codes.Unimplemented, "no")), "GetCapacity", "GetCapacity", codes.Unimplemented},
	{"ControllerGetVolume answers another volume", "controller", mutate("ControllerGetVolume", func(_ *csipb.ControllerGetVolumeRequest, r *csipb.ControllerGetVolumeResponse) {
		r.Volume.VolumeId += "x"
	}), "ControllerGetVolume", "ControllerGetVolume", codes.OK},
	{"ControllerGetVolume OK for an unknown volume", "error codes", recode("ControllerGetVolume", codes.NotFound, codes.OK), "ControllerGetVolume", "ControllerGetVolume", codes.OK},
	{"ValidateVolumeCapabilities confirms nothing", "controller", mutate("ValidateVolumeCapabilities", func(_ *csipb.ValidateVolumeCapabilitiesRequest, r *csipb.ValidateVolumeCapabilitiesResponse) {
		r.Confirmed = nil
	}), "ValidateVolumeCapabilities", "ValidateVolumeCapabilities", codes.OK},
	{"ValidateVolumeCapabilities takes no capabilities", "error codes", answer("ValidateVolumeCapabilities", func(r *csipb.ValidateVolumeCapabilitiesRequest) bool { return len(r.VolumeCapabilities) == 0 }, &csipb.ValidateVolumeCapabilitiesResponse{}, nil), "ValidateVolumeCapabilities", "ValidateVolumeCapabilities", codes.OK},
	{"names over 100 bytes refused", "controller", answer("CreateVolume", func(r *csipb.CreateVolumeRequest) bool { return len(r.Name) > 100 }, nil, status.Error(codes.InvalidArgument, "name too long")), "CreateVolume (128-byte name)", "CreateVolume", codes.InvalidArgument},
	{"DeleteVolume NotFound for an unknown volume", "error codes", answer("DeleteVolume", unknownVolume[*csipb.DeleteVolumeRequest], nil, status.Error(codes.NotFound, "gone")), "DeleteVolume (errors)", "DeleteVolume", codes.NotFound},
	{"ControllerPublishVolume takes no capability", "error codes", answer("ControllerPublishVolume", func(r *csipb.ControllerPublishVolumeRequest) bool { return r.VolumeCapability == nil }, &csipb.ControllerPublishVolumeResponse{}, nil), "ControllerPublishVolume (errors)", "ControllerPublishVolume", codes.OK},
	{"ControllerUnpublishVolume fails for an unknown volume", "error codes", answer("ControllerUnpublishVolume", unknownVolume[*csipb.ControllerUnpublishVolumeRequest], nil, status.Error(codes.Internal, "no such volume")), "ControllerUnpublishVolume (errors)", "ControllerUnpublishVolume", codes.Internal},
	{"max_volumes_per_node not enforced", "controller", mutate("NodeGetInfo", func(_ *csipb.NodeGetInfoRequest, r *csipb.NodeGetInfoResponse) { r.MaxVolumesPerNode = 2 }), "ControllerPublishVolume (attach limit)", "ControllerPublishVolume", codes.OK},
	// paging
	{"ListVolumes ignores max_entries", "paging", func() breakFunc {
		return breakFunc{before: func(m string, req proto.Message) (proto.Message, error) {
			if m == "ListVolumes" {
				req.(*csipb.ListVolumesRequest).MaxEntries = 0
			}
			return nil, nil
		}}
	}, "ListVolumes (paging)", "ListVolumes", codes.OK},
	{"ListVolumes takes any starting token", "paging", recode("ListVolumes", codes.Aborted, codes.OK), "ListVolumes (invalid starting token)", "ListVolumes", codes.OK},
	{"ListSnapshots ignores max_entries", "paging", func() breakFunc {
		return breakFunc{before: func(m string, req proto.Message) (proto.Message, error) {
			if m == "ListSnapshots" {
				req.(*csipb.ListSnapshotsRequest).MaxEntries = 0
			}
			return nil, nil
		}}
	}, "ListSnapshots (paging)", "ListSnapshots", codes.OK},
	{"ListSnapshots takes any starting token", "paging", recode("ListSnapshots", codes.Aborted, codes.OK), "ListSnapshots (invalid starting token)", "ListSnapshots", codes.OK},
	// idempotency
	{"CreateVolume repeat makes another volume", "idempotency", renamed("CreateVolume", (*csipb.CreateVolumeRequest).GetName, func(r *csipb.CreateVolumeResponse, id string) { r.Volume.VolumeId = id }), "create volume (idempotent repeat)", "CreateVolume", codes.OK},
	{"ControllerPublishVolume repeat refused", "idempotency", repeatRefused("ControllerPublishVolume"), "controller publish (idempotent repeat)", "ControllerPublishVolume", codes.AlreadyExists},
	{"NodeStageVolume repeat refused", "idempotency", repeatRefused("NodeStageVolume"), "stage (idempotent repeat)", "NodeStageVolume", codes.AlreadyExists},
	{"NodePublishVolume repeat refused", "idempotency", repeatRefused("NodePublishVolume"), "publish (idempotent repeat)", "NodePublishVolume", codes.AlreadyExists},
	{"CreateSnapshot repeat makes another snapshot", "idempotency", renamed("CreateSnapshot", (*csipb.CreateSnapshotRequest).GetName, func(r *csipb.CreateSnapshotResponse, id string) { r.Snapshot.SnapshotId = id }), "CreateSnapshot", "CreateSnapshot", codes.OK},
	{"DeleteSnapshot repeat NotFound", "idempotency", func() breakFunc {
		var mu sync.Mutex
		gone := map[string]bool{}
		return breakFunc{before: func(m string, req proto.Message) (proto.Message, error) {
			if m != "DeleteSnapshot" {
				return nil, nil
			}
			id := req.(*csipb.DeleteSnapshotRequest).GetSnapshotId()
			mu.Lock()
			defer mu.Unlock()
			if gone[id] {
				return nil, status.Error(codes.NotFound, "no such snapshot")
			}
			gone[id] = true
			return nil, nil
		}}
	}, "CreateSnapshot", "DeleteSnapshot", codes.NotFound},
	// snapshots
	{"CreateSnapshot names another source", "snapshots", mutate("CreateSnapshot", func(_ *csipb.CreateSnapshotRequest, r *csipb.CreateSnapshotResponse) {
		r.Snapshot.SourceVolumeId = "elsewhere"
	}), "CreateSnapshot", "CreateSnapshot", codes.OK},
	{"CreateSnapshot Internal for an unknown source", "snapshots", recode("CreateSnapshot", codes.NotFound, codes.Internal), "CreateSnapshot (errors)", "CreateSnapshot", codes.Internal},
	{"restored volume without its content source", "snapshots", mutate("CreateVolume", func(_ *csipb.CreateVolumeRequest, r *csipb.CreateVolumeResponse) { r.Volume.ContentSource = nil }), "CreateVolume (from a snapshot)", "CreateVolume", codes.OK},
	{"clone of an unknown volume Internal", "snapshots", recode("CreateVolume", codes.NotFound, codes.Internal), "CreateVolume (clone)", "CreateVolume", codes.Internal},
	// expansion
	{"ControllerExpandVolume grows too little", "expansion", mutate("ControllerExpandVolume", func(_ *csipb.ControllerExpandVolumeRequest, r *csipb.ControllerExpandVolumeResponse) {
		r.CapacityBytes = 1
	}), "ControllerExpandVolume", "ControllerExpandVolume", codes.OK},
	{"ControllerExpandVolume takes no capacity range", "expansion", answer("ControllerExpandVolume", func(r *csipb.ControllerExpandVolumeRequest) bool { return r.CapacityRange == nil }, &csipb.ControllerExpandVolumeResponse{CapacityBytes: 1 << 30}, nil), "ControllerExpandVolume (errors)", "ControllerExpandVolume", codes.OK},
	{"NodeExpandVolume OK for an unknown volume", "expansion", recode("NodeExpandVolume", codes.NotFound, codes.OK), "NodeExpandVolume (errors)", "NodeExpandVolume", codes.OK},
	// node
	{"NodeGetVolumeStats OK for an unknown volume or path", "node", recode("NodeGetVolumeStats", codes.NotFound, codes.OK), "NodeGetVolumeStats", "NodeGetVolumeStats", codes.OK},
	{"NodeGetVolumeStats usage without a unit", "node", mutate("NodeGetVolumeStats", func(_ *csipb.NodeGetVolumeStatsRequest, r *csipb.NodeGetVolumeStatsResponse) {
		r.Usage = []*csipb.VolumeUsage{{Total: 10, Used: 1, Available: 9}}
	}), "NodeGetVolumeStats", "NodeGetVolumeStats", codes.OK},
	{"NodeGetVolumeStats uses more than the total", "node", mutate("NodeGetVolumeStats", func(_ *csipb.NodeGetVolumeStatsRequest, r *csipb.NodeGetVolumeStatsResponse) {
		r.Usage = []*csipb.VolumeUsage{{Unit: csipb.VolumeUsage_BYTES, Total: 10, Used: 11}}
	}), "NodeGetVolumeStats (values)", "NodeGetVolumeStats", codes.OK},
	{"NodeUnpublishVolume takes no target path", "error codes", answer("NodeUnpublishVolume", func(r *csipb.NodeUnpublishVolumeRequest) bool { return r.TargetPath == "" }, &csipb.NodeUnpublishVolumeResponse{}, nil), "NodeUnpublishVolume (missing fields)", "NodeUnpublishVolume", codes.OK},
	{"NodeUnstageVolume takes no volume ID", "error codes", answer("NodeUnstageVolume", func(r *csipb.NodeUnstageVolumeRequest) bool { return r.VolumeId == "" }, &csipb.NodeUnstageVolumeResponse{}, nil), "NodeUnstageVolume (missing fields)", "NodeUnstageVolume", codes.OK},
	// cleanup
	{"NodeUnpublishVolume leaves the target", "cleanup", answer("NodeUnpublishVolume", func(r *csipb.NodeUnpublishVolumeRequest) bool { return r.TargetPath != "" && r.VolumeId != "" }, &csipb.NodeUnpublishVolumeResponse{}, nil), "unmount (allocation 2)", "NodeUnpublishVolume", codes.OK},
	// faults: a retry after a cancelled call must succeed
	{name: "ControllerPublishVolume retry after a cancel fails", area: "faults", brk: func() breakFunc {
		var mu sync.Mutex
		cancelled := map[string]bool{}
		return breakFunc{slow: func(ctx context.Context, m string, req proto.Message) {
			// A publish with little time left outlives it, like a slow
			// attach, and its retries then fail.
			if d, ok := ctx.Deadline(); m == "ControllerPublishVolume" && ok && time.Until(d) < time.Second {
				<-ctx.Done()
				mu.Lock()
				cancelled[req.(fmt.Stringer).String()] = true
				mu.Unlock()
			}
		}, after: func(m string, req, resp proto.Message, err error) (proto.Message, error) {
			if m != "ControllerPublishVolume" || status.Code(err) == codes.DeadlineExceeded {
				return resp, err
			}
			mu.Lock()
			defer mu.Unlock()
			if cancelled[req.(fmt.Stringer).String()] {
				return nil, status.Error(codes.Internal, "a publish of this volume is stuck")
			}
			return resp, err
		}}
	}, step: "cancelled call retried (ControllerPublishVolume)", call: "ControllerPublishVolume", code: codes.Internal},
	// setup: a call that stays down fails its own check, and the run goes on
	{"ListVolumes always Unavailable", "controller", answer("ListVolumes", always[*csipb.ListVolumesRequest], nil, status.Error(codes.Unavailable, "down")), "ListVolumes", "ListVolumes", codes.Unavailable},
}

// Every broken variant is caught by the check meant for it, with a
// message naming the call, the code and the spec's expectation.
func TestCheck_BrokenVariants(t *testing.T) {
	if len(brokenVariants) < 25 {
		t.Fatalf("%d variants; the issue asks for at least 25", len(brokenVariants))
	}
	for _, v := range brokenVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			p := csitest.Start(t, everyCapability())
			b := v.brk()
			var mu sync.Mutex
			tries := 0
			if before := b.before; v.code == codes.Unavailable {
				b.before = func(m string, req proto.Message) (proto.Message, error) {
					if m == v.call {
						mu.Lock()
						tries++
						mu.Unlock()
					}
					return before(m, req)
				}
			}
			sock := startProxy(t, p.Endpoint(), b)
			r := &plugintest.Recorder{}
			dir := t.TempDir()
			cfg := plugintest.Config{Endpoint: sock, DataCheck: plugintest.DataWriterOnly, Timeout: 10 * time.Second,
				MountRoot: filepath.Join(dir, "mnt"), StateDir: filepath.Join(dir, "state"), Faults: v.area == "faults"}
			if err := plugintest.Check(t.Context(), cfg, r); err != nil {
				t.Fatal(err)
			}
			var caught *plugintest.Failure
			for _, f := range r.Failures() {
				if f.Step == v.step && f.Call == v.call && f.Code == csi.Code(v.code) {
					caught = &f
					break
				}
			}
			if caught == nil {
				t.Fatalf("not caught by step %q (%s %s); failures:\n%v", v.step, v.call, v.code, r.Failures())
			}
			msg := caught.String()
			if !strings.Contains(msg, v.call+" returned "+csi.Code(v.code).String()) {
				t.Errorf("message %q does not name the call and the code", msg)
			}
			if !strings.Contains(msg, "requires") && !strings.Contains(msg, "recommends") && !strings.Contains(msg, "must") {
				t.Errorf("message %q does not say what the spec expects", msg)
			}
			if v.code == codes.Unavailable {
				// Three rows call ListVolumes first; each tries at most 5 times.
				mu.Lock()
				if tries > 3*5 {
					t.Errorf("%d calls to %s that answered Unavailable; the retries are not bounded", tries, v.call)
				}
				mu.Unlock()
				for _, s := range r.Steps() {
					if s.Name == "release" && s.Status != plugintest.StatusPass {
						t.Errorf("a check that stays Unavailable stopped the run: release %s", s.Status)
					}
				}
			}
			t.Logf("DETECT | %s | %s | %s | %s", v.area, v.name, v.step, msg)
		})
	}
}

// The variants that apply to the hostpath example, a real plugin, behind
// the same proxy: each is caught as it is on the fake.
func TestCheck_BrokenHostpath(t *testing.T) {
	names := []string{
		"empty plugin name", "ListVolumes ignores max_entries", "ListVolumes takes any starting token",
		"ControllerGetVolume OK for an unknown volume", "CreateVolume repeat makes another volume",
		"ControllerPublishVolume repeat refused", "NodePublishVolume repeat refused",
		"ControllerExpandVolume grows too little", "NodeUnpublishVolume leaves the target",
	}
	byName := map[string]variant{}
	for _, v := range brokenVariants {
		byName[v.name] = v
	}
	for _, n := range names {
		v, ok := byName[n]
		if !ok {
			t.Fatalf("no variant %q", n)
		}
		t.Run(n, func(t *testing.T) {
			t.Parallel()
			sock := startProxy(t, startHostpath(t, hostpath.Config{ControllerPublish: true, Staging: true}), v.brk())
			r := &plugintest.Recorder{}
			dir := t.TempDir()
			cfg := plugintest.Config{Endpoint: sock, Timeout: 10 * time.Second, MountRoot: filepath.Join(dir, "mnt"), StateDir: filepath.Join(dir, "state")}
			if err := plugintest.Check(t.Context(), cfg, r); err != nil {
				t.Fatal(err)
			}
			for _, f := range r.Failures() {
				if f.Step == v.step && f.Call == v.call && f.Code == csi.Code(v.code) {
					t.Logf("DETECT-HOSTPATH | %s | %s | %s", v.name, v.step, f)
					return
				}
			}
			t.Fatalf("not caught by step %q (%s %s); failures:\n%v", v.step, v.call, v.code, r.Failures())
		})
	}
}
