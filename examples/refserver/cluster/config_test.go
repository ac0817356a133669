package cluster_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/cluster"
)

func clusterConfig(dir string) cluster.Config {
	return cluster.Config{DataDir: dir, BootstrapExpect: 3, RaftAddr: "127.0.0.1:0", Join: []string{"127.0.0.1:1", "127.0.0.1:2"}}
}

func newServer(cfg cluster.Config) (*cluster.Server, error) { return cluster.New(cfg) }

func TestNew_Config(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		edit func(*cluster.Config)
		want error
	}{
		{"valid", func(*cluster.Config) {}, nil},
		{"valid with an ID and this server in Join", func(c *cluster.Config) {
			c.ID = "s1"
			c.DataDir = filepath.Join(dir, "s1")
			c.Join = append(c.Join, "http://127.0.0.1:3", "127.0.0.1:1")
		}, nil},
		{"valid single server", func(c *cluster.Config) { c.BootstrapExpect, c.Join = 1, nil }, nil},
		{"valid single server without a raft address", func(c *cluster.Config) { c.BootstrapExpect, c.Join, c.RaftAddr = 1, nil, "" }, nil},
		{"valid dev server", func(c *cluster.Config) {
			c.Dev, c.DataDir, c.BootstrapExpect, c.Join, c.RaftAddr = true, "", 0, nil, ""
		}, nil},
		{"dev with a data dir", func(c *cluster.Config) { c.Dev, c.BootstrapExpect, c.Join = true, 1, nil }, csi.ErrInvalidRequest},
		{"dev cluster", func(c *cluster.Config) { c.Dev, c.DataDir = true, "" }, csi.ErrInvalidRequest},
		{"no data dir", func(c *cluster.Config) { c.DataDir = "" }, csi.ErrInvalidRequest},
		{"no bootstrap-expect", func(c *cluster.Config) { c.BootstrapExpect = 0 }, csi.ErrInvalidRequest},
		{"no raft address", func(c *cluster.Config) { c.RaftAddr = "" }, csi.ErrInvalidRequest},
		{"raft address without port", func(c *cluster.Config) { c.RaftAddr = "127.0.0.1" }, csi.ErrInvalidRequest},
		{"bad raft advertise", func(c *cluster.Config) { c.RaftAdvertise = "nowhere" }, csi.ErrInvalidRequest},
		{"bad ID", func(c *cluster.Config) { c.ID = "a/b" }, csi.ErrInvalidID},
		{"nobody to join", func(c *cluster.Config) { c.Join = nil }, csi.ErrInvalidRequest},
		{"empty join address", func(c *cluster.Config) { c.Join = []string{" "} }, csi.ErrInvalidRequest},
		{"bad join address", func(c *cluster.Config) { c.Join = []string{"ftp://x:1"} }, csi.ErrInvalidRequest},
		{"bad advertise", func(c *cluster.Config) { c.Advertise = "ftp://x:1" }, csi.ErrInvalidRequest},
		{"negative TTL", func(c *cluster.Config) { c.HeartbeatTTL = -1 }, csi.ErrInvalidRequest},
		{"negative shutdown timeout", func(c *cluster.Config) { c.ShutdownTimeout = -1 }, csi.ErrInvalidRequest},
		{"valid replicated ACL", func(c *cluster.Config) { c.ACL = true }, nil},
		{"replicated ACL and an ACL file", func(c *cluster.Config) { c.ACL, c.ACLFile = true, filepath.Join(dir, "acl.json") }, csi.ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := clusterConfig(filepath.Join(dir, "default"))
			tt.edit(&cfg)
			_, err := cluster.New(cfg)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("New: %v, want %v", err, tt.want)
			}
		})
	}
}

func TestNew_BadIDFile(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, cluster.IDFile), []byte("../x\n"), 0o600))
	if _, err := cluster.New(clusterConfig(dir)); !errors.Is(err, csi.ErrInvalidID) {
		t.Fatalf("New with a bad ID file: %v, want csi.ErrInvalidID", err)
	}
}
