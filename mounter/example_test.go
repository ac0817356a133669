package mounter_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/mounter"
)

// nodePlugins is the smallest Plugins a host could write: one node plugin
// it already knows. A real node agent passes its fingerprint.Manager.
type nodePlugins struct {
	id     string
	client *plugin.Client
	info   *csi.PluginInfo
}

func (p nodePlugins) NodePlugin(id string) (plugin.NodeClient, *csi.PluginInfo, error) {
	if id != p.id {
		return nil, nil, fmt.Errorf("node plugin %s: %w", id, csi.ErrPluginNotFound)
	}
	return p.client, p.info, nil
}

// Example follows the host's steps from the package doc: create the
// Mounter, mount a volume for two allocations, and unmount it again. A
// fake plugin stands in for a real one.
func Example() {
	// A node plugin that stages volumes (here the in-process fake).
	caps := csi.NodeCapabilities{StageUnstageVolume: true}
	fake, err := csitest.New(csitest.Config{Type: csi.PluginTypeNode, Node: caps})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := fake.Start(); err != nil {
		fmt.Println(err)
		return
	}
	defer fake.Stop()
	fake.AddVolume("vol-0001", 1<<30, nil)
	client, err := plugin.New(plugin.Config{Endpoint: fake.Endpoint()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	// Step 1: one Mounter per node agent.
	dir, _ := os.MkdirTemp("", "mounter-example")
	defer os.RemoveAll(dir)
	m, err := mounter.New(mounter.Config{
		Root:     filepath.Join(dir, "mnt"),
		StateDir: filepath.Join(dir, "state"),
		Plugins: nodePlugins{id: "hostpath", client: client, info: &csi.PluginInfo{
			PluginID: "hostpath", NodeInfo: &csi.NodeInfo{Capabilities: caps},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Step 6, when the agent stops: release the state database.
	defer m.Close()

	// Step 2: mount the volume for each allocation that claims it.
	vol := &csi.Volume{ID: "db", Namespace: "default", ExternalID: "vol-0001", PluginID: "hostpath"}
	for _, alloc := range []string{"web-1", "web-2"} {
		claim := &csi.Claim{AllocationID: alloc, Mode: csi.ClaimRead,
			AccessMode: csi.AccessModeMultiNodeReaderOnly, AttachmentMode: csi.AttachmentModeFileSystem}
		req, err := mounter.NewMountRequest(vol, claim)
		if err != nil {
			fmt.Println(err)
			return
		}
		mi, err := m.MountVolume(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		rel, _ := filepath.Rel(dir, mi.Path)
		fmt.Println("mounted at", filepath.ToSlash(rel), "usage", mi.Usage)
	}

	// Step 4: unmount when each allocation stops; the last one unstages.
	for _, alloc := range []string{"web-1", "web-2"} {
		if err := m.UnmountVolume(context.Background(), &mounter.UnmountRequest{
			Namespace: "default", VolumeID: "db", AllocationID: alloc,
		}); err != nil {
			fmt.Println(err)
			return
		}
	}
	var calls []string
	for _, c := range fake.Calls() {
		calls = append(calls, c.Method)
	}
	fmt.Println(strings.Join(calls, "\n"))
	// Output:
	// mounted at mnt/per-alloc/web-1/db/r-mnro-fs usage r-mnro-fs
	// mounted at mnt/per-alloc/web-2/db/r-mnro-fs usage r-mnro-fs
	// NodeStageVolume
	// NodePublishVolume
	// NodePublishVolume
	// NodeUnpublishVolume
	// NodeUnpublishVolume
	// NodeUnstageVolume
}

// ExampleUsage_StageUsage shows how usages map to stages: a reader and a
// writer of a multi-writer volume share one stage (one staging path on
// the node) and are published at targets of their own; another access
// mode would need a stage of its own, which the Mounter refuses while the
// first has users.
func ExampleUsage_StageUsage() {
	fs := csi.AttachmentModeFileSystem
	for _, u := range []mounter.Usage{
		{ClaimMode: csi.ClaimWrite, AccessMode: csi.AccessModeMultiNodeMultiWriter, AttachmentMode: fs},
		{ClaimMode: csi.ClaimRead, AccessMode: csi.AccessModeMultiNodeMultiWriter, AttachmentMode: fs},
		{ClaimMode: csi.ClaimRead, AccessMode: csi.AccessModeMultiNodeReaderOnly, AttachmentMode: fs},
	} {
		fmt.Printf("publish %s (read-only %t) from stage %s\n", u, u.ReadOnly(), u.StageUsage())
	}
	// Output:
	// publish w-mnmw-fs (read-only false) from stage mnmw-fs
	// publish r-mnmw-fs (read-only true) from stage mnmw-fs
	// publish r-mnro-fs (read-only true) from stage mnro-fs
}
