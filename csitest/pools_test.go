package csitest_test

import (
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

const gib int64 = 1 << 30

func zone(z string) *csi.Topology { return &csi.Topology{Segments: map[string]string{"zone": z}} }

func zonePB(z string) *csipb.Topology { return &csipb.Topology{Segments: map[string]string{"zone": z}} }

// zonalConfig is a fake on a node in zone a, with 10 GiB in zone a and
// nothing in zone b.
func zonalConfig() csitest.Config {
	return csitest.Config{
		Controller:         csi.ControllerCapabilities{CreateDeleteVolume: true, GetCapacity: true, ExpandVolume: true},
		RequiresTopologies: true, Topology: zone("a"),
		Pools: []csitest.Pool{{Topology: zone("a"), Capacity: 10 * gib}, {Topology: zone("b")}},
	}
}

// requirement builds accessibility requirements from zones, each "z"
// ({zone: z}) or "z/r" ({zone: z, rack: r}).
func requirement(requisite, preferred []string) *csipb.TopologyRequirement {
	topo := func(s string) *csipb.Topology {
		z, r, ok := strings.Cut(s, "/")
		t := zonePB(z)
		if ok {
			t.Segments["rack"] = r
		}
		return t
	}
	req := &csipb.TopologyRequirement{}
	for _, z := range requisite {
		req.Requisite = append(req.Requisite, topo(z))
	}
	for _, z := range preferred {
		req.Preferred = append(req.Preferred, topo(z))
	}
	return req
}

// TestController_CreateVolume_Pools: CreateVolume places a volume in
// the pool the requirements allow, preferred first, and refuses with
// the code the spec gives when none can take it.
func TestController_CreateVolume_Pools(t *testing.T) {
	tests := []struct {
		name      string
		requisite []string
		preferred []string
		size      int64
		want      codes.Code
		wantZone  string // the created volume's zone: pool 0's
		msg       string // part of the error message
	}{
		{name: "no requirements: the node's zone", size: gib, wantZone: "a"},
		{name: "requisite a", requisite: []string{"a"}, size: gib, wantZone: "a"},
		{name: "requisite b has no room", requisite: []string{"b"}, size: gib, want: codes.ResourceExhausted,
			msg: "does not fit in the pools accessible from {zone=b}: {zone=b} with 0 of 0 bytes free"},
		{name: "preferred b is full, requisite a takes it", requisite: []string{"a", "b"}, preferred: []string{"b"}, size: gib, wantZone: "a"},
		{name: "preferred a", requisite: []string{"b", "a"}, preferred: []string{"a"}, size: gib, wantZone: "a"},
		{name: "preferred only, full", preferred: []string{"b"}, size: gib, wantZone: "a"},
		{name: "no pool in zone c", requisite: []string{"c"}, size: gib, want: codes.ResourceExhausted,
			msg: "no pool of the parameters of volume \"v\" is accessible from the requisite topologies {zone=c}"},
		{name: "preferred not requisite", requisite: []string{"a"}, preferred: []string{"b"}, size: gib, want: codes.InvalidArgument,
			msg: "preferred[0] map[zone:b] is not among the requisite topologies"},
		{name: "more than zone a holds", requisite: []string{"a", "b"}, size: 11 * gib, want: codes.ResourceExhausted},
		{name: "all of zone a", size: 10 * gib, wantZone: "a"},
		{name: "a node in a rack of zone a reaches zone a", requisite: []string{"b/r1", "a/r1"}, size: gib, wantZone: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c := start(t, zonalConfig())
			resp, err := c.ctrl.CreateVolume(ctxT(t), &csipb.CreateVolumeRequest{
				Name: "v", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
				CapacityRange:             &csipb.CapacityRange{RequiredBytes: tt.size},
				AccessibilityRequirements: requirement(tt.requisite, tt.preferred),
			})
			wantCode(t, err, tt.want)
			if err != nil {
				if !strings.Contains(status.Convert(err).Message(), tt.msg) {
					t.Errorf("message %q does not say %q", status.Convert(err).Message(), tt.msg)
				}
				if n := len(p.Volumes()); n != 0 {
					t.Errorf("a refused CreateVolume left %d volumes", n)
				}
				return
			}
			topo := resp.GetVolume().GetAccessibleTopology()
			if len(topo) != 1 || topo[0].GetSegments()["zone"] != tt.wantZone || len(topo[0].GetSegments()) != 1 {
				t.Errorf("accessible_topology %v, want zone %s", topo, tt.wantZone)
			}
			v, _ := p.Volume(resp.GetVolume().GetVolumeId())
			if v.Pool != 0 || len(v.Topologies) != 1 || !v.Topologies[0].Equal(zone(tt.wantZone)) {
				t.Errorf("model: pool %d, topologies %v; want pool 0 in zone %s", v.Pool, v.Topologies, tt.wantZone)
			}
		})
	}
}

// TestController_CreateVolume_PoolsDrawAndGiveBack: each volume takes
// its size from its pool, so the pool fills up; deleting a volume gives
// its room back, and expanding one takes more.
func TestController_CreateVolume_PoolsDrawAndGiveBack(t *testing.T) {
	p, c := start(t, zonalConfig())
	ctx := ctxT(t)
	avail := func(z string) int64 {
		t.Helper()
		resp, err := c.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{AccessibleTopology: zonePB(z)})
		noErr(t, err)
		return resp.GetAvailableCapacity()
	}
	first := createVolume(t, c, "first", 6*gib).GetVolumeId()
	if got := avail("a"); got != 4*gib {
		t.Fatalf("zone a has %d bytes after a 6 GiB volume, want 4 GiB", got)
	}
	_, err := c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "second", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 5 * gib}})
	wantCode(t, err, codes.ResourceExhausted)
	second := createVolume(t, c, "second", 4*gib).GetVolumeId()
	if got := avail("a"); got != 0 {
		t.Fatalf("zone a has %d bytes left, want 0", got)
	}
	_, err = c.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: second, CapacityRange: &csipb.CapacityRange{RequiredBytes: 5 * gib}})
	wantCode(t, err, codes.OutOfRange)
	_, err = c.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: first})
	noErr(t, err)
	if got := avail("a"); got != 6*gib {
		t.Fatalf("zone a has %d bytes after the delete, want 6 GiB", got)
	}
	_, err = c.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: second, CapacityRange: &csipb.CapacityRange{RequiredBytes: 5 * gib}})
	noErr(t, err)
	if got := avail("a"); got != 5*gib {
		t.Fatalf("zone a has %d bytes after expanding to 5 GiB, want 5 GiB", got)
	}
	if got := avail("b"); got != 0 {
		t.Errorf("zone b has %d bytes, want 0", got)
	}
	// A volume AddVolume puts in the model takes no pool's room.
	p.AddVolume("registered", 100*gib, nil)
	if got := avail("a"); got != 5*gib {
		t.Errorf("zone a has %d bytes after AddVolume, want 5 GiB", got)
	}
	if v, _ := p.Volume("registered"); v.Pool != -1 {
		t.Errorf("AddVolume's volume is in pool %d, want -1", v.Pool)
	}
}

// TestController_CreateVolume_PoolClasses: the parameters choose the
// pool's class, and the size bounds of a pool give OutOfRange.
func TestController_CreateVolume_PoolClasses(t *testing.T) {
	cfg := csitest.Config{
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, GetCapacity: true},
		Pools: []csitest.Pool{
			{Parameters: map[string]string{"tier": "fast"}, Capacity: 4 * gib, MaxVolumeSize: new(2 * gib)},
			{Parameters: map[string]string{"tier": "slow"}, Capacity: 100 * gib, MinVolumeSize: new(10 * gib)},
		},
	}
	tests := []struct {
		name     string
		params   map[string]string
		req, lim int64
		want     codes.Code
		pool     int
		capacity int64
	}{
		{"fast", map[string]string{"tier": "fast"}, gib, 0, codes.OK, 0, gib},
		{"fast with other parameters too", map[string]string{"tier": "fast", "fs": "xfs"}, gib, 0, codes.OK, 0, gib},
		{"fast default size", map[string]string{"tier": "fast"}, 0, 0, codes.OK, 0, gib},
		{"fast above its maximum", map[string]string{"tier": "fast"}, 3 * gib, 0, codes.OutOfRange, 0, 0},
		{"slow grows to its minimum", map[string]string{"tier": "slow"}, gib, 0, codes.OK, 1, 10 * gib},
		{"slow with a limit below its minimum", map[string]string{"tier": "slow"}, gib, 2 * gib, codes.OutOfRange, 0, 0},
		{"no class", nil, gib, 0, codes.InvalidArgument, 0, 0},
		{"unknown class", map[string]string{"tier": "gold"}, gib, 0, codes.InvalidArgument, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c := start(t, cfg)
			resp, err := c.ctrl.CreateVolume(ctxT(t), &csipb.CreateVolumeRequest{
				Name: "v", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}, Parameters: tt.params,
				CapacityRange: &csipb.CapacityRange{RequiredBytes: tt.req, LimitBytes: tt.lim},
			})
			wantCode(t, err, tt.want)
			if err != nil {
				return
			}
			v, _ := p.Volume(resp.GetVolume().GetVolumeId())
			if v.Pool != tt.pool || v.Capacity != tt.capacity || resp.GetVolume().GetCapacityBytes() != tt.capacity {
				t.Errorf("volume in pool %d with %d bytes (reply %d), want pool %d with %d", v.Pool, v.Capacity, resp.GetVolume().GetCapacityBytes(), tt.pool, tt.capacity)
			}
			if len(v.Topologies) != 0 {
				t.Errorf("a pool without topology made a volume with topologies %v", v.Topologies)
			}
		})
	}
}

// TestController_ControllerExpandVolume_PoolBound: a volume grows up to
// its pool's maximum volume size, not beyond, whatever room is left.
func TestController_ControllerExpandVolume_PoolBound(t *testing.T) {
	_, c := start(t, csitest.Config{
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, ExpandVolume: true},
		Pools:      []csitest.Pool{{Capacity: 100 * gib, MaxVolumeSize: new(2 * gib)}},
	})
	ctx := ctxT(t)
	id := createVolume(t, c, "v", gib).GetVolumeId()
	expand := func(n int64) error {
		_, err := c.ctrl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csipb.CapacityRange{RequiredBytes: n}})
		return err
	}
	noErr(t, expand(2*gib))
	wantCode(t, expand(2*gib+1), codes.OutOfRange)
}

// TestController_CreateVolume_PoolsRepeat: a repeated CreateVolume
// returns the volume it made, unless the new requisite topologies
// exclude it.
func TestController_CreateVolume_PoolsRepeat(t *testing.T) {
	cfg := zonalConfig()
	cfg.Pools[1].Capacity = 10 * gib
	_, c := start(t, cfg)
	ctx := ctxT(t)
	req := &csipb.CreateVolumeRequest{Name: "v", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}, AccessibilityRequirements: requirement([]string{"b"}, nil)}
	first, err := c.ctrl.CreateVolume(ctx, req)
	noErr(t, err)
	again, err := c.ctrl.CreateVolume(ctx, req)
	noErr(t, err)
	if again.GetVolume().GetVolumeId() != first.GetVolume().GetVolumeId() {
		t.Errorf("the repeat made %s, want %s", again.GetVolume().GetVolumeId(), first.GetVolume().GetVolumeId())
	}
	req.AccessibilityRequirements = requirement([]string{"a"}, nil)
	_, err = c.ctrl.CreateVolume(ctx, req)
	wantCode(t, err, codes.AlreadyExists)
}

// TestController_GetCapacity_Pools: GetCapacity answers per topology and
// per class, with the volume size bounds only where a pool sets them.
func TestController_GetCapacity_Pools(t *testing.T) {
	cfg := csitest.Config{
		Controller:         csi.ControllerCapabilities{CreateDeleteVolume: true, GetCapacity: true},
		RequiresTopologies: true,
		Pools: []csitest.Pool{
			{Topology: zone("a"), Capacity: 10 * gib},
			{Topology: zone("b")},
			{Topology: zone("a"), Parameters: map[string]string{"tier": "fast"}, Capacity: 3 * gib, MaxVolumeSize: new(gib), MinVolumeSize: new(int64(1 << 20))},
			{Topology: zone("d"), Parameters: map[string]string{"tier": "fast"}, Capacity: 5 * gib, MinVolumeSize: new(int64(1 << 20))},
			{Topology: &csi.Topology{Segments: map[string]string{"zone": "c", "rack": "r1"}}, Capacity: 2 * gib, MaxVolumeSize: new(int64(0))},
		},
	}
	_, c := start(t, cfg)
	createVolume(t, c, "used", 4*gib) // lands in the first pool: the fake's node has no topology
	tests := []struct {
		name     string
		topology *csipb.Topology
		params   map[string]string
		want     int64
		max, min *int64 // nil: not reported
	}{
		// A pool without a class serves every request, one with a class
		// only the requests of its class.
		{"everything", nil, nil, 6*gib + 2*gib, new(6 * gib), nil},
		{"zone a", zonePB("a"), nil, 6 * gib, nil, nil},
		{"zone a, fast", zonePB("a"), map[string]string{"tier": "fast"}, 6*gib + 3*gib, new(6 * gib), new(int64(0))},
		{"zone d, fast", zonePB("d"), map[string]string{"tier": "fast"}, 5 * gib, nil, new(int64(1 << 20))},
		{"zone d, no class", zonePB("d"), nil, 0, nil, nil},
		{"zone b", zonePB("b"), nil, 0, nil, nil},
		{"zone c alone holds no rack", zonePB("c"), nil, 0, nil, nil},
		{"rack r1 of zone c", &csipb.Topology{Segments: map[string]string{"zone": "c", "rack": "r1"}}, nil, 2 * gib, new(int64(0)), nil},
		{"a node in zone a, rack r9", &csipb.Topology{Segments: map[string]string{"zone": "a", "rack": "r9"}}, nil, 6 * gib, nil, nil},
		{"unknown class", nil, map[string]string{"tier": "gold"}, 6*gib + 2*gib, new(6 * gib), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.ctrl.GetCapacity(ctxT(t), &csipb.GetCapacityRequest{AccessibleTopology: tt.topology, Parameters: tt.params})
			noErr(t, err)
			if resp.GetAvailableCapacity() != tt.want {
				t.Errorf("available %d, want %d", resp.GetAvailableCapacity(), tt.want)
			}
			for _, b := range []struct {
				name string
				got  interface{ GetValue() int64 }
				ok   bool
				want *int64
			}{
				{"maximum_volume_size", resp.GetMaximumVolumeSize(), resp.GetMaximumVolumeSize() != nil, tt.max},
				{"minimum_volume_size", resp.GetMinimumVolumeSize(), resp.GetMinimumVolumeSize() != nil, tt.min},
			} {
				if b.ok != (b.want != nil) || b.ok && b.got.GetValue() != *b.want {
					t.Errorf("%s %v, want %v", b.name, b.got, b.want)
				}
			}
		})
	}
}

// legacyCondition decodes field 2 of a ControllerGetVolume status the
// way a CSI 1.12 client would.
func legacyCondition(t *testing.T, st *csipb.ControllerGetVolumeResponse_VolumeStatus) (found, abnormal bool, message string) {
	t.Helper()
	b := st.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		if num != 2 || typ != protowire.BytesType {
			t.Fatalf("unknown field %d of type %d in the status", num, typ)
		}
		cond, n := protowire.ConsumeBytes(b)
		b = b[n:]
		found = true
		for len(cond) > 0 {
			num, typ, n := protowire.ConsumeTag(cond)
			cond = cond[n:]
			switch {
			case num == 1 && typ == protowire.VarintType:
				v, n := protowire.ConsumeVarint(cond)
				abnormal, cond = v != 0, cond[n:]
			case num == 2 && typ == protowire.BytesType:
				v, n := protowire.ConsumeString(cond)
				message, cond = v, cond[n:]
			default:
				t.Fatalf("field %d of type %d in the condition", num, typ)
			}
		}
	}
	return found, abnormal, message
}

func TestController_ControllerGetVolume_Status(t *testing.T) {
	tests := []struct {
		reply     csitest.StatusReply
		status    bool
		condition bool
	}{
		{csitest.StatusPublishedNodes, true, false},
		{csitest.StatusWithCondition, true, true},
		{csitest.StatusAbsent, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.reply.String(), func(t *testing.T) {
			cfg := fullConfig
			cfg.VolumeStatus = tt.reply
			p, c := start(t, cfg)
			ctx := ctxT(t)
			id := createVolume(t, c, "v", 0).GetVolumeId()
			_, err := c.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: mountCap(snw)})
			noErr(t, err)
			get := func() *csipb.ControllerGetVolumeResponse_VolumeStatus {
				resp, err := c.ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: id})
				noErr(t, err)
				if resp.GetVolume().GetVolumeId() != id {
					t.Fatalf("ControllerGetVolume = %v", resp)
				}
				return resp.GetStatus()
			}
			st := get()
			if (st != nil) != tt.status {
				t.Fatalf("status %v, want one: %v", st, tt.status)
			}
			if !tt.status {
				return
			}
			if got := st.GetPublishedNodeIds(); len(got) != 1 || got[0] != "n1" {
				t.Errorf("published_node_ids %v, want [n1]", got)
			}
			found, abnormal, msg := legacyCondition(t, st)
			if found != tt.condition || abnormal || msg != "" {
				t.Errorf("condition found %v (abnormal %v, %q), want found %v and normal", found, abnormal, msg, tt.condition)
			}
			if !p.SetVolumeCondition(id, true, "disk gone") {
				t.Fatal("SetVolumeCondition found no volume")
			}
			found, abnormal, msg = legacyCondition(t, get())
			if found != tt.condition || tt.condition && (!abnormal || msg != "disk gone") {
				t.Errorf("after SetVolumeCondition: found %v, abnormal %v, %q", found, abnormal, msg)
			}
			if v, _ := p.Volume(id); !v.Abnormal || v.ConditionMessage != "disk gone" {
				t.Errorf("model condition %v %q", v.Abnormal, v.ConditionMessage)
			}
		})
	}
	p := csitest.Start(t, fullConfig)
	if p.SetVolumeCondition("nope", true, "x") {
		t.Error("SetVolumeCondition of an unknown volume reported success")
	}
}
