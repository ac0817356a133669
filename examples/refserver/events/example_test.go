package events_test

import (
	"os"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/events"
)

func Example() {
	log := events.New(os.Stdout)
	log.Printf("server", "volume %s created by plugin %s on %s (controller)", "demo-vol", "hostpath.csikit.io", "node-1")
	log.Printf("node-2", "NodeStageVolume ok: %s", "vol-1")
	// Secrets print redacted even if one is passed by mistake.
	log.Printf("server", "secrets: %v", csi.Secrets{"token": "s3cr3t"})

	var quiet *events.Log
	quiet.Printf("server", "a nil Log prints nothing")
	// Output:
	// [server] volume demo-vol created by plugin hostpath.csikit.io on node-1 (controller)
	// [node-2] NodeStageVolume ok: vol-1
	// [server] secrets: Secrets{1 keys [redacted]}
}
