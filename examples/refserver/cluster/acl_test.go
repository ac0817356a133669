package cluster_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cluster"
	"github.com/csikit/csikit/examples/refserver/events"
)

// TestServer_ACLFile_Bootstrap starts a dev server with an ACL file that
// does not exist yet: it is bootstrapped, the management token printed
// once, and the API refuses requests without it.
func TestServer_ACLFile_Bootstrap(t *testing.T) {
	out := &syncBuffer{}
	path := filepath.Join(t.TempDir(), "acl.json")
	srv, err := cluster.New(cluster.Config{Dev: true, BootstrapExpect: 1, HeartbeatTTL: time.Hour, ACLFile: path, Events: events.New(out)})
	must(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, lis) }()
	t.Cleanup(func() {
		stop()
		must(t, <-done)
	})
	client, err := api.NewClient(lis.Addr().String(), nil)
	must(t, err)
	defer client.Close()
	wctx := waitCtx(t)
	_, err = client.WaitLeader(wctx)
	must(t, err)
	m := regexp.MustCompile(`management token \(shown once\): (\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no management token printed:\n%s", out.String())
	}
	if _, _, err := client.Plugins(wctx, nil); !errors.Is(err, csi.ErrPermissionDenied) {
		t.Fatalf("no token: %v, want csi.ErrPermissionDenied", err)
	}
	if _, _, err := client.WithToken(m[1]).Plugins(wctx, nil); err != nil {
		t.Fatalf("management token: %v", err)
	}
}
