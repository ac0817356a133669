package agent_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/agent"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/server"
	"github.com/csikit/csikit/rpcshim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// shortTempDir is a temporary directory short enough for unix sockets.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rsa")
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// runServer runs a server on lis until the returned stop is called.
func runServer(t *testing.T, lis net.Listener) (stop func()) {
	t.Helper()
	srv, err := server.New(server.Config{})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, lis) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// serverWithClient runs a server on a new loopback listener and returns
// its address, its stop function (for a test that restarts it at the
// same address) and a client of it, closed when the test ends.
func serverWithClient(t *testing.T) (addr string, stop func(), client *api.Client) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	stop = runServer(t, lis)
	client, err = api.NewClient(lis.Addr().String(), nil)
	must(t, err)
	t.Cleanup(func() { client.Close() })
	return lis.Addr().String(), stop, client
}

// runAgent runs a with a node service on a new loopback listener and
// returns the listener's address.
func runAgent(t *testing.T, a *agent.Agent) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	return lis.Addr().String()
}

func newHostpathAgent(t *testing.T, client *api.Client, dir string) *agent.Agent {
	t.Helper()
	a, err := agent.New(agent.Config{
		NodeID: "node-1", Server: client, DataDir: filepath.Join(dir, "node-1"), NoSync: true,
		Hostpath: &hostpath.Config{DataDir: filepath.Join(dir, "plugin"), Mount: hostpath.MountSymlink, Staging: true},
	})
	must(t, err)
	return a
}

func healthy(p *csi.Plugin) bool { return p != nil && p.NodesHealthy == 1 && p.ControllersHealthy == 1 }

// TestAgent_Heartbeat_RegistersAgainAfterServerRestart: a server that
// restarts with an empty state answers the next heartbeat "node not
// found"; the agent registers again and resends its plugins.
func TestAgent_Heartbeat_RegistersAgainAfterServerRestart(t *testing.T) {
	dir := shortTempDir(t)
	addr, stop1, client := serverWithClient(t)
	a := newHostpathAgent(t, client, dir)
	runAgent(t, a)
	ctx := context.Background()
	_, err := client.WaitPlugin(ctx, agent.DefaultHostpathPluginID, healthy)
	must(t, err)

	stop1()
	lis2, err := net.Listen("tcp", addr) // the same address, a new server
	must(t, err)
	runServer(t, lis2)
	if _, _, err := client.Plugin(ctx, agent.DefaultHostpathPluginID, nil); !errors.Is(err, csi.ErrPluginNotFound) {
		t.Fatalf("the new server knows the plugin already: %v", err)
	}
	must(t, a.Heartbeat(ctx))
	p, _, err := client.Plugin(ctx, agent.DefaultHostpathPluginID, nil)
	must(t, err)
	if !healthy(p) || p.NodesExpected != 1 {
		t.Errorf("after the heartbeat: plugin %+v, want one healthy, expected monolith", p)
	}
	nodes, err := client.Nodes(ctx)
	must(t, err)
	if len(nodes) != 1 || nodes[0].ID != "node-1" || nodes[0].Status != csi.NodeStatusReady {
		t.Errorf("nodes %+v, want node-1 ready", nodes)
	}
}

// TestAgent_Heartbeat_EveryServer: an agent given several servers runs
// while one of them is down, heartbeats every server, and registers with
// the one that comes up at its next heartbeat.
func TestAgent_Heartbeat_EveryServer(t *testing.T) {
	dir := shortTempDir(t)
	live, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	runServer(t, live)
	down, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	downAddr := down.Addr().String()
	must(t, down.Close()) // nothing listens there yet
	var clients []*api.Client
	for _, addr := range []string{downAddr, live.Addr().String()} {
		c, err := api.NewClient(addr, nil)
		must(t, err)
		defer c.Close()
		clients = append(clients, c)
	}
	a, err := agent.New(agent.Config{
		NodeID: "node-1", Servers: clients, DataDir: filepath.Join(dir, "node-1"), NoSync: true,
		Hostpath: &hostpath.Config{DataDir: filepath.Join(dir, "plugin"), Mount: hostpath.MountSymlink, Staging: true},
	})
	must(t, err)
	runAgent(t, a)
	ctx := context.Background()
	// The plugin report skipped the server that is down.
	_, err = clients[1].WaitPlugin(ctx, agent.DefaultHostpathPluginID, healthy)
	must(t, err)

	err = a.Heartbeat(ctx)
	if !errors.Is(err, csi.ErrUnavailable) || !strings.Contains(err.Error(), "server http://"+downAddr) {
		t.Fatalf("heartbeat with a server down: %v, want csi.ErrUnavailable naming it", err)
	}
	relis, err := net.Listen("tcp", downAddr)
	must(t, err)
	runServer(t, relis)
	must(t, a.Heartbeat(ctx))
	for i, c := range clients {
		nodes, err := c.Nodes(ctx)
		must(t, err)
		if len(nodes) != 1 || nodes[0].Status != csi.NodeStatusReady {
			t.Errorf("server %d: nodes %+v, want node-1 ready", i, nodes)
		}
		if p, _, err := c.Plugin(ctx, agent.DefaultHostpathPluginID, nil); err != nil || !healthy(p) {
			t.Errorf("server %d: plugin %+v, %v", i, p, err)
		}
	}
}

// TestAgent_MountVolume_Refused calls the agent's mount method over the
// gRPC transport with requests it must refuse.
func TestAgent_MountVolume_Refused(t *testing.T) {
	dir := shortTempDir(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	runServer(t, lis)
	client, err := api.NewClient(lis.Addr().String(), nil)
	must(t, err)
	defer client.Close()
	nodeAddr := runAgent(t, newHostpathAgent(t, client, dir))
	tr, err := rpcshim.NewGRPCTransport(rpcshim.GRPCTransportConfig{
		Resolve:  func(context.Context, string) (string, error) { return nodeAddr, nil },
		Insecure: true,
	})
	must(t, err)
	defer tr.Close()
	vol := &csi.Volume{ID: "v1", Namespace: "default", PluginID: "hostpath", ExternalID: "vol-x"}
	tests := []struct {
		name string
		req  *api.NodeMountRequest
		want error
	}{
		{"no volume", &api.NodeMountRequest{Claim: &csi.Claim{AllocationID: "a1", NodeID: "node-1"}}, csi.ErrInvalidRequest},
		{"claim for another node", &api.NodeMountRequest{Volume: vol, Claim: &csi.Claim{AllocationID: "a1", NodeID: "node-2"}}, csi.ErrInvalidRequest},
		{"claim without modes", &api.NodeMountRequest{Volume: vol, Claim: &csi.Claim{AllocationID: "a1", NodeID: "node-1"}}, csi.ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tr.Call(context.Background(), "node-1", api.MethodMountVolume, tt.req, &api.NodeMountResponse{})
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestAgent_Run_RegistrationRefused: a registration the server refuses
// for good ends Run with the server's error.
func TestAgent_Run_RegistrationRefused(t *testing.T) {
	dir := shortTempDir(t)
	slis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	runServer(t, slis)
	client, err := api.NewClient(slis.Addr().String(), nil)
	must(t, err)
	defer client.Close()
	a, err := agent.New(agent.Config{NodeID: "node-1", Server: client, DataDir: dir, Advertise: "not an address"})
	must(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	err = a.Run(context.Background(), lis)
	if !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("got %v, want csi.ErrInvalidRequest from the server", err)
	}
	// An agent runs once.
	lis2, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	if err := a.Run(context.Background(), lis2); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("second Run: got %v, want csi.ErrInvalidRequest", err)
	}
}

// TestAgent_Run_StopsWhileServerDown: an agent started before its
// server keeps trying to register and stops cleanly when told to.
func TestAgent_Run_StopsWhileServerDown(t *testing.T) {
	dir := shortTempDir(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	client, err := api.NewClient(dead.Addr().String(), nil)
	must(t, err)
	must(t, dead.Close()) // nothing listens there now
	defer client.Close()
	a, err := agent.New(agent.Config{NodeID: "node-1", Server: client, DataDir: dir})
	must(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx, lis); err != nil {
		t.Fatalf("Run with an ended ctx: %v", err)
	}
}

func TestNew_Config(t *testing.T) {
	client, err := api.NewClient("127.0.0.1:1", nil)
	must(t, err)
	dir := t.TempDir()
	hp := &hostpath.Config{DataDir: dir, Mount: hostpath.MountSymlink}
	tests := []struct {
		name string
		cfg  agent.Config
		want error
	}{
		{"no node ID", agent.Config{Server: client, DataDir: dir}, csi.ErrInvalidID},
		{"bad node ID", agent.Config{NodeID: "a/b", Server: client, DataDir: dir}, csi.ErrInvalidID},
		{"no server", agent.Config{NodeID: "n1", DataDir: dir}, csi.ErrInvalidRequest},
		{"no data dir", agent.Config{NodeID: "n1", Server: client}, csi.ErrInvalidRequest},
		{"negative heartbeat", agent.Config{NodeID: "n1", Server: client, DataDir: dir, HeartbeatInterval: -1}, csi.ErrInvalidRequest},
		{"bad plugin", agent.Config{NodeID: "n1", Server: client, DataDir: dir, Plugins: []agent.Plugin{{ID: "p", Type: "x", Endpoint: "/s"}}}, csi.ErrInvalidRequest},
		{"hostpath twice", agent.Config{NodeID: "n1", Server: client, DataDir: dir, Hostpath: hp,
			Plugins: []agent.Plugin{{ID: "hostpath", Type: csi.PluginTypeNode, Endpoint: "/s"}}}, csi.ErrInvalidRequest},
		{"bad hostpath mode", agent.Config{NodeID: "n1", Server: client, DataDir: dir, Hostpath: &hostpath.Config{DataDir: dir, Mode: "x"}}, hostpath.ErrInvalidConfig},
		{"valid", agent.Config{NodeID: "n1", Server: client, DataDir: dir, Hostpath: hp}, nil},
		{"valid with servers only", agent.Config{NodeID: "n1", Servers: []*api.Client{client, client}, DataDir: dir}, nil},
		{"nil server in servers", agent.Config{NodeID: "n1", Servers: []*api.Client{client, nil}, DataDir: dir}, csi.ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := agent.New(tt.cfg)
			if err == nil {
				// The next case opens the same DataDir.
				t.Cleanup(func() { _ = a.Close() })
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestParsePlugin(t *testing.T) {
	tests := []struct {
		in   string
		want agent.Plugin
		err  error
	}{
		{"hostpath=unix:///run/csi.sock", agent.Plugin{ID: "hostpath", Type: csi.PluginTypeMonolith, Endpoint: "unix:///run/csi.sock"}, nil},
		{"hostpath=unix:///run/csi.sock:node", agent.Plugin{ID: "hostpath", Type: csi.PluginTypeNode, Endpoint: "unix:///run/csi.sock"}, nil},
		{"ebs=/run/ebs.sock:controller", agent.Plugin{ID: "ebs", Type: csi.PluginTypeController, Endpoint: "/run/ebs.sock"}, nil},
		{"p=/run/a:b.sock", agent.Plugin{ID: "p", Type: csi.PluginTypeMonolith, Endpoint: "/run/a:b.sock"}, nil},
		{"hostpath", agent.Plugin{}, csi.ErrInvalidRequest},
		{"hostpath=", agent.Plugin{}, csi.ErrInvalidRequest},
		{"=/run/csi.sock", agent.Plugin{}, csi.ErrInvalidID},
		{"hostpath=tcp://1.2.3.4:5", agent.Plugin{}, csi.ErrInvalidRequest},
		{"hostpath=unix:///run/csi.sock:nodee", agent.Plugin{}, csi.ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := agent.ParsePlugin(tt.in)
			if !errors.Is(err, tt.err) {
				t.Fatalf("error %v, want %v", err, tt.err)
			}
			if err == nil && got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestAgent_Run_HeartbeatsOnItsClock: the heartbeat loop waits on
// Config.Clock, so the interval passing on a fake clock is what sends
// the next heartbeat; a server that restarted empty then learns the
// node and its plugin again, without a real wait.
func TestAgent_Run_HeartbeatsOnItsClock(t *testing.T) {
	dir := shortTempDir(t)
	addr, stop1, client := serverWithClient(t)
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	const interval = time.Hour // far beyond the test's deadline on a real clock
	a, err := agent.New(agent.Config{
		NodeID: "node-1", Server: client, DataDir: filepath.Join(dir, "node-1"), NoSync: true,
		Hostpath: &hostpath.Config{DataDir: filepath.Join(dir, "plugin"), Mount: hostpath.MountSymlink, Staging: true},
		Clock:    clk, HeartbeatInterval: interval, FingerprintInterval: 2 * interval,
	})
	must(t, err)
	runAgent(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = client.WaitPlugin(ctx, agent.DefaultHostpathPluginID, healthy)
	must(t, err)

	stop1()
	lis2, err := net.Listen("tcp", addr)
	must(t, err)
	runServer(t, lis2)
	// Nothing reaches the new server until the clock moves: the agent
	// waits for its heartbeat timer (and the registry for its interval).
	if _, _, err := client.Plugin(ctx, agent.DefaultHostpathPluginID, nil); !errors.Is(err, csi.ErrPluginNotFound) {
		t.Fatalf("the new server knows the plugin before a heartbeat: %v", err)
	}
	must(t, clk.BlockUntil(ctx, 2)) // the heartbeat timer and the registry's
	clk.Advance(interval)
	p, err := client.WaitPlugin(ctx, agent.DefaultHostpathPluginID, healthy)
	must(t, err)
	if p.NodesExpected != 1 {
		t.Errorf("after the heartbeat: plugin %+v, want one expected monolith", p)
	}
}
