package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("hostpathplugin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		endpoint   = fs.String("endpoint", "unix:///tmp/hostpath-csi.sock", "unix socket to serve on: a path or a unix:///path URL")
		dataDir    = fs.String("data-dir", "/tmp/hostpath-csi", "directory that holds the volumes and the plugin's state")
		nodeID     = fs.String("node-id", "", "node ID reported by NodeGetInfo (default: the host name)")
		maxVolumes = fs.Int64("max-volumes", 0, "max volumes per node reported by NodeGetInfo and enforced by ControllerPublish (0: no limit)")
		topology   = fs.String("topology", "", "where the storage is, as topology segments zone=a,rack=r1: reported by NodeGetInfo, given to every volume, required of CreateVolume's requisite topologies (empty: no topology)")
		capacity   = fs.Int64("capacity", 0, "bytes all volumes may hold together: reported by GetCapacity, drawn from by CreateVolume and ControllerExpandVolume (0: no limit, no GET_CAPACITY)")
		mode       = fs.String("mode", string(hostpath.ModeMonolith), "services to serve: controller, node or monolith")
		splitNode  = fs.Bool("split-node", false, "with -mode node: the node half of a split plugin whose controller runs apart; advertise CONTROLLER_SERVICE like the controller")
		ctrlPub    = fs.Bool("controller-publish", true, "advertise PUBLISH_UNPUBLISH_VOLUME (ControllerPublish/Unpublish)")
		staging    = fs.Bool("staging", true, "advertise STAGE_UNSTAGE_VOLUME (NodeStage/Unstage)")
		mount      = fs.String("mount", string(hostpath.MountAuto), "how volumes appear at node paths: bind (needs root), symlink, or auto (bind when it works)")
		name       = fs.String("name", hostpath.DefaultName, "plugin name reported by GetPluginInfo")
		logLevel   = fs.String("log-level", "info", "log level: trace, debug, info, warn, error")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: hostpathplugin [flags]\n\nA small CSI plugin whose volumes are directories. Not for production.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hostpathplugin: unexpected arguments %q; all settings are flags\n", fs.Args())
		return 2
	}

	level := hclog.LevelFromString(*logLevel)
	if level == hclog.NoLevel {
		fmt.Fprintf(stderr, "hostpathplugin: -log-level %q is not one of trace, debug, info, warn, error\n", *logLevel)
		return 2
	}
	topo, err := hostpath.ParseTopology(*topology)
	if err != nil {
		fmt.Fprintf(stderr, "hostpathplugin: -topology: %v\n", err)
		return 2
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name:   "hostpathplugin",
		Level:  level,
		Output: stderr,
	})
	p, err := hostpath.New(hostpath.Config{
		Name:              *name,
		Endpoint:          *endpoint,
		DataDir:           *dataDir,
		Mode:              hostpath.Mode(*mode),
		SplitNode:         *splitNode,
		NodeID:            *nodeID,
		MaxVolumes:        *maxVolumes,
		Topology:          topo,
		Capacity:          *capacity,
		ControllerPublish: *ctrlPub,
		Staging:           *staging,
		Mount:             hostpath.MountMethod(*mount),
		Logger:            logger,
	})
	if err != nil {
		fmt.Fprintf(stderr, "hostpathplugin: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := p.Run(ctx); err != nil {
		logger.Error("plugin failed", "error", err)
		return 1
	}
	return 0
}
