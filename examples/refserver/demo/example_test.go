package demo_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/demo"
)

// Run the all-in-one demo in-process and look at what it left: the file
// the allocation wrote through the mount is in the plugin's data dir,
// and nothing is mounted any more. Out is nil here, since the printed
// lines carry ports and random volume IDs; pass os.Stdout to watch.
func ExampleRun() {
	dir, err := os.MkdirTemp("", "rs") // short: unix socket paths are limited
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	res, err := demo.Run(context.Background(), demo.Config{
		DataDir: dir, ExitAfterDemo: true, Mount: hostpath.MountSymlink,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := os.ReadFile(filepath.Join(dir, "plugin", "volumes", res.ExternalID, demo.FileName))
	fmt.Printf("%s%v\n", b, err)
	fmt.Println("mounts left:", len(res.MountsAfter))
	// Output:
	// hello from web-1 through a csikit mount
	// <nil>
	// mounts left: 0
}

// Run the volume operations demo: the file written before the snapshot
// and the online expansion is read back from the restored volume.
func ExampleRunVolumeOps() {
	res, err := demo.RunVolumeOps(context.Background(), demo.Config{Mount: hostpath.MountSymlink})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(res.ReadRestored)
	fmt.Println("expanded to", res.Capacity, "bytes; mounts left:", len(res.MountsAfter))
	// Output:
	// hello from web-1 through a csikit mount
	// expanded to 134217728 bytes; mounts left: 0
}
