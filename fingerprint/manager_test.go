package fingerprint_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/fingerprint"
)

func TestNew_InvalidConfig(t *testing.T) {
	report := func(context.Context, []*csi.PluginInfo) error { return nil }
	cases := []struct {
		name string
		cfg  fingerprint.Config
		is   error
		msg  string
	}{
		{"no node ID", fingerprint.Config{Report: report}, csi.ErrInvalidID, "NodeID"},
		{"bad node ID", fingerprint.Config{NodeID: "../x", Report: report}, csi.ErrInvalidID, "NodeID"},
		{"no report", fingerprint.Config{NodeID: nodeID}, csi.ErrInvalidRequest, "Report"},
		{"negative interval", fingerprint.Config{NodeID: nodeID, Report: report, Interval: -time.Second}, csi.ErrInvalidRequest, "Interval"},
		{"negative socket wait", fingerprint.Config{NodeID: nodeID, Report: report, SocketWait: -1}, csi.ErrInvalidRequest, "SocketWait"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := fingerprint.New(tc.cfg)
			must.Error(t, err)
			check.Nil(t, m)
			check.ErrorIs(t, err, tc.is)
			check.Contains(t, err.Error(), tc.msg)
		})
	}
}

func TestManager_Register_Invalid(t *testing.T) {
	h := newHarness(t)
	sock := socketIn(t, "csi.sock")
	cases := []struct {
		name string
		inst fingerprint.Instance
		is   error
	}{
		{"bad plugin ID", fingerprint.Instance{PluginID: "a/b", AllocationID: "a1", Type: csi.PluginTypeNode, Socket: sock}, csi.ErrInvalidID},
		{"no allocation", fingerprint.Instance{PluginID: "p", Type: csi.PluginTypeNode, Socket: sock}, csi.ErrInvalidID},
		{"bad type", fingerprint.Instance{PluginID: "p", AllocationID: "a1", Type: "storage", Socket: sock}, csi.ErrInvalidRequest},
		{"relative socket", fingerprint.Instance{PluginID: "p", AllocationID: "a1", Type: csi.PluginTypeNode, Socket: "csi.sock"}, csi.ErrInvalidRequest},
		{"tcp socket", fingerprint.Instance{PluginID: "p", AllocationID: "a1", Type: csi.PluginTypeNode, Socket: "tcp://127.0.0.1:1"}, csi.ErrInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := h.m.Register(tc.inst)
			must.ErrorIs(t, err, tc.is)
			check.Contains(t, err.Error(), nodeID)
		})
	}
	_, _, err := h.m.NodePlugin("p")
	check.ErrorIs(t, err, csi.ErrPluginNotFound, "a failed Register leaves nothing behind")
}

func TestManager_Run_Healthy(t *testing.T) {
	topo := &csi.Topology{Segments: map[string]string{"zone": "z1"}}
	p := csitest.Start(t, csitest.Config{
		Type: csi.PluginTypeNode, Name: "example.csi.io", Version: "2.3.4",
		Node:               csi.NodeCapabilities{StageUnstageVolume: true, GetVolumeStats: true},
		RequiresTopologies: true, NodeID: "csi-node-7", MaxVolumes: 16, Topology: topo,
	})
	h := newHarness(t)
	h.register(p, "ebs", "alloc-1", csi.PluginTypeNode)
	h.run()

	info := only(t, h.next())
	check.Equal(t, &csi.PluginInfo{
		PluginID: "ebs", AllocationID: "alloc-1", Type: csi.PluginTypeNode,
		Healthy: true, UpdateTime: h.clk.Now(),
		Provider: "example.csi.io", ProviderVersion: "2.3.4",
		RequiresTopologies: true,
		NodeInfo: &csi.NodeInfo{
			ID: "csi-node-7", MaxVolumes: 16, AccessibleTopology: topo,
			Capabilities: csi.NodeCapabilities{StageUnstageVolume: true, GetVolumeStats: true},
		},
	}, info)

	client, got, err := h.m.NodePlugin("ebs")
	must.NoError(t, err)
	check.True(t, got.SameAs(info))
	ni, err := client.NodeGetInfo(t.Context())
	must.NoError(t, err)
	check.Equal(t, "csi-node-7", ni.ID, "the looked-up client talks to the plugin")

	_, _, err = h.m.ControllerPlugin("ebs")
	must.ErrorIs(t, err, csi.ErrPluginNotFound, "a node-only plugin serves no controller")
	check.Contains(t, err.Error(), "controller")
}

func TestManager_Run_Monolith(t *testing.T) {
	p := csitest.Start(t, csitest.Config{
		Type:       csi.PluginTypeMonolith,
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true},
		Node:       csi.NodeCapabilities{StageUnstageVolume: true},
	})
	h := newHarness(t)
	h.register(p, "mono", "alloc-1", csi.PluginTypeMonolith)
	h.run()

	info := only(t, h.next())
	check.True(t, info.Healthy)
	check.True(t, info.RequiresController)
	must.NotNil(t, info.ControllerInfo)
	check.Equal(t, csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true}, info.ControllerInfo.Capabilities)
	must.NotNil(t, info.NodeInfo)
	check.Equal(t, csitest.DefaultNodeID, info.NodeInfo.ID)
	check.True(t, info.NodeInfo.Capabilities.StageUnstageVolume)

	_, _, err := h.m.ControllerPlugin("mono")
	must.NoError(t, err)
	_, _, err = h.m.NodePlugin("mono")
	must.NoError(t, err)
}

func TestManager_Run_ProbeUnhealthy(t *testing.T) {
	cases := []struct {
		name    string
		fail    func(p *csitest.Plugin)
		recover func(p *csitest.Plugin)
		reason  string
	}{
		{
			name:    "not ready",
			fail:    func(p *csitest.Plugin) { p.SetProbeReady(false) },
			recover: func(p *csitest.Plugin) { p.SetProbeReady(true) },
			reason:  "not ready",
		},
		{
			name:    "unavailable",
			fail:    func(p *csitest.Plugin) { p.FailAlways(csitest.MethodProbe, codes.Unavailable) },
			recover: func(p *csitest.Plugin) { p.ClearFaults() },
			reason:  "Probe: Unavailable",
		},
		{
			name:    "internal",
			fail:    func(p *csitest.Plugin) { p.FailAlways(csitest.MethodProbe, codes.Internal) },
			recover: func(p *csitest.Plugin) { p.ClearFaults() },
			reason:  "Probe: Internal",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, Name: "prov", Version: "1"})
			h := newHarness(t)
			h.register(p, "p1", "a1", csi.PluginTypeNode)
			h.run()
			must.True(t, only(t, h.next()).Healthy)

			tc.fail(p)
			h.tick(1)
			sick := only(t, h.next())
			check.False(t, sick.Healthy)
			check.Contains(t, sick.HealthDescription, tc.reason)
			check.Equal(t, "prov", sick.Provider, "an unhealthy fingerprint keeps what was known")
			_, info, err := h.m.NodePlugin("p1")
			must.NoError(t, err, "an unhealthy plugin is still found")
			check.False(t, info.Healthy)

			tc.recover(p)
			h.tick(1)
			well := only(t, h.next())
			check.True(t, well.Healthy)
			check.Empty(t, well.HealthDescription)
		})
	}
}

// A change is reported once: the cycles after it, with nothing new, send
// nothing, so the report after them is the next change.
func TestManager_Run_ChangeReportedOnce(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode})
	h := newHarness(t)
	h.register(p, "p1", "a1", csi.PluginTypeNode)
	h.run()
	must.Equal(t, csi.NodeCapabilities{}, only(t, h.next()).NodeInfo.Capabilities)

	p.SetCapabilities(csi.ControllerCapabilities{}, csi.NodeCapabilities{StageUnstageVolume: true})
	h.tick(1)
	changed := only(t, h.next())
	check.True(t, changed.NodeInfo.Capabilities.StageUnstageVolume)

	before := p.CallCount(csitest.MethodProbe)
	for range 3 {
		h.tick(1)
	}
	h.park(1) // the third quiet cycle is over
	p.SetProbeReady(false)
	h.tick(1)
	after := only(t, h.next())
	check.False(t, after.Healthy, "the report after three quiet cycles is the next change, not a repeat")
	check.Equal(t, before+4, p.CallCount(csitest.MethodProbe), "each tick ran one cycle: %v", p.Methods())
	// A repeat of the last report could still be on its way from the
	// reporter goroutine, so a non-blocking look now would not see it.
	// Once Run has returned every report has been made: the one after
	// the change must be Run's final take-back.
	must.NoError(t, h.stop())
	final := only(t, h.next())
	check.Contains(t, final.HealthDescription, "stopped", "no repeat of the last change came before Run's final reports")
}

func TestManager_Run_SocketRemoved(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode})
	h := newHarness(t)
	h.register(p, "p1", "a1", csi.PluginTypeNode)
	h.run()
	must.True(t, only(t, h.next()).Healthy)

	p.Stop()
	h.tick(1)
	gone := only(t, h.next())
	check.False(t, gone.Healthy)
	check.Contains(t, gone.HealthDescription, p.Endpoint())
	check.Contains(t, gone.HealthDescription, "does not exist")

	// The restarted plugin is a new process: its static answers are
	// asked again.
	must.NoError(t, p.Restart())
	h.reconnect("p1")
	p.ResetCalls()
	h.tick(1)
	check.True(t, only(t, h.next()).Healthy)
	check.Equal(t, 1, p.CallCount(csitest.MethodGetPluginInfo))
	check.Equal(t, 1, p.CallCount(csitest.MethodNodeGetInfo))
}

// A plugin restarted between two cycles, never seen down, has a new
// socket file; that alone refreshes the static answers.
func TestManager_Run_RestartBetweenCycles(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, NodeID: "before"})
	h := newHarness(t)
	h.register(p, "p1", "a1", csi.PluginTypeNode)
	h.run()
	must.Equal(t, "before", only(t, h.next()).NodeInfo.ID)

	h.park(1)
	p.SetNodeInfo("after", 0, nil)
	must.NoError(t, p.Restart())
	h.reconnect("p1")
	h.tick(1)
	info := only(t, h.next())
	check.True(t, info.Healthy, info.HealthDescription)
	check.Equal(t, "after", info.NodeInfo.ID)
}

func TestManager_Run_StaticRefresh(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, Version: "1"})
	h := newHarness(t, func(c *fingerprint.Config) { c.StaticRefresh = 3 * interval })
	h.register(p, "p1", "a1", csi.PluginTypeNode)
	h.run()
	must.Equal(t, "1", only(t, h.next()).ProviderVersion)

	p.SetNodeInfo("renamed", 0, nil)
	h.tick(1)
	h.tick(1)
	h.park(1)
	check.Equal(t, 1, p.CallCount(csitest.MethodNodeGetInfo), "cached before StaticRefresh passed")
	h.tick(1)
	check.Equal(t, "renamed", only(t, h.next()).NodeInfo.ID)
	check.Equal(t, 2, p.CallCount(csitest.MethodNodeGetInfo))
}

func TestManager_Deregister_FinalUnhealthyThenRemoval(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode})
	h := newHarness(t)
	h.register(p, "p1", "alloc-1", csi.PluginTypeNode)
	h.run()
	must.True(t, only(t, h.next()).Healthy)
	client, _, err := h.m.NodePlugin("p1")
	must.NoError(t, err)

	must.NoError(t, h.m.Deregister("p1", "alloc-1"))
	final := only(t, h.next())
	check.False(t, final.Healthy)
	check.Contains(t, final.HealthDescription, "deregistered")
	check.Contains(t, final.HealthDescription, "alloc-1")
	check.Empty(t, h.next(), "the report after the final one removes the instance")

	_, _, err = h.m.NodePlugin("p1")
	check.ErrorIs(t, err, csi.ErrPluginNotFound)
	_, err = client.NodeGetInfo(t.Context())
	check.Error(t, err, "the manager closed the client it owned")

	err = h.m.Deregister("p1", "alloc-1")
	check.ErrorIs(t, err, csi.ErrPluginNotFound, "deregistering twice says there is nothing left")
}

func TestManager_Deregister_BeforeFirstReport(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode})
	h := newHarness(t)
	h.register(p, "never", "a1", csi.PluginTypeNode)
	must.NoError(t, h.m.Deregister("never", "a1"))
	h.register(p, "p1", "a1", csi.PluginTypeNode)
	h.run()
	r := h.next()
	check.Equal(t, "p1", only(t, r).PluginID, "an instance the host never heard of is not reported")
}

func TestManager_Run_ThreePlugins(t *testing.T) {
	ctrl := csitest.Start(t, csitest.Config{Type: csi.PluginTypeController, Name: "ctrl.io"})
	node := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, Name: "node.io"})
	mono := csitest.Start(t, csitest.Config{Type: csi.PluginTypeMonolith, Name: "mono.io"})
	h := newHarness(t)
	h.register(ctrl, "ctrl", "a1", csi.PluginTypeController)
	h.register(node, "node", "a2", csi.PluginTypeNode)
	h.run()
	h.register(mono, "mono", "a3", csi.PluginTypeMonolith)

	all := h.nextWith(func(r []*csi.PluginInfo) bool { return len(r) == 3 })
	for _, want := range []struct{ id, alloc, provider string }{
		{"ctrl", "a1", "ctrl.io"}, {"mono", "a3", "mono.io"}, {"node", "a2", "node.io"},
	} {
		info := find(all, want.id, want.alloc)
		must.NotNil(t, info, "%s in %s", want.id, describe(all))
		check.True(t, info.Healthy)
		check.Equal(t, want.provider, info.Provider)
	}
	check.Equal(t, []string{"ctrl", "mono", "node"}, []string{all[0].PluginID, all[1].PluginID, all[2].PluginID}, "sorted")

	node.SetProbeReady(false)
	h.tick(3)
	r := h.next()
	must.Len(t, r, 3)
	check.False(t, find(r, "node", "a2").Healthy)
	check.True(t, find(r, "ctrl", "a1").Healthy)
	check.True(t, find(r, "mono", "a3").Healthy)

	must.NoError(t, h.m.Deregister("ctrl", "a1"))
	r = h.next()
	must.Len(t, r, 3)
	check.False(t, find(r, "ctrl", "a1").Healthy)
	r = h.next()
	must.Len(t, r, 2)
	check.Nil(t, find(r, "ctrl", "a1"))
}

// One plugin ID served by two allocations over time: the old allocation
// and its replacement overlap, then the old one stops.
func TestManager_Register_SamePluginTwoAllocations(t *testing.T) {
	old := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, NodeID: "old"})
	repl := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, NodeID: "new"})
	h := newHarness(t)
	h.register(old, "p", "alloc-old", csi.PluginTypeNode)
	h.run()
	must.True(t, only(t, h.next()).Healthy)

	h.register(repl, "p", "alloc-new", csi.PluginTypeNode)
	both := h.next()
	must.Len(t, both, 2)
	check.True(t, find(both, "p", "alloc-old").Healthy)
	check.True(t, find(both, "p", "alloc-new").Healthy)

	_, info, err := h.m.NodePlugin("p")
	must.NoError(t, err)
	check.Equal(t, "alloc-new", info.AllocationID, "both healthy: the newest wins")

	repl.SetProbeReady(false)
	h.tick(2)
	r := h.next()
	must.False(t, find(r, "p", "alloc-new").Healthy)
	client, info, err := h.m.NodePlugin("p")
	must.NoError(t, err)
	check.Equal(t, "alloc-old", info.AllocationID, "a healthy instance beats a newer unhealthy one")
	ni, err := client.NodeGetInfo(t.Context())
	must.NoError(t, err)
	check.Equal(t, "old", ni.ID)

	repl.SetProbeReady(true)
	h.tick(2)
	must.True(t, find(h.next(), "p", "alloc-new").Healthy)
	must.NoError(t, h.m.Deregister("p", "alloc-old"))
	r = h.next()
	must.Len(t, r, 2)
	check.False(t, find(r, "p", "alloc-old").Healthy)
	check.Equal(t, "alloc-new", only(t, h.next()).AllocationID)

	client, info, err = h.m.NodePlugin("p")
	must.NoError(t, err)
	check.Equal(t, "alloc-new", info.AllocationID)
	ni, err = client.NodeGetInfo(t.Context())
	must.NoError(t, err)
	check.Equal(t, "new", ni.ID)
}

func TestManager_Register_SocketChanged(t *testing.T) {
	a := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, NodeID: "first"})
	b := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode, NodeID: "second"})
	h := newHarness(t)
	h.register(a, "p", "a1", csi.PluginTypeNode)
	h.run()
	must.Equal(t, "first", only(t, h.next()).NodeInfo.ID)

	h.register(a, "p", "a1", csi.PluginTypeNode) // same again: nothing happens
	h.register(b, "p", "a1", csi.PluginTypeNode)
	info := only(t, h.next())
	check.Equal(t, "second", info.NodeInfo.ID, "a new socket is a new plugin: no cached answer is reused")
}

func TestManager_NodePlugin_Missing(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		name   string
		lookup func() error
		kind   string
	}{
		{"node", func() error { _, _, err := h.m.NodePlugin("gone"); return err }, "node"},
		{"controller", func() error { _, _, err := h.m.ControllerPlugin("gone"); return err }, "controller"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.lookup()
			must.ErrorIs(t, err, csi.ErrPluginNotFound)
			check.True(t, csi.IsRetryable(err), "a claim release waits for the node plugin to come back")
			check.Contains(t, err.Error(), `"gone"`)
			check.Contains(t, err.Error(), tc.kind)
			check.Contains(t, err.Error(), nodeID)
		})
	}
}

func TestManager_NodePlugin_BeforeFingerprint(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode})
	h := newHarness(t)
	h.register(p, "p", "a1", csi.PluginTypeNode)
	client, info, err := h.m.NodePlugin("p")
	must.NoError(t, err)
	check.NotNil(t, client)
	check.Nil(t, info, "not fingerprinted yet")

	h.run() // Run owns the clients: it closes them when it returns
	check.True(t, only(t, h.next()).Healthy)
	_, info, err = h.m.NodePlugin("p")
	must.NoError(t, err)
	check.True(t, info != nil && info.Healthy, "fingerprinted now")
}

func TestManager_Run_ReportRetried(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode})
	h := newHarness(t)
	h.failReports(errors.New("server unreachable"), errors.New("server unreachable"))
	h.register(p, "p1", "a1", csi.PluginTypeNode)
	h.run()

	// Two failed reports: each time the reporter waits on the clock beside
	// the instance loop.
	h.park(2)
	h.clk.AdvanceToNext()
	h.park(2)
	h.clk.AdvanceToNext()
	check.True(t, only(t, h.next()).Healthy)
}

func TestManager_Run_WaitsForSocket(t *testing.T) {
	sock := socketIn(t, "csi.sock")
	p, err := csitest.New(csitest.Config{Type: csi.PluginTypeNode, Endpoint: sock})
	must.NoError(t, err)
	t.Cleanup(p.Stop)
	h := newHarness(t)
	must.NoError(t, h.m.Register(fingerprint.Instance{PluginID: "p", AllocationID: "a1", Type: csi.PluginTypeNode, Socket: sock}))
	h.run()

	h.park(1)
	h.clk.AdvanceToNext()
	h.park(1) // still no socket: wait again, report nothing
	must.NoError(t, p.Start())
	h.clk.AdvanceToNext()
	check.True(t, only(t, h.next()).Healthy)
}

func TestManager_Run_SocketNeverAppears(t *testing.T) {
	sock := socketIn(t, "csi.sock")
	h := newHarness(t, func(c *fingerprint.Config) { c.SocketWait = 5 * time.Second })
	must.NoError(t, h.m.Register(fingerprint.Instance{PluginID: "p", AllocationID: "a1", Type: csi.PluginTypeNode, Socket: sock}))
	deadline := h.clk.Now().Add(5 * time.Second)
	h.run()
	// Step the clock through the socket wait's backoff sleeps, the last
	// of which ends exactly at the deadline. The report then comes from
	// the reporter goroutine, which may not have run yet (with -cpu 1 the
	// test and the instance loop can hand the processor back and forth
	// for many steps), so wait on the channel in real time, not on a
	// number of clock steps. The step bound turns a wait that never ends
	// into a failure instead of a hang.
	for steps := 0; h.clk.Now().Before(deadline); steps++ {
		if steps == 100 {
			t.Fatalf("the socket wait is still sleeping after %d clock steps (now %s, deadline %s)", steps, h.clk.Now(), deadline)
		}
		h.park(1)
		h.clk.AdvanceToNext()
	}
	info := only(t, h.next())
	check.False(t, info.Healthy)
	check.Contains(t, info.HealthDescription, "does not exist")
}

func TestManager_Run_Shutdown(t *testing.T) {
	a := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode})
	b := csitest.Start(t, csitest.Config{Type: csi.PluginTypeController})
	h := newHarness(t)
	h.register(a, "a", "a1", csi.PluginTypeNode)
	h.register(b, "b", "b1", csi.PluginTypeController)
	h.run()
	h.nextWith(func(r []*csi.PluginInfo) bool { return len(r) == 2 })

	must.NoError(t, h.stop())
	final := h.next()
	must.Len(t, final, 2)
	for _, info := range final {
		check.False(t, info.Healthy)
		check.Contains(t, info.HealthDescription, "stopped")
	}
	check.Empty(t, h.next())

	err := h.m.Register(fingerprint.Instance{PluginID: "c", AllocationID: "c1", Type: csi.PluginTypeNode, Socket: a.Endpoint()})
	check.ErrorIs(t, err, csi.ErrUnavailable)
	check.NoError(t, h.m.Deregister("a", "a1"), "after Run nothing is left to deregister")
	_, _, err = h.m.NodePlugin("a")
	check.ErrorIs(t, err, csi.ErrPluginNotFound)

	err = h.m.Run(t.Context())
	check.ErrorIs(t, err, csi.ErrInvalidRequest, "a Manager runs once")
}

func TestManager_Run_StopsWithoutPlugins(t *testing.T) {
	h := newHarness(t)
	h.run()
	must.NoError(t, h.stop())
	select {
	case r := <-h.reports:
		t.Fatalf("nothing was reported, so nothing is taken back; got %s", describe(r))
	default:
	}
}

// The lookup that the mounter and the node endpoint declare.
var _ interface {
	NodePlugin(pluginID string) (plugin.NodeClient, *csi.PluginInfo, error)
	ControllerPlugin(pluginID string) (plugin.ControllerClient, *csi.PluginInfo, error)
} = (*fingerprint.Manager)(nil)

// Register, Deregister and lookups from many goroutines while Run runs
// (the race detector checks them), then a clean stop.
func TestManager_Register_Concurrent(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeMonolith})
	h := newHarness(t)
	h.run()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			alloc := fmt.Sprintf("alloc-%d", g)
			for range 20 {
				if err := h.m.Register(fingerprint.Instance{PluginID: "p", AllocationID: alloc, Type: csi.PluginTypeMonolith, Socket: p.Endpoint()}); err != nil {
					t.Error(err)
					return
				}
				_, _, _ = h.m.NodePlugin("p")
				_, _, _ = h.m.ControllerPlugin("p")
				if err := h.m.Deregister("p", alloc); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	_, _, err := h.m.NodePlugin("p")
	check.ErrorIs(t, err, csi.ErrPluginNotFound, "every instance was deregistered")
	must.NoError(t, h.stop())
	var last []*csi.PluginInfo
	for {
		select {
		case r := <-h.reports:
			last = r
			continue
		default:
		}
		break
	}
	check.Empty(t, last, "whatever was reported was taken back")
}

// A report that failed may still have reached the host (a lost reply):
// when Run stops, the final reports take back what was last attempted too,
// not only what the host accepted.
func TestManager_Run_ShutdownAfterFailedReport(t *testing.T) {
	p := csitest.Start(t, csitest.Config{Type: csi.PluginTypeNode})
	h := newHarness(t)
	h.failReports(errors.New("reply lost"))
	h.register(p, "p1", "a1", csi.PluginTypeNode)
	h.run()
	h.park(2) // the reporter waits to retry the failed report

	must.NoError(t, h.stop())
	final := only(t, h.next())
	check.False(t, final.Healthy)
	check.Contains(t, final.HealthDescription, "stopped")
	check.Empty(t, h.next())
}
