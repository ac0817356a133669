package hostpath_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
)

// Serve the plugin in-process on a temporary socket, in symlink mode so
// that it works for any user, and talk to it with a raw CSI client.
func Example() {
	dir, err := os.MkdirTemp("", "hp") // short: a unix socket path has a size limit
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	p, err := hostpath.New(hostpath.Config{
		DataDir: filepath.Join(dir, "data"),
		NodeID:  "node-1",
		Mount:   hostpath.MountSymlink,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	lis, err := net.Listen("unix", filepath.Join(dir, "csi.sock"))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, lis) }()

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "csi.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	info, err := csipb.NewIdentityClient(conn).GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(info.GetName())

	vol, err := csipb.NewControllerClient(conn).CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "scratch",
		VolumeCapabilities: []*csipb.VolumeCapability{{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(vol.GetVolume().GetCapacityBytes() == hostpath.DefaultCapacity)

	_ = conn.Close()
	cancel()
	fmt.Println(<-served)
	// Output:
	// hostpath.csikit.io
	// true
	// <nil>
}
