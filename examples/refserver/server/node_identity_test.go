package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/server"
)

// TestServer_NodeHijack_Refused is the attack of a process that knows a
// node's ID and re-registers it at its own address, so that the next
// mount (and the volume's secrets) would go to it: without the node's
// secret every node call is refused with csi.ErrPermissionDenied, the
// node keeps its address, and the refusal is printed without a secret.
func TestServer_NodeHijack_Refused(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	const secret = "0123456789abcdef0123456789abcdef-node-2"
	node := ts.client.WithNodeSecret(secret)
	must(t, node.RegisterNode(ctx, "node-2", &api.RegisterNodeRequest{Address: "127.0.0.1:4001"}))
	must(t, node.ReportPlugins(ctx, "node-2", []*csi.PluginInfo{fakeInfo("node-2", "")}))

	attackers := map[string]*api.Client{
		"no secret":      ts.client,
		"another secret": ts.client.WithNodeSecret("ffffffffffffffffffffffffffffffff-evil"),
	}
	for name, c := range attackers {
		t.Run(name, func(t *testing.T) {
			calls := map[string]error{
				"register":  c.RegisterNode(ctx, "node-2", &api.RegisterNodeRequest{Address: "127.0.0.1:6666"}),
				"heartbeat": c.Heartbeat(ctx, "node-2"),
				"leave":     c.Leave(ctx, "node-2"),
				"report":    c.ReportPlugins(ctx, "node-2", nil),
			}
			for call, err := range calls {
				if !errors.Is(err, csi.ErrPermissionDenied) {
					t.Errorf("%s: err = %v, want csi.ErrPermissionDenied", call, err)
				}
			}
			addr, err := ts.srv.Liveness().Address("node-2")
			if err != nil || addr != "127.0.0.1:4001" {
				t.Fatalf("node-2 address = %q, %v; want it unchanged", addr, err)
			}
			if st := ts.srv.Liveness().Status("node-2", t0); st != csi.NodeStatusReady {
				t.Fatalf("node-2 is %s after a refused leave, want ready", st)
			}
			if n, err := node.Nodes(ctx); err != nil || len(n) != 1 || len(n[0].Plugins) != 1 {
				t.Fatalf("nodes = %v, %v; want node-2 with its plugin", n, err)
			}
		})
	}
	out := ts.out.String()
	if !strings.Contains(out, "refused PUT /v1/nodes/node-2 for node node-2") {
		t.Errorf("refusal not printed:\n%s", out)
	}
	if strings.Contains(out, secret) || strings.Contains(out, "evil") {
		t.Errorf("a secret reached the output:\n%s", out)
	}
	// The node itself, with its secret, may move (an agent restarted on
	// another port).
	must(t, node.RegisterNode(ctx, "node-2", &api.RegisterNodeRequest{Address: "127.0.0.1:4002"}))
	must(t, node.Heartbeat(ctx, "node-2"))
}
