package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/cluster"
	"github.com/csikit/csikit/state"
	"github.com/csikit/csikit/state/sealed"
)

const keyringSecret = "keyring-secret-9b2e71"

// runSingle runs a durable one-server cluster on dir until the test
// ends or stop is called; it returns the server once it leads, or
// Run's error when it fails to start.
func runSingle(t *testing.T, dir string) (srv *cluster.Server, stop func(), err error) {
	t.Helper()
	srv, err = cluster.New(cluster.Config{ID: "s1", DataDir: dir, BootstrapExpect: 1, Raft: testRaftConfig()})
	must(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, lis) }()
	select {
	case <-srv.Ready():
	case <-waitCtx(t).Done():
		t.Fatal("the server is not ready")
	}
	if srv.Raft() == nil {
		cancel()
		return nil, nil, <-done
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			must(t, <-done)
		}
	}
	t.Cleanup(stop)
	_, _, err = srv.Raft().WaitLeader(waitCtx(t))
	must(t, err)
	must(t, srv.Raft().Raft().Barrier(waitLimit).Error())
	return srv, stop, nil
}

// TestServer_Keyring_SealsDataDir writes a volume with a secret through
// a durable single server, snapshots, writes another, and greps every
// file of the data dir: the secret is in none; the key file is 0600;
// a restart restores the secrets in clear; a key file others can read
// stops the server with the keyring's error.
func TestServer_Keyring_SealsDataDir(t *testing.T) {
	dir := shortTempDir(t)
	srv, stop, err := runSingle(t, dir)
	must(t, err)
	ctx := waitCtx(t)
	_, err = srv.Raft().Apply(ctx, state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{{
		PluginID: "hostpath", AllocationID: "p1", Type: csi.PluginTypeMonolith, Healthy: true,
		ControllerInfo: &csi.ControllerInfo{}, NodeInfo: &csi.NodeInfo{ID: "csi-n1"},
	}}})
	must(t, err)
	capab := []csi.Capability{{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}}
	for i, id := range []string{"before-snapshot", "after-snapshot"} {
		_, err = srv.Raft().Apply(ctx, state.RegisterVolume{Volume: csi.Volume{
			ID: id, Namespace: "default", PluginID: "hostpath", ExternalID: "ext-" + id, Capabilities: capab,
			Secrets: csi.Secrets{"token": keyringSecret},
		}})
		must(t, err)
		if i == 0 {
			must(t, srv.Raft().Raft().Snapshot().Error())
		}
	}
	stop()

	expectNoFileHolds(t, dir, keyringSecret)
	keyFile := filepath.Join(dir, cluster.KeyringDir, sealed.KeyFile(1))
	fi, err := os.Stat(keyFile)
	must(t, err)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}

	srv, stop, err = runSingle(t, dir)
	must(t, err)
	for _, id := range []string{"before-snapshot", "after-snapshot"} {
		v, err := srv.Store().Volume("default", id)
		must(t, err)
		if v.Secrets["token"] != keyringSecret {
			t.Errorf("volume %s after restart has %d secrets and not the token it was written with", id, len(v.Secrets))
		}
	}
	stop()

	must(t, os.Chmod(keyFile, 0o644))
	if _, _, err := runSingle(t, dir); !errors.Is(err, sealed.ErrKeyFile) {
		t.Fatalf("Run with a world-readable key file: %v; want sealed.ErrKeyFile", err)
	}
}

// expectNoFileHolds fails the test for each file under dir that holds
// secret.
func expectNoFileHolds(t *testing.T, dir, secret string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the secret in clear", path)
		}
		return err
	})
	must(t, err)
}
