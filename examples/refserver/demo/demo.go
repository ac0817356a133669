package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/events"
	"github.com/csikit/csikit/rpcshim"
)

// The demo's names.
const (
	Namespace    = "default"
	VolumeID     = "demo-vol"
	AllocationID = "web-1"
	// ClaimNode is where the demo's allocation runs: not the node of
	// the controller, so the attach is routed to another node.
	ClaimNode = "node-2"
	// FileName is the file the allocation writes through the mount.
	FileName = "hello.txt"
	// FileContent is what it writes.
	FileContent = "hello from web-1 through a csikit mount\n"
)

// DefaultCleanupTimeout bounds the drain and stop after the demo.
const DefaultCleanupTimeout = 30 * time.Second

// demoSecret is handed to the plugin with the volume. It must never
// appear in any output; the demo's test checks that.
const demoSecret = "demo-secret-not-for-printing"

// Step names a point of the demo, for Config.OnStep.
type Step string

// The demo's steps, in order.
const (
	StepClusterUp Step = "cluster-up" // server and agents running, plugin healthy
	StepCreated   Step = "created"    // volume created through the controller
	StepMounted   Step = "mounted"    // claimed, mounted on ClaimNode, file written
	StepReleased  Step = "released"   // allocation stopped, claim freed, mounts gone
)

// Config configures the demo.
type Config struct {
	// DataDir holds the cluster (see ClusterConfig.Dir). "" means a new
	// temporary directory, removed at the end once nothing is mounted
	// under it; a given DataDir is kept.
	DataDir string
	// Out receives the lifecycle lines; nil discards them.
	Out io.Writer
	// ExitAfterDemo makes Run return after the demo instead of serving
	// until ctx ends.
	ExitAfterDemo bool
	// Mount is the hostpath plugin's mount method; "" means auto.
	Mount hostpath.MountMethod
	// Addr is the server API's listen address; "" means 127.0.0.1:0.
	Addr string
	// CleanupTimeout bounds the drain and stop at the end; 0 means
	// DefaultCleanupTimeout.
	CleanupTimeout time.Duration
	// OnStep, if set, is called after each Step with the result so far
	// (ServerURL is set from StepClusterUp on), from Run's goroutine;
	// the demo waits for it to return.
	OnStep func(Step, *Result)
	// Logger receives diagnostics; nil means none.
	Logger hclog.Logger
}

// Result is what the demo did.
type Result struct {
	// Dir is the cluster's directory (removed at the end if it was
	// temporary).
	Dir string
	// ServerURL is the server API's address.
	ServerURL string
	// TokenFile holds the management token the demo bootstrapped: the
	// API refuses calls without a token.
	TokenFile string
	// MountMethod is how the hostpath plugin mounted: bind or symlink.
	MountMethod hostpath.MountMethod
	// ExternalID is the plugin's ID of the volume.
	ExternalID string
	// MountPath is where the volume was mounted on ClaimNode.
	MountPath string
	// PluginFile is the file written through the mount, as found in the
	// plugin's data dir.
	PluginFile string
	// MountsDuring are the mount points under Dir while the volume was
	// mounted (none in symlink mode); MountsAfter those left once the
	// claim was freed (none, or the demo fails).
	MountsDuring []string
	MountsAfter  []string
}

// Run runs the all-in-one demo: a server and two node agents, each with
// the hostpath plugin, on this machine; a volume created, claimed for an
// allocation on node-2, mounted, written through the mount, released by
// stopping the allocation and freed by the claim release worker. Each
// step prints as it happens. Unless cfg.ExitAfterDemo, it then serves
// until ctx ends. At the end it drains (releasing any claim made
// meanwhile, through the same release path), stops everything and
// removes a temporary directory once nothing is mounted under it.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	log := events.New(cfg.Out)
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.CleanupTimeout <= 0 {
		cfg.CleanupTimeout = DefaultCleanupTimeout
	}
	step := func(s Step) {
		if cfg.OnStep != nil {
			cfg.OnStep(s, res)
		}
	}
	dir, temp := cfg.DataDir, cfg.DataDir == ""
	if temp {
		// Short, for the unix sockets under it.
		if dir, err = os.MkdirTemp("", "refserver"); err != nil {
			return nil, err
		}
	} else if err = os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	res = &Result{Dir: dir}
	log.Printf("demo", "starting a server and two node agents with the hostpath plugin in %s", dir)
	log.Printf("demo", "the server runs in dev mode: its state is in memory only, and is lost when the demo stops")

	c, err := StartCluster(ctx, ClusterConfig{Dir: dir, Mount: cfg.Mount, Addr: cfg.Addr, Events: log, Logger: cfg.Logger, TLS: true, ACL: true})
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
	res.ServerURL, res.TokenFile = c.URL(), c.TokenFile()
	res.MountMethod = c.Agent("node-1").HostpathMountMethod()

	if err := script(ctx, c, log, res, step); err != nil {
		log.Printf("demo", "failed: %v", err)
		return res, err
	}
	if cfg.ExitAfterDemo {
		return res, nil
	}
	log.Printf("demo", "the cluster keeps serving until interrupted; in another terminal try:")
	log.Printf("demo", "  export %s=$(cat %s)", api.TokenEnv, c.TokenFile())
	log.Printf("demo", "  go run ./examples/refserver plugin status -address %s -tls-ca %s", c.URL(), c.CAFile())
	log.Printf("demo", "  go run ./examples/refserver volume status -address %s -tls-ca %s", c.URL(), c.CAFile())
	<-ctx.Done()
	return res, nil
}

// checkAfterRelease checks what the release left: the file written
// through the mount in the plugin's data dir, and no mount.
func checkAfterRelease(c *Cluster, log *events.Log, res *Result) error {
	var err error
	res.PluginFile = filepath.Join(c.PluginDataDir(), "volumes", res.ExternalID, FileName)
	got, err := os.ReadFile(res.PluginFile)
	if err != nil {
		return fmt.Errorf("the file written through the mount is not in the plugin's data dir: %w", err)
	}
	if !bytes.Equal(got, []byte(FileContent)) {
		return fmt.Errorf("%s holds %q, want %q", res.PluginFile, got, FileContent)
	}
	log.Printf("demo", "%s is in the plugin's data dir: %s", FileName, res.PluginFile)
	if res.MountsAfter, err = MountsUnder(res.Dir); err != nil {
		return err
	}
	if len(res.MountsAfter) > 0 {
		return fmt.Errorf("mounts left under %s after the release: %s", res.Dir, strings.Join(res.MountsAfter, ", "))
	}
	if res.MountMethod == hostpath.MountBind {
		log.Printf("demo", "/proc/self/mountinfo lists no mounts under %s any more", res.Dir)
	}
	return nil
}

// script is the demo's lifecycle, through the server's API only.
func script(ctx context.Context, c *Cluster, log *events.Log, res *Result, step func(Step)) error {
	client := c.Client()
	p, _, err := client.Plugin(ctx, PluginID, nil)
	if err != nil {
		return err
	}
	log.Printf("demo", "plugin %s (%s %s) is ready: controllers %d/%d, nodes %d/%d healthy; mounts use %s",
		p.ID, p.Provider, p.Version, p.ControllersHealthy, p.ControllersExpected, p.NodesHealthy, p.NodesExpected, res.MountMethod)
	step(StepClusterUp)

	capab := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	created, err := client.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{Volume: csi.Volume{
		ID: VolumeID, Namespace: Namespace, PluginID: PluginID, Capabilities: []csi.Capability{capab},
		Secrets: csi.Secrets{"token": demoSecret},
	}})
	if err != nil {
		return fmt.Errorf("create volume %s: %w", VolumeID, err)
	}
	res.ExternalID = created.Volume.ExternalID
	step(StepCreated)

	claim, err := client.Claim(ctx, Namespace, VolumeID, &api.ClaimRequest{
		AllocationID: AllocationID, NodeID: ClaimNode, Mode: csi.ClaimWrite, Mount: true,
	})
	if err != nil {
		return fmt.Errorf("claim volume %s for %s on %s: %w", VolumeID, AllocationID, ClaimNode, err)
	}
	res.MountPath = claim.Mount.Path
	log.Printf("demo", "%s holds a %s claim on %s (%s), mounted on %s",
		AllocationID, claim.Claim.Mode, VolumeID, claim.Claim.State, ClaimNode)

	// The allocation's workload: write a file through the mount.
	if err := os.WriteFile(filepath.Join(claim.Mount.Path, FileName), []byte(FileContent), 0o644); err != nil {
		return fmt.Errorf("write through the mount at %s: %w", claim.Mount.Path, err)
	}
	log.Printf("demo", "%s wrote %s through the mount", AllocationID, FileName)
	if res.MountsDuring, err = MountsUnder(res.Dir); err != nil {
		return err
	}
	if res.MountMethod == hostpath.MountBind {
		log.Printf("demo", "/proc/self/mountinfo lists %d bind mounts under %s (staging and target)", len(res.MountsDuring), res.Dir)
	}
	step(StepMounted)

	if _, err := client.Release(ctx, AllocationID); err != nil {
		return fmt.Errorf("release allocation %s: %w", AllocationID, err)
	}
	log.Printf("demo", "%s stopped; the claim release worker takes over", AllocationID)
	if err := client.WaitReleased(ctx, AllocationID); err != nil {
		return fmt.Errorf("waiting for the claim of %s to be freed: %w", AllocationID, err)
	}
	v, _, err := client.Volume(ctx, Namespace, VolumeID, nil)
	if err != nil {
		return err
	}
	if v.InUse() {
		return fmt.Errorf("volume %s still has claims after the release of %s", VolumeID, AllocationID)
	}
	log.Printf("demo", "the claim of %s on %s is freed: the volume has no claims", AllocationID, VolumeID)

	if err := checkAfterRelease(c, log, res); err != nil {
		return err
	}
	log.Printf("demo", "done: created, claimed, mounted, written, released and freed")
	step(StepReleased)
	return nil
}
