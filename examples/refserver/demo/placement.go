package demo

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/events"
	"github.com/csikit/csikit/rpcshim"
)

// The placement demo's names: node-1 and node-2 are in zone a (node-1
// runs the controller, so volumes are made there), node-3 in zone b.
const (
	PlacementVolumeID = "zonal-vol"
	// WrongZoneNode is the node the demo's first claim is refused on.
	WrongZoneNode = "node-3"
)

// PlacementTopologies are the placement demo's node topologies.
var PlacementTopologies = map[string]map[string]string{
	"node-1": {"zone": "a"}, "node-2": {"zone": "a"}, "node-3": {"zone": "b"},
}

// PlacementResult is what the placement demo saw.
type PlacementResult struct {
	// VolumeTopologies is where the created volume is accessible from.
	VolumeTopologies []*csi.Topology
	// Feasibility is the per-node answer before any claim.
	Feasibility *api.PlaceResponse
	// Refusal is the error of the claim on WrongZoneNode; it matches
	// csi.ErrTopologyMismatch.
	Refusal error
	// ClaimedOn is the node the volume was then claimed on.
	ClaimedOn string
}

// RunPlacement runs the placement demo on a cluster of three nodes in
// two zones (PlacementTopologies), with the hostpath plugin's
// -topology: it creates a zonal volume, prints the per-node
// feasibility of a write claim, shows the claim on the node of the
// other zone refused with its message, claims it on a node of its own
// zone, and releases it. It returns once done; cfg.ExitAfterDemo and
// cfg.OnStep are not used.
func RunPlacement(ctx context.Context, cfg Config) (res *PlacementResult, err error) {
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
	log.Printf("demo", "starting a server and three node agents: node-1 and node-2 in zone a, node-3 in zone b")
	c, err := StartCluster(ctx, ClusterConfig{
		Dir: dir, Nodes: []string{"node-1", "node-2", "node-3"}, Topologies: PlacementTopologies,
		Mount: cfg.Mount, Addr: cfg.Addr, Events: log, Logger: cfg.Logger, ACL: true,
	})
	if err != nil {
		if temp {
			err = errors.Join(err, removeIfNoMounts(dir))
		}
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), cfg.CleanupTimeout)
		defer cancel()
		cerr := c.Close(cctx)
		if temp {
			cerr = errors.Join(cerr, removeIfNoMounts(dir))
		}
		err = errors.Join(err, cerr)
	}()
	res = &PlacementResult{}
	if err := placementScript(ctx, c.Client(), log, res); err != nil {
		log.Printf("demo", "failed: %v", err)
		return res, err
	}
	return res, nil
}

func placementScript(ctx context.Context, client *api.Client, log *events.Log, res *PlacementResult) error {
	capab := csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}
	created, err := client.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{Volume: csi.Volume{
		ID: PlacementVolumeID, Namespace: Namespace, PluginID: PluginID, Capabilities: []csi.Capability{capab},
	}})
	if err != nil {
		return fmt.Errorf("create volume %s: %w", PlacementVolumeID, err)
	}
	res.VolumeTopologies = created.Volume.Topologies
	log.Printf("demo", "volume %s is accessible from %s", PlacementVolumeID, csi.TopologiesString(res.VolumeTopologies))

	res.Feasibility, err = client.Place(ctx, Namespace, PlacementVolumeID, &api.PlaceRequest{Mode: csi.ClaimWrite})
	if err != nil {
		return fmt.Errorf("feasibility of volume %s: %w", PlacementVolumeID, err)
	}
	for _, n := range res.Feasibility.Nodes {
		log.Printf("demo", "feasibility of a write claim on %s {%s}: %s", n.NodeID, n.Topology, n.Reasons)
	}

	_, err = client.Claim(ctx, Namespace, PlacementVolumeID, &api.ClaimRequest{
		AllocationID: "zonal-1", NodeID: WrongZoneNode, Mode: csi.ClaimWrite,
	})
	if !errors.Is(err, csi.ErrTopologyMismatch) {
		return fmt.Errorf("the claim on %s (zone b) gave %v, want a topology refusal", WrongZoneNode, err)
	}
	res.Refusal = err
	log.Printf("demo", "the claim on %s is refused: %v", WrongZoneNode, err)

	for _, n := range res.Feasibility.Nodes {
		if n.Reasons == 0 {
			res.ClaimedOn = n.NodeID
			break
		}
	}
	if res.ClaimedOn == "" {
		return fmt.Errorf("no node can take volume %s", PlacementVolumeID)
	}
	if _, err := client.Claim(ctx, Namespace, PlacementVolumeID, &api.ClaimRequest{
		AllocationID: "zonal-2", NodeID: res.ClaimedOn, Mode: csi.ClaimWrite,
	}); err != nil {
		return fmt.Errorf("claim volume %s on %s: %w", PlacementVolumeID, res.ClaimedOn, err)
	}
	log.Printf("demo", "claimed on %s, in the volume's zone", res.ClaimedOn)
	if _, err := client.Release(ctx, "zonal-2"); err != nil {
		return err
	}
	if err := client.WaitReleased(ctx, "zonal-2"); err != nil {
		return err
	}
	log.Printf("demo", "done: a zonal volume placed where it can be reached, and refused where it cannot")
	return nil
}
