package rpcshim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/fingerprint"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// placeEnv is a server and csitest node plugins, one per node, each
// fingerprinted by a fingerprint.Manager and served by a node endpoint
// over the in-memory transport. n1 also runs the controller, a csitest
// fake of its own.
type placeEnv struct {
	store   *state.MemStore
	applier *state.LocalApplier
	server  *rpcshim.Server
	ctl     *csitest.Plugin
	// tr also serves the Server's Claim and Feasibility as node "server",
	// the way a host exposes them over its transport.
	tr     *rpcshim.InmemTransport
	router *rpcshim.Router
}

// zoneA, zoneB are the topologies of the nodes in the placement tests.
var (
	zoneA = &csi.Topology{Segments: map[string]string{"zone": "a"}}
	zoneB = &csi.Topology{Segments: map[string]string{"zone": "b"}}
)

// newPlaceEnv starts a node per entry of nodes (node ID → topology, nil
// for none); requires sets VOLUME_ACCESSIBILITY_CONSTRAINTS on every
// plugin.
func newPlaceEnv(t *testing.T, requires bool, nodes map[string]*csi.Topology) *placeEnv {
	t.Helper()
	return newPlaceEnvWith(t, requires, nodes, nil)
}

// newPlaceEnvWith is newPlaceEnv with the controller's csitest.Config
// changed by ctl first, when not nil.
func newPlaceEnvWith(t *testing.T, requires bool, nodes map[string]*csi.Topology, ctl func(*csitest.Config)) *placeEnv {
	t.Helper()
	store, err := state.NewMemStore(state.Config{})
	must(t, err)
	e := &placeEnv{store: store, applier: state.NewLocalApplier(store)}
	tr := rpcshim.NewInmemTransport()
	t.Cleanup(func() { _ = tr.Close() })
	statuses := &rpcshim.InmemNodeStatuses{}
	ctlCfg := csitest.Config{
		Type: csi.PluginTypeController, Name: e2eProvider, RequiresTopologies: requires,
		Controller: csi.ControllerCapabilities{PublishUnpublishVolume: true, CreateDeleteVolume: true},
	}
	if ctl != nil {
		ctl(&ctlCfg)
	}
	e.ctl = csitest.Start(t, ctlCfg)
	for id, top := range nodes {
		p := csitest.Start(t, csitest.Config{
			Type: csi.PluginTypeMonolith, Name: e2eProvider, NodeID: "csi-" + id,
			Topology: top, RequiresTopologies: requires, AdmitUnknownVolumes: true,
		})
		m, err := fingerprint.New(fingerprint.Config{
			NodeID: id,
			Report: func(ctx context.Context, infos []*csi.PluginInfo) error {
				cmd := state.UpsertNodePlugins{NodeID: id}
				for _, in := range infos {
					cmd.Plugins = append(cmd.Plugins, *in)
				}
				_, err := e.applier.Apply(ctx, cmd)
				return err
			},
			Interval: time.Hour,
		})
		must(t, err)
		must(t, m.Register(fingerprint.Instance{PluginID: rtPlugin, AllocationID: "plugin-node-" + id, Type: csi.PluginTypeNode, Socket: p.Endpoint()}))
		if id == "n1" {
			must(t, m.Register(fingerprint.Instance{PluginID: rtPlugin, AllocationID: "plugin-ctl-n1", Type: csi.PluginTypeController, Socket: e.ctl.Endpoint()}))
		}
		runManager(t, m)
		ep, err := rpcshim.NewNodeEndpoint(rpcshim.NodeEndpointConfig{NodeID: id, Plugins: m, Mounter: &epUnmounter{}})
		must(t, err)
		tr.Register(id, ep)
		statuses.Set(id, csi.NodeStatusReady)
	}
	router, err := rpcshim.NewRouter(rpcshim.RouterConfig{Store: store, Transport: tr, NodeStatuses: statuses})
	must(t, err)
	e.server, err = rpcshim.NewServer(rpcshim.ServerConfig{Store: store, Applier: e.applier, Router: router})
	must(t, err)
	mux := rpcshim.NewMux()
	rpcshim.Handle(mux, "Server.Claim", e.server.Claim)
	rpcshim.Handle(mux, "Server.Feasibility", e.server.Feasibility)
	tr.Register("server", mux)
	e.tr, e.router = tr, router
	waitPlugin(t, store, func(p *csi.Plugin) bool {
		return p.ControllersHealthy == 1 && p.NodesHealthy == len(nodes)
	})
	return e
}

func (e *placeEnv) create(t *testing.T, id string, nodes ...string) *csi.Volume {
	t.Helper()
	resp, err := e.server.CreateVolume(context.Background(), &rpcshim.VolumeCreateRequest{
		Volume: csi.Volume{ID: id, Namespace: "default", PluginID: rtPlugin, Capabilities: []csi.Capability{snwFS}},
		Nodes:  nodes,
	})
	must(t, err)
	return resp.Volume
}

// requirements returns the accessibility_requirements of the last
// CreateVolume the controller saw, as strings.
func (e *placeEnv) requirements(t *testing.T) (requisite, preferred []string) {
	t.Helper()
	calls := e.ctl.CallsTo(csitest.MethodCreateVolume)
	if len(calls) == 0 {
		t.Fatal("the controller saw no CreateVolume")
	}
	ar := calls[len(calls)-1].Request.(*csipb.CreateVolumeRequest).GetAccessibilityRequirements()
	str := func(ts []*csipb.Topology) []string {
		var s []string
		for _, x := range ts {
			s = append(s, (&csi.Topology{Segments: x.GetSegments()}).String())
		}
		return s
	}
	return str(ar.GetRequisite()), str(ar.GetPreferred())
}

func TestServer_CreateVolume_AccessibilityRequirements(t *testing.T) {
	rack := func(zone, rack string) *csi.Topology {
		return &csi.Topology{Segments: map[string]string{"zone": zone, "rack": rack}}
	}
	for _, tc := range []struct {
		name       string
		requires   bool
		nodes      map[string]*csi.Topology
		candidates []string
		requisite  []string // nil: no requirements
	}{
		{
			name: "candidates in two zones", requires: true,
			nodes:      map[string]*csi.Topology{"n1": zoneA, "n2": zoneA, "n3": zoneB},
			candidates: []string{"n3", "n1", "n2"},
			requisite:  []string{"zone=a", "zone=b"},
		},
		{
			name: "no candidates: every node", requires: true,
			nodes:     map[string]*csi.Topology{"n1": zoneB, "n2": zoneA, "n3": zoneB},
			requisite: []string{"zone=a", "zone=b"},
		},
		{
			name: "candidates in one zone", requires: true,
			nodes:      map[string]*csi.Topology{"n1": zoneA, "n2": zoneA, "n3": zoneB},
			candidates: []string{"n1", "n2"},
			requisite:  []string{"zone=a"},
		},
		{
			name: "whole node topologies", requires: true,
			nodes:      map[string]*csi.Topology{"n1": rack("a", "r2"), "n2": rack("a", "r1"), "n3": rack("b", "r1")},
			candidates: []string{"n1", "n2"},
			requisite:  []string{"rack=r1,zone=a", "rack=r2,zone=a"},
		},
		{
			name: "an unknown candidate is no topology", requires: true,
			nodes:      map[string]*csi.Topology{"n1": zoneA, "n2": zoneB},
			candidates: []string{"n2", "n9"},
			requisite:  []string{"zone=b"},
		},
		{
			name: "no candidate with a topology", requires: true,
			nodes:      map[string]*csi.Topology{"n1": zoneA, "n2": nil, "n3": nil},
			candidates: []string{"n2", "n3"},
		},
		{
			name:  "a plugin without topology constraints",
			nodes: map[string]*csi.Topology{"n1": zoneA, "n2": zoneB},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newPlaceEnv(t, tc.requires, tc.nodes)
			v := e.create(t, "vol-1", tc.candidates...)
			requisite, preferred := e.requirements(t)
			expectEqual(t, requisite, tc.requisite)
			if tc.requisite == nil {
				expectEqual(t, preferred, []string(nil))
				expectEqual(t, v.RequestedTopologies, (*csi.TopologyRequest)(nil))
				e.ctl.RequireNoViolations(t)
				return
			}
			// preferred is requisite rotated: a permutation, in order.
			if len(preferred) != len(requisite) {
				t.Fatalf("preferred %v is not a permutation of requisite %v", preferred, requisite)
			}
			k := 0
			for k < len(requisite) && requisite[k] != preferred[0] {
				k++
			}
			for i := range preferred {
				if k == len(requisite) || preferred[i] != requisite[(k+i)%len(requisite)] {
					t.Fatalf("preferred %v is not requisite %v rotated", preferred, requisite)
				}
			}
			// csitest puts a volume in its first preferred topology;
			// the store keeps the plugin's answer and the requirements.
			expectEqual(t, csi.TopologiesString(v.Topologies), "{"+preferred[0]+"}")
			stored, err := e.store.Volume("default", "vol-1")
			must(t, err)
			expectEqual(t, csi.TopologiesString(stored.Topologies), "{"+preferred[0]+"}")
			expectEqual(t, len(stored.RequestedTopologies.Required), len(requisite))
			e.ctl.RequireNoViolations(t)
		})
	}
}

func TestServer_CreateVolume_RequirementsDeterministic(t *testing.T) {
	nodes := map[string]*csi.Topology{"n1": zoneA, "n2": zoneB}
	e := newPlaceEnv(t, true, nodes)
	firsts := map[string]bool{}
	for _, id := range []string{"vol-1", "vol-2", "vol-3", "vol-4", "vol-5", "vol-6", "vol-7", "vol-8"} {
		e.create(t, id)
		_, preferred := e.requirements(t)
		firsts[preferred[0]] = true
	}
	// The rotation spreads volumes over both zones.
	expectEqual(t, len(firsts), 2)

	// Another server over the same nodes asks the same for the same name.
	again := newPlaceEnv(t, true, nodes)
	e.create(t, "vol-x")
	again.create(t, "vol-x")
	r1, p1 := e.requirements(t)
	r2, p2 := again.requirements(t)
	expectEqual(t, r2, r1)
	expectEqual(t, p2, p1)
}

// TestServer_CreateVolume_ResumeAsksTheSame: a create whose record
// failed keeps its intent with the requirements built then, and the
// retry asks the plugin the same even after a zone's node went away.
func TestServer_CreateVolume_ResumeAsksTheSame(t *testing.T) {
	ctx := context.Background()
	e := newPlaceEnv(t, true, map[string]*csi.Topology{"n1": zoneA, "n2": zoneB})
	fail := true
	srv, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Router: e.router, Applier: failApplier{e.applier, func(cmd state.Command) error {
		if r, ok := cmd.(state.RegisterVolume); ok && !r.Volume.Creating && fail {
			fail = false
			return fmt.Errorf("%w: leader lost", csi.ErrUnavailable)
		}
		return nil
	}}})
	must(t, err)
	req := &rpcshim.VolumeCreateRequest{Volume: csi.Volume{ID: "vol-1", Namespace: "default", PluginID: rtPlugin, Capabilities: []csi.Capability{snwFS}}}
	_, err = srv.CreateVolume(ctx, req)
	expectIs(t, err, csi.ErrUnavailable)
	r1, p1 := e.requirements(t)
	expectEqual(t, r1, []string{"zone=a", "zone=b"})
	intent, err := e.store.Volume("default", "vol-1")
	must(t, err)
	expectEqual(t, intent.Creating, true)
	expectEqual(t, csi.TopologiesString(intent.RequestedTopologies.Required), "{zone=a} or {zone=b}")

	_, err = e.applier.Apply(ctx, state.UpsertNodePlugins{NodeID: "n2"}) // zone b's node is gone
	must(t, err)
	resp, err := srv.CreateVolume(ctx, req)
	must(t, err)
	r2, p2 := e.requirements(t)
	expectEqual(t, r2, r1)
	expectEqual(t, p2, p1)
	expectEqual(t, resp.Volume.Creating, false)
	expectEqual(t, len(e.ctl.Volumes()), 1)
}

func TestServer_CreateVolume_ExplicitTopologyKept(t *testing.T) {
	e := newPlaceEnv(t, true, map[string]*csi.Topology{"n1": zoneA, "n2": zoneB})
	_, err := e.server.CreateVolume(context.Background(), &rpcshim.VolumeCreateRequest{
		Volume: csi.Volume{ID: "vol-1", Namespace: "default", PluginID: rtPlugin, Capabilities: []csi.Capability{snwFS},
			RequestedTopologies: &csi.TopologyRequest{Required: []*csi.Topology{zoneB}}},
		Nodes: []string{"n1"},
	})
	must(t, err)
	requisite, preferred := e.requirements(t)
	expectEqual(t, requisite, []string{"zone=b"})
	expectEqual(t, preferred, []string(nil))
}

// TestPlacement_ZonalVolume is the whole path with three csitest nodes
// in two zones over the in-memory transport: a volume created in one
// zone is refused on the other's node, accepted on its own, and the
// feasibility endpoint says why.
func TestPlacement_ZonalVolume(t *testing.T) {
	ctx := context.Background()
	e := newPlaceEnv(t, true, map[string]*csi.Topology{"n1": zoneA, "n2": zoneA, "n3": zoneB})
	v := e.create(t, "vol-1", "n3") // only n3 is a candidate: zone b
	expectEqual(t, csi.TopologiesString(v.Topologies), "{zone=b}")
	_, err := e.applier.Apply(ctx, state.UpsertAllocations{Allocations: []csi.Allocation{
		{ID: "a1", Namespace: "default", NodeID: "n1"}, {ID: "a3", Namespace: "default", NodeID: "n3"},
	}})
	must(t, err)
	// The host's API calls cross the transport, so errors.Is and the
	// reasons are checked on the far side of it.
	claim := func(alloc, node string) (*rpcshim.VolumeClaimResponse, error) {
		var resp rpcshim.VolumeClaimResponse
		err := e.tr.Call(ctx, "server", "Server.Claim", &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-1", Claim: csi.Claim{
			AllocationID: alloc, NodeID: node, Mode: csi.ClaimWrite, AccessMode: snwFS.AccessMode, AttachmentMode: snwFS.AttachmentMode,
		}}, &resp)
		return &resp, err
	}
	feasibility := func(req *rpcshim.FeasibilityRequest) (*rpcshim.FeasibilityResponse, error) {
		var resp rpcshim.FeasibilityResponse
		err := e.tr.Call(ctx, "server", "Server.Feasibility", req, &resp)
		return &resp, err
	}

	place := &rpcshim.FeasibilityRequest{Namespace: "default", VolumeID: "vol-1", Claim: csi.PlacementRequest{
		Namespace: "default", Mode: csi.ClaimWrite, Capability: snwFS,
	}}
	before, err := feasibility(place)
	must(t, err)
	expectEqual(t, before.Feasible(), []string{"n3"})
	expectEqual(t, len(before.Nodes), 3)
	for _, n := range before.Nodes[:2] {
		if n.Reasons != csi.ReasonTopology {
			t.Errorf("node %s: reasons %v, want topology", n.NodeID, n.Reasons)
		}
		expectEqual(t, n.Topology.String(), "zone=a")
	}

	_, err = claim("a1", "n1")
	expectIs(t, err, csi.ErrTopologyMismatch)
	expectClass(t, err, csi.ClassFinal)
	expectContains(t, err.Error(), "{zone=b}")
	expectContains(t, err.Error(), "{zone=a}")
	expectEqual(t, e.ctl.CallCount(csitest.MethodControllerPublishVolume), 0)

	resp, err := claim("a3", "n3")
	must(t, err)
	expectEqual(t, resp.Attachment.State, csi.AttachmentAttached)
	expectEqual(t, e.ctl.CallCount(csitest.MethodControllerPublishVolume), 1)

	// Now a single-node writer holds it on n3: a second writer is
	// refused everywhere, and n1 and n2 are also in the wrong zone and
	// not the holder.
	after, err := feasibility(place)
	must(t, err)
	want := map[string]csi.Reasons{
		"n1": csi.ReasonTopology | csi.ReasonAttachedElsewhere | csi.ReasonClaimsTaken,
		"n2": csi.ReasonTopology | csi.ReasonAttachedElsewhere | csi.ReasonClaimsTaken,
		"n3": csi.ReasonClaimsTaken,
	}
	for _, n := range after.Nodes {
		if n.Reasons != want[n.NodeID] {
			t.Errorf("node %s: reasons %v, want %v", n.NodeID, n.Reasons, want[n.NodeID])
		}
	}
	e.ctl.RequireNoViolations(t)
}

func TestServer_Feasibility_Candidates(t *testing.T) {
	ctx := context.Background()
	e := newPlaceEnv(t, true, map[string]*csi.Topology{"n1": zoneA, "n2": zoneB})
	e.create(t, "vol-1", "n1")
	resp, err := e.server.Feasibility(ctx, &rpcshim.FeasibilityRequest{
		Namespace: "default", VolumeID: "vol-1", Nodes: []string{"n9", "n2"},
		Claim: csi.PlacementRequest{Namespace: "default", Mode: csi.ClaimRead, Capability: snwFS},
	})
	must(t, err)
	expectEqual(t, csi.TopologiesString(resp.VolumeTopologies), "{zone=a}")
	expectEqual(t, len(resp.Nodes), 2)
	expectEqual(t, resp.Nodes[0].NodeID, "n2")
	expectEqual(t, resp.Nodes[0].Reasons, csi.ReasonTopology)
	expectEqual(t, resp.Nodes[1].NodeID, "n9")
	expectEqual(t, resp.Nodes[1].Reasons, csi.ReasonNoNodePlugin)
	if resp.Nodes[1].Topology != nil {
		t.Errorf("a node without the plugin has topology %v", resp.Nodes[1].Topology)
	}
	expectEqual(t, resp.Feasible(), []string(nil))
}

func TestServer_Feasibility_Errors(t *testing.T) {
	ctx := context.Background()
	e := newPlaceEnv(t, false, map[string]*csi.Topology{"n1": nil})
	_, err := e.server.Feasibility(ctx, nil)
	expectIs(t, err, csi.ErrInvalidRequest)
	_, err = e.server.Feasibility(ctx, &rpcshim.FeasibilityRequest{Namespace: "default", VolumeID: "nope"})
	expectIs(t, err, csi.ErrVolumeNotFound)
	_, err = e.server.Feasibility(ctx, &rpcshim.FeasibilityRequest{Namespace: "default", VolumeID: "../x"})
	var idErr *csi.IDError
	if !errors.As(err, &idErr) {
		t.Errorf("err = %v, want a *csi.IDError", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = e.server.Feasibility(cctx, &rpcshim.FeasibilityRequest{Namespace: "default", VolumeID: "vol-1"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestFeasibilityResponse_Wire checks that a response crosses a JSON
// transport with its reasons as text and back as the same bits.
func TestFeasibilityResponse_Wire(t *testing.T) {
	in := rpcshim.FeasibilityResponse{
		VolumeTopologies: []*csi.Topology{zoneB},
		Nodes: []rpcshim.NodeFeasibility{
			{NodeID: "n1", Reasons: csi.ReasonTopology | csi.ReasonMaxVolumes, Topology: zoneA},
			{NodeID: "n3", Topology: zoneB},
		},
	}
	b, err := json.Marshal(in)
	must(t, err)
	expectContains(t, string(b), `"Reasons":"topology,max-volumes"`)
	expectContains(t, string(b), `"Reasons":"feasible"`)
	var out rpcshim.FeasibilityResponse
	must(t, json.Unmarshal(b, &out))
	expectEqual(t, out.Nodes[0].Reasons, in.Nodes[0].Reasons)
	expectEqual(t, out.Feasible(), []string{"n3"})
	if !out.Nodes[0].Reasons.Has(csi.ReasonTopology) {
		t.Error("reasons lost topology over the wire")
	}
}
