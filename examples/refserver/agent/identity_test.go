package agent_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/agent"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/rpcshim"
)

const clusterToken = "cluster-token-for-agent-tests-0123"

// TestAgent_NodeService_RefusesWithoutClusterToken is the attack of a
// process on the host that calls the agent's node service directly:
// MountVolume of a volume the server does not know, and NodeDetach of a
// live workload's volume. Without the cluster token both are refused
// with csi.ErrPermissionDenied and the mounter makes no plugin call;
// with it the call reaches the agent's own checks.
func TestAgent_NodeService_RefusesWithoutClusterToken(t *testing.T) {
	dir := shortTempDir(t)
	_, _, client := serverWithClient(t)
	a, err := agent.New(agent.Config{
		NodeID: "node-1", Server: client, DataDir: filepath.Join(dir, "node-1"), NoSync: true, ClusterToken: clusterToken,
		Hostpath: &hostpath.Config{DataDir: filepath.Join(dir, "plugin"), Mount: hostpath.MountSymlink, Staging: true},
	})
	must(t, err)
	nodeAddr := runAgent(t, a)
	dial := func(cfg rpcshim.GRPCTransportConfig) *rpcshim.GRPCTransport {
		cfg.Resolve = func(context.Context, string) (string, error) { return nodeAddr, nil }
		tr, err := rpcshim.NewGRPCTransport(cfg)
		must(t, err)
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
	vol := &csi.Volume{ID: "v1", Namespace: "default", PluginID: agent.DefaultHostpathPluginID, ExternalID: "vol-x",
		Secrets: csi.Secrets{"key": "s3cr3t"}}
	mount := &api.NodeMountRequest{Volume: vol, Claim: &csi.Claim{
		AllocationID: "a1", NodeID: "node-1", Mode: csi.ClaimWrite,
		AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem,
	}}
	detach := &rpcshim.NodeDetachRequest{NodeID: "node-1", Namespace: "default", VolumeID: "v1", AllocationID: "a1"}
	for name, tr := range map[string]*rpcshim.GRPCTransport{
		"no credentials": dial(rpcshim.GRPCTransportConfig{Insecure: true}),
		"wrong token":    dial(rpcshim.GRPCTransportConfig{ClusterToken: "not-the-cluster-token-at-all"}),
	} {
		t.Run(name, func(t *testing.T) {
			before := a.Mounter().Stats().PluginCalls
			err := tr.Call(context.Background(), "node-1", api.MethodMountVolume, mount, &api.NodeMountResponse{})
			if !errors.Is(err, csi.ErrPermissionDenied) {
				t.Fatalf("MountVolume: %v, want csi.ErrPermissionDenied", err)
			}
			err = tr.Call(context.Background(), "node-1", rpcshim.MethodNodeDetach, detach, nil)
			if !errors.Is(err, csi.ErrPermissionDenied) {
				t.Fatalf("NodeDetach: %v, want csi.ErrPermissionDenied", err)
			}
			if after := a.Mounter().Stats().PluginCalls; after != before {
				t.Fatalf("refused calls made %d plugin calls", after-before)
			}
			if has, err := a.Mounter().HasMount(context.Background(), "default", "v1", "a1"); err != nil || has {
				t.Fatalf("HasMount = %v, %v; want nothing mounted", has, err)
			}
		})
	}
	server := dial(rpcshim.GRPCTransportConfig{ClusterToken: clusterToken})
	bad := &api.NodeMountRequest{Volume: vol, Claim: &csi.Claim{AllocationID: "a1", NodeID: "node-2"}}
	if err := server.Call(context.Background(), "node-1", api.MethodMountVolume, bad, &api.NodeMountResponse{}); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("with the token: %v, want the agent's own csi.ErrInvalidRequest", err)
	}
}
