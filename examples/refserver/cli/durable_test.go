package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/agent"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/rpcshim"
)

// TestCLI_ServerMode_SurvivesKill runs `refserver server -data-dir D`
// in a child process, creates volumes and claims them (mounted) through
// an agent with the hostpath plugin, kills the server with SIGKILL, and
// starts it again on D: every acknowledged create and claim is there,
// every volume directory in the plugin belongs to a volume of the state
// (no orphan), and the restarted server's claim release worker frees the
// claims through the agent.
func TestCLI_ServerMode_SurvivesKill(t *testing.T) {
	dir := shortTempDir(t)
	addr := freeAddrs(t, 1)[0]
	args := []string{"server", "-addr", addr, "-data-dir", filepath.Join(dir, "server")}
	srv := startChild(t, nil, args...)
	srv.waitLine(t, "[server] API listening on ")
	if !strings.Contains(srv.out.String(), "[server] durable mode: server ") || !strings.Contains(srv.out.String(), "keeps its state in "+filepath.Join(dir, "server")) {
		t.Errorf("the new server does not say it is durable, and where:\n%s", srv.out)
	}
	if strings.Contains(srv.errOut.String(), "starting election") {
		t.Errorf("a single server's election at start is not worth a warning:\n%s", srv.errOut)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, err := api.NewClient(addr, nil)
	must(t, err)
	defer client.Close()
	a, err := agent.New(agent.Config{
		NodeID: "node-1", Server: client, DataDir: filepath.Join(dir, "node-1"),
		Hostpath: &hostpath.Config{
			DataDir: filepath.Join(dir, "plugin"), Mode: hostpath.ModeMonolith, ControllerPublish: true, Staging: true, Mount: hostpath.MountSymlink,
		},
		// The test sends the heartbeat that re-registers the node.
		HeartbeatInterval: time.Hour,
	})
	must(t, err)
	alis := listenLoopback(t)
	actx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(actx, alis) }()
	defer func() {
		stopAgent()
		if err := <-agentDone; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	if _, err := client.WaitPlugin(ctx, "hostpath", func(p *csi.Plugin) bool { return p != nil && p.NodesHealthy == 1 && p.ControllersHealthy == 1 }); err != nil {
		t.Fatalf("the plugin is not healthy: %v\n%s", err, srv.errOut)
	}

	capab := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	acked := map[string]string{} // volume ID → external ID
	for _, id := range []string{"vol-a", "vol-b", "vol-c", "vol-d"} {
		resp, err := client.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{Volume: csi.Volume{
			ID: id, Namespace: "default", PluginID: "hostpath", Capabilities: []csi.Capability{capab},
		}})
		must(t, err)
		acked[id] = resp.Volume.ExternalID
	}
	claimed := map[string]string{"vol-a": "alloc-a", "vol-c": "alloc-c"}
	for vol, alloc := range claimed {
		resp, err := client.Claim(ctx, "default", vol, &api.ClaimRequest{AllocationID: alloc, NodeID: "node-1", Mode: csi.ClaimWrite, Mount: true})
		must(t, err)
		if resp.Mount == nil {
			t.Fatalf("claim of %s: not mounted: %+v", vol, resp)
		}
	}

	if code := srv.stop(t, syscall.SIGKILL); code != -1 {
		t.Fatalf("the killed server exited %d, want the signal's -1", code)
	}
	srv = startChild(t, nil, args...)
	srv.waitLine(t, "[server] API listening on ")
	if !strings.Contains(srv.out.String(), "[server] durable mode: server ") || !strings.Contains(srv.out.String(), "restores its state from") {
		t.Errorf("the restarted server does not say it restores its state:\n%s", srv.out)
	}

	vols, _, err := client.Volumes(ctx, "", "", nil)
	must(t, err)
	got := map[string]string{}
	for _, v := range vols {
		got[v.ID] = v.ExternalID
		if alloc, ok := claimed[v.ID]; ok && v.WriteClaims[alloc] == nil {
			t.Errorf("volume %s lost the acknowledged claim of %s: %+v", v.ID, alloc, v.WriteClaims)
		}
	}
	for id, ext := range acked {
		if got[id] != ext {
			t.Errorf("volume %s: external ID %q after the restart, want the acknowledged %q", id, got[id], ext)
		}
	}
	// No orphan: each volume directory the plugin holds is a volume of
	// the state.
	entries, err := os.ReadDir(filepath.Join(dir, "plugin", "volumes"))
	must(t, err)
	var exts []string
	for _, ext := range got {
		exts = append(exts, ext)
	}
	for _, e := range entries {
		if !slices.Contains(exts, e.Name()) {
			t.Errorf("plugin volume %s belongs to no volume of the state: an orphan", e.Name())
		}
	}
	if len(entries) != len(acked) {
		t.Errorf("the plugin holds %d volumes, want %d", len(entries), len(acked))
	}

	// The restarted server knows the node once it heartbeats, and its
	// claim worker releases the claims through it.
	must(t, a.Heartbeat(ctx))
	for vol, alloc := range claimed {
		if _, err := client.Release(ctx, alloc); err != nil {
			t.Fatalf("release %s (%s): %v", alloc, vol, err)
		}
		if err := client.WaitReleased(ctx, alloc); err != nil {
			t.Fatalf("claims of %s not freed: %v\n%s", alloc, err, srv.out)
		}
	}
	if code := srv.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("server exit %d after SIGTERM\n%s", code, srv.errOut)
	}
}
