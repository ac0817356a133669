package hostpath_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
)

// lifecycleCheck verifies what is at a staging or target path while the
// volume is attached there (attached true) and after it is detached.
type lifecycleCheck func(t *testing.T, path string, attached bool)

// runLifecycle drives h through the whole CO lifecycle of one volume:
// create, controller publish, stage, publish, write through the target,
// read from the data dir, stats, unpublish, unstage, controller
// unpublish, delete.
func runLifecycle(t *testing.T, h *harness, check lifecycleCheck) {
	ctx := context.Background()
	base := pathDir(t)
	staging := filepath.Join(base, "staging")
	target := filepath.Join(base, "target")
	must.NoError(t, os.Mkdir(staging, 0o750)) // the CO creates the staging directory

	cv, err := h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name:               "data",
		CapacityRange:      &csipb.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)},
	})
	must.NoError(t, err)
	id := cv.GetVolume().GetVolumeId()
	must.Regexp(t, `^vol-[0-9a-f]{32}$`, id)
	must.Equal(t, int64(1<<20), cv.GetVolume().GetCapacityBytes())
	volDir := filepath.Join(h.cfg.DataDir, "volumes", id)
	must.DirExists(t, volDir)

	info, err := h.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	must.NoError(t, err)
	cp, err := h.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
		VolumeId: id, NodeId: info.GetNodeId(), VolumeCapability: mountCap(snw),
	})
	must.NoError(t, err)
	must.NotEmpty(t, cp.GetPublishContext())

	_, err = h.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: id, PublishContext: cp.GetPublishContext(), StagingTargetPath: staging, VolumeCapability: mountCap(snw),
	})
	must.NoError(t, err)
	check(t, staging, true)

	_, err = h.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: id, PublishContext: cp.GetPublishContext(), StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: mountCap(snw),
	})
	must.NoError(t, err)
	check(t, target, true)

	must.NoError(t, os.WriteFile(filepath.Join(target, "hello.txt"), []byte("hello, volume"), 0o600))
	got, err := os.ReadFile(filepath.Join(volDir, "hello.txt"))
	must.NoError(t, err)
	must.Equal(t, "hello, volume", string(got))

	stats, err := h.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	must.NoError(t, err)
	must.Len(t, stats.GetUsage(), 2)
	must.Equal(t, bytes, stats.GetUsage()[0].GetUnit())
	must.True(t, stats.GetUsage()[0].GetTotal() > 0, "total bytes")

	lv, err := h.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{})
	must.NoError(t, err)
	must.Len(t, lv.GetEntries(), 1)
	must.Equal(t, []string{info.GetNodeId()}, lv.GetEntries()[0].GetStatus().GetPublishedNodeIds())

	_, err = h.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
	must.NoError(t, err)
	check(t, target, false)
	_, err = os.Lstat(target)
	must.ErrorIs(t, err, fs.ErrNotExist, "NodeUnpublishVolume removes the target the plugin created")

	_, err = h.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	must.NoError(t, err)
	check(t, staging, false)
	fi, err := os.Lstat(staging)
	must.NoError(t, err, "the staging directory belongs to the CO and stays")
	must.True(t, fi.IsDir())

	_, err = h.ctrl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: info.GetNodeId()})
	must.NoError(t, err)
	_, err = h.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
	must.NoError(t, err)
	must.NoDirExists(t, volDir)
	lv, err = h.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{})
	must.NoError(t, err)
	must.Empty(t, lv.GetEntries())
}

func fullConfig(mount hostpath.MountMethod) hostpath.Config {
	return hostpath.Config{ControllerPublish: true, Staging: true, Mount: mount}
}

func TestPlugin_Lifecycle_Symlink(t *testing.T) {
	h := start(t, fullConfig(hostpath.MountSymlink))
	must.Equal(t, hostpath.MountSymlink, h.p.MountMethod())
	runLifecycle(t, h, func(t *testing.T, path string, attached bool) {
		fi, err := os.Lstat(path)
		if attached {
			must.NoError(t, err)
			must.True(t, fi.Mode()&fs.ModeSymlink != 0, "%s is a symbolic link while attached", path)
			return
		}
		if err == nil {
			must.True(t, fi.Mode()&fs.ModeSymlink == 0, "%s is no link once detached", path)
		}
	})
}

// requireBindMounts skips the test unless this process can bind-mount.
func requireBindMounts(t *testing.T) {
	t.Helper()
	if uid := os.Geteuid(); uid != 0 {
		t.Skipf("needs root for bind mounts: running as uid %d", uid)
	}
	if err := hostpath.CanBindMount(); err != nil {
		t.Skipf("needs root for bind mounts: mount(2) is not permitted here even as root: %v", err)
	}
}

func TestPlugin_Lifecycle_Bind(t *testing.T) {
	requireBindMounts(t)
	h := start(t, fullConfig(hostpath.MountBind))
	must.Equal(t, hostpath.MountBind, h.p.MountMethod())
	runLifecycle(t, h, func(t *testing.T, path string, attached bool) {
		must.Equal(t, attached, isMountPoint(t, path), "%s is a mount point while published and not after", path)
		if fi, err := os.Lstat(path); err == nil {
			must.True(t, fi.Mode()&fs.ModeSymlink == 0, "bind mode uses no links")
		}
	})
}

func TestPlugin_Lifecycle_AutoPicksBindAsRoot(t *testing.T) {
	requireBindMounts(t)
	h := start(t, hostpath.Config{Mount: hostpath.MountAuto})
	must.Equal(t, hostpath.MountBind, h.p.MountMethod())
}

func TestPlugin_NodePublishVolume_ReadOnlyBind(t *testing.T) {
	requireBindMounts(t)
	ctx := context.Background()
	h := start(t, hostpath.Config{Mount: hostpath.MountBind})
	cv, err := h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "ro", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
	must.NoError(t, err)
	id := cv.GetVolume().GetVolumeId()
	base := pathDir(t)
	rw, ro := filepath.Join(base, "rw"), filepath.Join(base, "ro")
	for _, tc := range []struct {
		target   string
		readonly bool
	}{{rw, false}, {ro, true}} {
		_, err := h.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
			VolumeId: id, TargetPath: tc.target, VolumeCapability: mountCap(snw), Readonly: tc.readonly,
		})
		must.NoError(t, err)
		must.True(t, isMountPoint(t, tc.target))
	}
	must.NoError(t, os.WriteFile(filepath.Join(rw, "f"), []byte("x"), 0o600))
	got, err := os.ReadFile(filepath.Join(ro, "f"))
	must.NoError(t, err, "the read-only target shows the volume")
	must.Equal(t, "x", string(got))
	err = os.WriteFile(filepath.Join(ro, "g"), []byte("y"), 0o600)
	must.ErrorIs(t, err, syscall.EROFS, "a read-only publish refuses writes")

	for _, target := range []string{rw, ro} {
		_, err := h.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
		must.NoError(t, err)
		must.False(t, isMountPoint(t, target))
		must.NoDirExists(t, target)
	}
}

// TestPlugin_Restart_KeepsState checks that the controller's volumes and
// the node's publishes survive a restart on the same data dir.
func TestPlugin_Restart_KeepsState(t *testing.T) {
	ctx := context.Background()
	h := start(t, fullConfig(hostpath.MountSymlink))
	cv, err := h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "keep", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
	must.NoError(t, err)
	id := cv.GetVolume().GetVolumeId()
	cp, err := h.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-1", VolumeCapability: mountCap(snw)})
	must.NoError(t, err)
	base := pathDir(t)
	staging, target := filepath.Join(base, "s"), filepath.Join(base, "t")
	_, err = h.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, PublishContext: cp.GetPublishContext(), StagingTargetPath: staging, VolumeCapability: mountCap(snw)})
	must.NoError(t, err)
	pub := &csipb.NodePublishVolumeRequest{VolumeId: id, PublishContext: cp.GetPublishContext(), StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCap(snw)}
	_, err = h.node.NodePublishVolume(ctx, pub)
	must.NoError(t, err)

	h.restart()

	again, err := h.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "keep", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
	must.NoError(t, err)
	must.Equal(t, id, again.GetVolume().GetVolumeId(), "the same name finds the same volume after a restart")
	cp2, err := h.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-1", VolumeCapability: mountCap(snw)})
	must.NoError(t, err)
	must.Equal(t, cp.GetPublishContext(), cp2.GetPublishContext(), "the publish context survives a restart")
	_, err = h.node.NodePublishVolume(ctx, pub)
	must.NoError(t, err, "a repeated publish is still recognized")
	ro := proto.CloneOf(pub)
	ro.Readonly = true
	_, err = h.node.NodePublishVolume(ctx, ro)
	requireCode(t, codes.AlreadyExists, err)

	_, err = h.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
	must.NoError(t, err)
	_, err = h.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	must.NoError(t, err)
	fi, err := os.Lstat(staging)
	must.NoError(t, err)
	must.True(t, fi.IsDir())
}

// TestPlugin_Split_ControllerAndNodes runs one controller plugin and two
// node plugins on one data dir, the way a CO deploys them.
func TestPlugin_Split_ControllerAndNodes(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	ctrl := start(t, hostpath.Config{Mode: hostpath.ModeController, DataDir: data, ControllerPublish: true, Staging: true})
	nodes := map[string]*harness{}
	for _, id := range []string{"node-1", "node-2"} {
		nodes[id] = start(t, hostpath.Config{Mode: hostpath.ModeNode, DataDir: data, NodeID: id, ControllerPublish: true, Staging: true})
	}

	cv, err := ctrl.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "shared", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(snw)}})
	must.NoError(t, err)
	id := cv.GetVolume().GetVolumeId()
	cp, err := ctrl.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-1", VolumeCapability: mountCap(snw)})
	must.NoError(t, err)
	_, err = ctrl.ctrl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-2", VolumeCapability: mountCap(snw)})
	requireCode(t, codes.FailedPrecondition, err)

	staging := filepath.Join(pathDir(t), "s")
	stage := &csipb.NodeStageVolumeRequest{VolumeId: id, PublishContext: cp.GetPublishContext(), StagingTargetPath: staging, VolumeCapability: mountCap(snw)}
	_, err = nodes["node-2"].node.NodeStageVolume(ctx, stage)
	requireCode(t, codes.FailedPrecondition, err) // the context names node-1
	_, err = nodes["node-1"].node.NodeStageVolume(ctx, stage)
	must.NoError(t, err)
	_, err = nodes["node-1"].node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	must.NoError(t, err)

	// Each service is served only where its mode says.
	_, err = ctrl.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	requireCode(t, codes.Unimplemented, err)
	_, err = nodes["node-1"].ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{})
	requireCode(t, codes.Unimplemented, err)
}

func TestPlugin_Serve_DataDirInUse(t *testing.T) {
	h := start(t, hostpath.Config{})
	p, err := hostpath.New(hostpath.Config{DataDir: h.cfg.DataDir, NodeID: "node-1", Mount: hostpath.MountSymlink})
	must.NoError(t, err)
	// An ended context makes a wrongly successful Serve return at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = p.Serve(ctx, listen(t))
	must.ErrorContains(t, err, "in use by another hostpath plugin")
}

func TestPlugin_Serve_CorruptState(t *testing.T) {
	data := t.TempDir()
	must.NoError(t, os.WriteFile(filepath.Join(data, "controller.json"), []byte("{not json"), 0o600))
	p, err := hostpath.New(hostpath.Config{DataDir: data, Mode: hostpath.ModeController})
	must.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = p.Serve(ctx, listen(t))
	must.ErrorContains(t, err, "corrupt")
}

func TestPlugin_Run_SocketLifecycle(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "csi.sock")
	// A socket file left by a crashed plugin is replaced.
	stale := listenAt(t, sock)
	stale.SetUnlinkOnClose(false)
	must.NoError(t, stale.Close())
	must.FileExists(t, sock)

	p, err := hostpath.New(hostpath.Config{Endpoint: "unix://" + sock, DataDir: t.TempDir(), Mount: hostpath.MountSymlink, NodeID: "n"})
	must.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	conn := dial(t, sock)
	probe, err := csipb.NewIdentityClient(conn).Probe(ctx, &csipb.ProbeRequest{}, waitForReady)
	must.NoError(t, err)
	must.True(t, probe.GetReady().GetValue())
	must.NoError(t, conn.Close())

	// A second Run on a live socket refuses to steal it.
	p2, err := hostpath.New(hostpath.Config{Endpoint: sock, DataDir: t.TempDir(), Mount: hostpath.MountSymlink, NodeID: "n"})
	must.NoError(t, err)
	must.ErrorContains(t, p2.Run(ctx), "in use by another process")

	cancel()
	must.NoError(t, <-done)
	_, err = os.Lstat(sock)
	must.ErrorIs(t, err, fs.ErrNotExist, "Run removes its socket")
}

func TestPlugin_Run_EndpointNotASocket(t *testing.T) {
	path := filepath.Join(shortDir(t), "file")
	must.NoError(t, os.WriteFile(path, nil, 0o600))
	p, err := hostpath.New(hostpath.Config{Endpoint: path, DataDir: t.TempDir(), Mount: hostpath.MountSymlink, NodeID: "n"})
	must.NoError(t, err)
	err = p.Run(context.Background())
	must.ErrorContains(t, err, "not a socket")
	must.FileExists(t, path, "Run never removes what is not a socket")
}

func TestNew_InvalidConfig(t *testing.T) {
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'n'
	}
	for _, tc := range []struct {
		name string
		cfg  hostpath.Config
		want string
	}{
		{"NoDataDir", hostpath.Config{}, "DataDir is required"},
		{"BadMode", hostpath.Config{DataDir: "/x", Mode: "both"}, "mode"},
		{"BadMount", hostpath.Config{DataDir: "/x", Mount: "nfs"}, "mount method"},
		{"NegativeMaxVolumes", hostpath.Config{DataDir: "/x", MaxVolumes: -1}, "MaxVolumes"},
		{"LongNodeID", hostpath.Config{DataDir: "/x", NodeID: string(long)}, "NodeID"},
		{"TCPEndpoint", hostpath.Config{DataDir: "/x", Endpoint: "tcp://127.0.0.1:9000"}, "only unix sockets"},
		{"LongSocketPath", hostpath.Config{DataDir: "/x", Endpoint: "/" + string(long)}, "socket path"},
		{"SplitNodeNotNode", hostpath.Config{DataDir: "/x", Mode: hostpath.ModeMonolith, SplitNode: true}, "SplitNode"},
		{"SplitNodeDefaultMode", hostpath.Config{DataDir: "/x", SplitNode: true}, "SplitNode"},
		{"NegativeShutdownTimeout", hostpath.Config{DataDir: "/x", ShutdownTimeout: -1}, "ShutdownTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := hostpath.New(tc.cfg)
			must.ErrorIs(t, err, hostpath.ErrInvalidConfig)
			must.ErrorContains(t, err, tc.want)
		})
	}
}

func TestNew_BindWithoutPrivilege(t *testing.T) {
	if hostpath.CanBindMount() == nil {
		t.Skip("bind mounts work here, so MountBind is accepted")
	}
	_, err := hostpath.New(hostpath.Config{DataDir: t.TempDir(), Mount: hostpath.MountBind})
	must.ErrorIs(t, err, hostpath.ErrInvalidConfig)
	must.ErrorContains(t, err, "symlink")
}

func TestNew_AutoFallsBackToSymlink(t *testing.T) {
	err := hostpath.CanBindMount()
	if err == nil {
		t.Skip("bind mounts work here, so auto picks bind")
	}
	p, nerr := hostpath.New(hostpath.Config{DataDir: t.TempDir(), Mount: hostpath.MountAuto})
	must.NoError(t, nerr)
	must.Equal(t, hostpath.MountSymlink, p.MountMethod(), "fallback after: %v", err)
}

func TestSocketPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/run/csi.sock", "/run/csi.sock"},
		{"unix:///run/csi.sock", "/run/csi.sock"},
		{"unix:/run/csi.sock", "/run/csi.sock"},
		{"/run//x/../csi.sock", "/run/csi.sock"},
	} {
		t.Run(fmt.Sprintf("%q", tc.in), func(t *testing.T) {
			got, err := hostpath.SocketPath(tc.in)
			must.NoError(t, err)
			must.Equal(t, tc.want, got)
		})
	}
	_, err := hostpath.SocketPath("unix://")
	must.True(t, errors.Is(err, hostpath.ErrInvalidConfig))
}
