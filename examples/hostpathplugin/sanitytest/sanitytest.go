package sanitytest

import (
	"bufio"
	"context"
	"flag"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
)

// Layout is how the plugin is deployed for the suite.
type Layout string

// The layouts.
const (
	// Monolith is one plugin serving Identity, Controller and Node on one
	// socket.
	Monolith Layout = "monolith"
	// Split is a controller plugin on one socket and a node plugin on
	// another, sharing a data dir; the suite gets the node socket as
	// Address and the controller socket as ControllerAddress.
	Split Layout = "split"
)

// NodeID is the node ID of the plugin's node service.
const NodeID = "sanity-node"

// maxVolumes is the plugin's MaxVolumes: more than any spec of the suite
// publishes to the node at once, except the attach-limit spec, which
// publishes this many and expects the next publish to fail.
const maxVolumes = 4

// Option changes the Config of every plugin Run serves.
type Option func(*hostpath.Config)

// The topology and capacity Zonal gives the plugins.
var (
	ZonalTopology = map[string]string{"topology.hostpath.csikit.io/zone": "zone-a", "topology.hostpath.csikit.io/rack": "r1"}
	// ZonalCapacity holds every volume the suite has at once (it makes
	// 10 GiB volumes, at most a handful at a time) with room to spare.
	ZonalCapacity int64 = 1 << 40
)

// Zonal serves the plugins with ZonalTopology and ZonalCapacity, as the
// hostpathplugin flags -topology and -capacity do: the suite then runs
// its GetCapacity spec, checks NodeGetInfo's accessible topology, and
// creates the volumes of its node specs with that topology as their
// requisite one.
func Zonal(c *hostpath.Config) {
	c.Topology = ZonalTopology
	c.Capacity = ZonalCapacity
}

// stopTimeout bounds how long Run waits for a plugin to stop.
const stopTimeout = 30 * time.Second

// Run serves the hostpath plugin in layout, changed by opts, and runs
// the whole sanity suite against it. The suite's own report, with its
// closing "Ran N of M Specs" summary, goes to standard output (shown
// with go test -v).
func Run(t *testing.T, layout Layout, opts ...Option) {
	// A short directory: t.TempDir() can be too long for a socket path.
	dir, err := os.MkdirTemp("", "hps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	// Registered after RemoveAll, so it runs first: whatever the suite
	// left mounted is reported, then unmounted before the removal.
	t.Cleanup(func() { unmountLeftovers(t, dir) })

	data := filepath.Join(dir, "data")
	base := hostpath.Config{
		DataDir:           data,
		NodeID:            NodeID,
		ControllerPublish: true,
		Staging:           true,
		Mount:             mountMethod(t),
		// A limit, so that the suite's attach-limit spec runs.
		MaxVolumes: maxVolumes,
	}
	for _, o := range opts {
		o(&base)
	}
	cfg := sanity.NewTestConfig()
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	cfg.TestNodeVolumeAttachLimit = true
	cfg.TestVolumeMutableParameters = map[string]string{hostpath.LabelParameter: "gold"}
	switch layout {
	case Monolith:
		base.Mode = hostpath.ModeMonolith
		cfg.Address = serve(t, base, filepath.Join(dir, "csi.sock"))
	case Split:
		c := base
		c.Mode = hostpath.ModeController
		c.NodeID = "sanity-controller" // a controller's own ID is no node
		cfg.ControllerAddress = serve(t, c, filepath.Join(dir, "controller.sock"))
		n := base
		n.Mode = hostpath.ModeNode
		n.SplitNode = true // the suite reads CONTROLLER_SERVICE from the node socket
		cfg.Address = serve(t, n, filepath.Join(dir, "node.sock"))
	default:
		t.Fatalf("unknown layout %q: use Monolith or Split", layout)
	}
	// Plain text for CI logs: Ginkgo reads its flags from the test
	// binary's command line, where -ginkgo.no-color=false still wins.
	if f := flag.Lookup("ginkgo.no-color"); f != nil && !isSet("ginkgo.no-color") {
		if err := f.Value.Set("true"); err != nil {
			t.Fatal(err)
		}
	}
	sanity.Test(t, cfg)
}

// isSet reports whether the named flag was given on the command line.
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// mountMethod picks real bind mounts where this process may make them
// (as root), so that a broken bind path fails the suite instead of
// falling back quietly; elsewhere the symlink fallback, on which the
// suite passes too.
func mountMethod(t *testing.T) hostpath.MountMethod {
	if os.Geteuid() != 0 {
		t.Logf("not root (uid %d): the node plugin publishes with symbolic links, not bind mounts", os.Geteuid())
		return hostpath.MountSymlink
	}
	if err := hostpath.CanBindMount(); err != nil {
		t.Logf("root, but bind mounts do not work here (%v): the node plugin publishes with symbolic links", err)
		return hostpath.MountSymlink
	}
	return hostpath.MountBind
}

// serve starts a plugin for cfg on a unix socket at path, waits until it
// answers Probe (it then holds its state), and stops it at cleanup. It
// returns the address for the suite.
func serve(t *testing.T, cfg hostpath.Config, path string) string {
	t.Helper()
	p, err := hostpath.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode == hostpath.ModeController {
		t.Logf("controller plugin on %s", path)
	} else {
		t.Logf("%s plugin on %s, %s mounts", cfg.Mode, path, p.MountMethod())
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s plugin: %v", cfg.Mode, err)
			}
		case <-time.After(stopTimeout):
			t.Errorf("%s plugin did not stop within %s", cfg.Mode, stopTimeout)
		}
	})

	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pctx, pcancel := context.WithTimeout(ctx, stopTimeout)
	defer pcancel()
	if _, err := csipb.NewIdentityClient(conn).Probe(pctx, &csipb.ProbeRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("%s plugin does not answer Probe: %v", cfg.Mode, err)
	}
	return "unix://" + path
}

// unmountLeftovers fails the test for every mount point under dir and
// unmounts it, deepest first.
func unmountLeftovers(t *testing.T, dir string) {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return // no mountinfo, no bind mounts
	}
	defer f.Close()
	var mps []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Field 5 is the mount point; the suite's paths need no
		// unescaping (no spaces or backslashes).
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], resolved+"/") {
			mps = append(mps, fields[4])
		}
	}
	slices.SortFunc(mps, func(a, b string) int { return len(b) - len(a) })
	for _, mp := range mps {
		t.Errorf("the sanity suite left %s mounted", mp)
		if err := syscall.Unmount(mp, 0); err != nil {
			t.Errorf("unmount %s: %v", mp, err)
		}
	}
}
