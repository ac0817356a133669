package rpcshim_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
)

// pagingController is a CSI controller whose ListSnapshots answers no
// entries and the next token next(page): a plugin whose paging loops or
// never ends, served over gRPC on a unix socket.
type pagingController struct {
	csipb.UnimplementedControllerServer
	next  func(page int) string
	mu    sync.Mutex
	pages int
}

func (c *pagingController) ListSnapshots(context.Context, *csipb.ListSnapshotsRequest) (*csipb.ListSnapshotsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pages++
	return &csipb.ListSnapshotsResponse{NextToken: c.next(c.pages)}, nil
}

func (c *pagingController) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pages
}

// servePaging serves c on a unix socket and returns a plugin client of it.
func servePaging(t *testing.T, c *pagingController) *plugin.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "paging")
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	lis, err := net.Listen("unix", filepath.Join(dir, "csi.sock"))
	must(t, err)
	gs := grpc.NewServer()
	csipb.RegisterControllerServer(gs, c)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	client, err := plugin.New(plugin.Config{Endpoint: lis.Addr().String(), MaxRetries: -1})
	must(t, err)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// ReconcileSnapshots stops on a plugin whose next token repeats, and
// after MaxSnapshotPages pages of one that never ends.
func TestServer_ReconcileSnapshots_PagingBounded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		next  func(page int) string
		pages int
		want  string
	}{
		{"token repeats", func(int) string { return "again" }, 2, `next token "again" twice`},
		{"never ends", func(page int) string { return fmt.Sprint("t", page) }, rpcshim.MaxSnapshotPages,
			fmt.Sprintf("past %d pages", rpcshim.MaxSnapshotPages)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSnapEnv(t, snapCaps, csitest.Config{})
			c := &pagingController{next: tc.next}
			_, info, err := e.plugins.ControllerPlugin(rtPlugin)
			must(t, err)
			e.plugins.set(rtPlugin, servePaging(t, c), info)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err = e.srv.ReconcileSnapshots(ctx, &rpcshim.SnapshotReconcileRequest{PluginID: rtPlugin, Namespace: "default"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
			if got := c.calls(); got != tc.pages {
				t.Fatalf("%d ListSnapshots calls, want %d", got, tc.pages)
			}
		})
	}
}
