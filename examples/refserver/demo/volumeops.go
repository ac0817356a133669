package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/events"
	"github.com/csikit/csikit/rpcshim"
)

// The volume operations demo's names and sizes.
const (
	OpsVolumeID   = "ops-vol"
	OpsSnapshotID = "ops-snap"
	OpsRestoredID = "ops-restored"
	// OpsWriter writes the file on ClaimNode; OpsReader reads it back
	// from the restored volume on node-1.
	OpsWriter = "writer-1"
	OpsReader = "reader-1"
	// OpsInitialBytes is the volume's size at creation, OpsExpandedBytes
	// after the online expansion.
	OpsInitialBytes  int64 = 64 << 20
	OpsExpandedBytes int64 = 128 << 20
)

// OpsResult is what the volume operations demo did.
type OpsResult struct {
	// Dir is the cluster's directory (removed at the end if temporary).
	Dir string
	// MountMethod is how the hostpath plugin mounted: bind or symlink.
	MountMethod hostpath.MountMethod
	// Capacity is the volume's capacity after the expansion.
	Capacity int64
	// Snapshot is the snapshot taken of the written volume.
	Snapshot *csi.Snapshot
	// WriterMount is where the written volume was mounted (ClaimNode),
	// ReaderMount where the restored one was (node-1).
	WriterMount, ReaderMount string
	// ReadAfterExpand is the file read through the mount after the
	// online expansion; ReadRestored the file read through the mount of
	// the restored volume.
	ReadAfterExpand, ReadRestored string
	// MountsWhileRestored are the mount points under Dir while the
	// restored volume was mounted; MountsAfter those left at the end of
	// the script (none, or the demo fails).
	MountsWhileRestored, MountsAfter []string
}

// RunVolumeOps runs the volume operations demo on a server and two node
// agents with the hostpath plugin: it creates a volume, mounts it on
// ClaimNode and writes a file through the mount, snapshots it, expands
// it online while it is mounted (ControllerExpandVolume, then
// NodeExpandVolume on the node where it is mounted) and reads the file
// again, releases it, restores the snapshot into a new volume, mounts
// that on node-1 and reads the file back. It returns once done;
// cfg.ExitAfterDemo and cfg.OnStep are not used.
func RunVolumeOps(ctx context.Context, cfg Config) (res *OpsResult, err error) {
	log := events.New(cfg.Out)
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.CleanupTimeout <= 0 {
		cfg.CleanupTimeout = DefaultCleanupTimeout
	}
	dir, temp := cfg.DataDir, cfg.DataDir == ""
	if temp {
		if dir, err = os.MkdirTemp("", "refserver"); err != nil {
			return nil, err
		}
	} else if err = os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	res = &OpsResult{Dir: dir}
	log.Printf("demo", "starting a server and two node agents with the hostpath plugin in %s", dir)
	c, err := StartCluster(ctx, ClusterConfig{Dir: dir, Mount: cfg.Mount, Addr: cfg.Addr, Events: log, Logger: cfg.Logger, ACL: true})
	if err != nil {
		if temp {
			err = errors.Join(err, removeIfNoMounts(dir))
		}
		return res, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), cfg.CleanupTimeout)
		defer cancel()
		log.Printf("demo", "stopping: releasing what is still claimed, then stopping the agents and the server")
		cerr := c.Close(cctx)
		if temp {
			cerr = errors.Join(cerr, removeIfNoMounts(dir))
		}
		if cerr == nil {
			log.Printf("demo", "stopped cleanly")
		}
		err = errors.Join(err, cerr)
	}()
	res.MountMethod = c.Agent("node-1").HostpathMountMethod()
	if err := opsScript(ctx, c.Client(), log, res); err != nil {
		log.Printf("demo", "failed: %v", err)
		return res, err
	}
	return res, nil
}

// opsScript is the volume operations demo, through the server's API.
func opsScript(ctx context.Context, client *api.Client, log *events.Log, res *OpsResult) error {
	capab := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	if _, err := client.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{Volume: csi.Volume{
		ID: OpsVolumeID, Namespace: Namespace, PluginID: PluginID, Capabilities: []csi.Capability{capab},
		RequestedCapacityMin: OpsInitialBytes, Secrets: csi.Secrets{"token": demoSecret},
	}}); err != nil {
		return fmt.Errorf("create volume %s: %w", OpsVolumeID, err)
	}
	log.Printf("demo", "volume %s created with %d bytes", OpsVolumeID, OpsInitialBytes)
	mount, err := opsClaim(ctx, client, log, OpsVolumeID, OpsWriter, ClaimNode)
	if err != nil {
		return err
	}
	res.WriterMount = mount
	if err := os.WriteFile(filepath.Join(mount, FileName), []byte(FileContent), 0o644); err != nil {
		return fmt.Errorf("write through the mount at %s: %w", mount, err)
	}
	log.Printf("demo", "%s wrote %s through the mount", OpsWriter, FileName)

	snap, err := client.CreateSnapshot(ctx, Namespace, OpsVolumeID, OpsSnapshotID, nil)
	if err != nil {
		return fmt.Errorf("snapshot volume %s: %w", OpsVolumeID, err)
	}
	res.Snapshot = snap.Snapshot
	log.Printf("demo", "snapshot %s of %s is ready to use: %d bytes, external ID %s",
		OpsSnapshotID, OpsVolumeID, snap.Snapshot.Size, snap.Snapshot.ExternalID)

	if err := opsExpand(ctx, client, log, res); err != nil {
		return err
	}
	if err := opsRelease(ctx, client, log, OpsWriter); err != nil {
		return err
	}
	return opsRestore(ctx, client, log, res, capab)
}

// opsExpand expands the mounted volume online and reads the file again.
func opsExpand(ctx context.Context, client *api.Client, log *events.Log, res *OpsResult) error {
	if _, err := client.ExpandVolume(ctx, &rpcshim.VolumeExpandRequest{
		Namespace: Namespace, VolumeID: OpsVolumeID, RequiredBytes: OpsExpandedBytes,
	}); err != nil {
		return fmt.Errorf("expand volume %s: %w", OpsVolumeID, err)
	}
	v, err := client.WaitVolume(ctx, Namespace, OpsVolumeID, func(v *csi.Volume) bool {
		return v.Expansion != nil && v.Expansion.State == csi.ExpansionDone
	})
	if err != nil {
		return fmt.Errorf("waiting for the expansion of %s: %w", OpsVolumeID, err)
	}
	if v.Capacity < OpsExpandedBytes {
		return fmt.Errorf("volume %s has %d bytes after the expansion, want at least %d", OpsVolumeID, v.Capacity, OpsExpandedBytes)
	}
	res.Capacity = v.Capacity
	log.Printf("demo", "volume %s expanded online to %d bytes; node step done on %s",
		OpsVolumeID, v.Capacity, strings.Join(v.Expansion.DoneNodes, ", "))
	got, err := readFile(filepath.Join(res.WriterMount, FileName))
	if err != nil {
		return fmt.Errorf("after the expansion: %w", err)
	}
	res.ReadAfterExpand = got
	log.Printf("demo", "%s reads %s through the mount after the expansion: the data is kept", OpsWriter, FileName)
	return nil
}

// opsRestore restores the snapshot into a new volume, mounts it on
// node-1, reads the file back and releases it.
func opsRestore(ctx context.Context, client *api.Client, log *events.Log, res *OpsResult, capab csi.Capability) error {
	restored, err := client.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{
		Volume: csi.Volume{
			ID: OpsRestoredID, Namespace: Namespace, PluginID: PluginID, Capabilities: []csi.Capability{capab},
		},
		From: &rpcshim.VolumeSource{SnapshotID: OpsSnapshotID},
	})
	if err != nil {
		return fmt.Errorf("restore snapshot %s into volume %s: %w", OpsSnapshotID, OpsRestoredID, err)
	}
	log.Printf("demo", "snapshot %s restored into volume %s (%d bytes)", OpsSnapshotID, OpsRestoredID, restored.Volume.Capacity)
	mount, err := opsClaim(ctx, client, log, OpsRestoredID, OpsReader, "node-1")
	if err != nil {
		return err
	}
	res.ReaderMount = mount
	if res.ReadRestored, err = readFile(filepath.Join(mount, FileName)); err != nil {
		return fmt.Errorf("in the restored volume: %w", err)
	}
	log.Printf("demo", "%s reads %s back through the mount of the restored volume", OpsReader, FileName)
	if res.MountsWhileRestored, err = MountsUnder(res.Dir); err != nil {
		return err
	}
	if err := opsRelease(ctx, client, log, OpsReader); err != nil {
		return err
	}
	if res.MountsAfter, err = MountsUnder(res.Dir); err != nil {
		return err
	}
	if len(res.MountsAfter) > 0 {
		return fmt.Errorf("mounts left under %s after the releases: %s", res.Dir, strings.Join(res.MountsAfter, ", "))
	}
	log.Printf("demo", "done: created, written, snapshotted, expanded online, restored and read back")
	return nil
}

// opsClaim claims volume id for alloc on node and mounts it.
func opsClaim(ctx context.Context, client *api.Client, log *events.Log, id, alloc, node string) (string, error) {
	claim, err := client.Claim(ctx, Namespace, id, &api.ClaimRequest{
		AllocationID: alloc, NodeID: node, Mode: csi.ClaimWrite, Mount: true,
	})
	if err != nil {
		return "", fmt.Errorf("claim volume %s for %s on %s: %w", id, alloc, node, err)
	}
	log.Printf("demo", "%s holds a write claim on %s, mounted on %s", alloc, id, node)
	return claim.Mount.Path, nil
}

// opsRelease stops alloc and waits for its claims to be freed.
func opsRelease(ctx context.Context, client *api.Client, log *events.Log, alloc string) error {
	if _, err := client.Release(ctx, alloc); err != nil {
		return fmt.Errorf("release allocation %s: %w", alloc, err)
	}
	if err := client.WaitReleased(ctx, alloc); err != nil {
		return fmt.Errorf("waiting for the claims of %s to be freed: %w", alloc, err)
	}
	log.Printf("demo", "%s stopped; its claim is freed and its mounts are gone", alloc)
	return nil
}

// readFile reads path and checks it holds FileContent.
func readFile(path string) (string, error) {
	got, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if !bytes.Equal(got, []byte(FileContent)) {
		return string(got), fmt.Errorf("%s holds %q, want %q", path, got, FileContent)
	}
	return string(got), nil
}
