package plugintest

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// The rows of the identity and node services: the plugin's name,
// volume statistics, node expansion, and the codes for missing fields.

const (
	methodNodeGetVolumeStats = "NodeGetVolumeStats"
	methodNodeGetCaps        = "NodeGetCapabilities"
)

var (
	needStats      = needNode(func(c csi.NodeCapabilities) bool { return c.GetVolumeStats }, "GET_VOLUME_STATS")
	needNodeExpand = needNode(func(c csi.NodeCapabilities) bool { return c.ExpandVolume }, "EXPAND_VOLUME")
	needUnmounted  = func(l *run) string {
		if len(l.allocs) == 0 || l.allocs[0].path == "" || l.allocs[0].mounted {
			return "the volume was not published and unpublished"
		}
		return ""
	}
	needPublished = func(l *run) string {
		if len(l.allocs) == 0 || !l.allocs[0].mounted {
			return "the volume is not published"
		}
		return ""
	}
)

// pluginName is the spec's format of GetPluginInfo's name.
var pluginName = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9.-]{0,61}[a-zA-Z0-9])?$`)

var nodeChecks = []coverageCheck{
	{name: "GetPluginInfo (name)", run: func(l *run, ctx context.Context, step string) {
		if !pluginName.MatchString(l.provider) {
			l.wrong(ctx, step, methodGetPluginInfo, fmt.Sprintf("with name %q", l.provider),
				"the spec requires a name in domain name notation: at most 63 characters, alphanumerics at both ends, dashes, dots and alphanumerics between")
		}
	}},
	{name: "NodeGetVolumeStats", phase: phaseMounted, needs: needBoth(needStats, needPublished), run: (*run).checkStats},
	{name: "NodeExpandVolume (errors)", phase: phaseMounted, needs: needBoth(needNodeExpand, needPublished), run: func(l *run, ctx context.Context, step string) {
		nc, ok := l.nodeRaw(ctx, step)
		if !ok {
			return
		}
		expand := func(id, path string) func(context.Context) (*csipb.NodeExpandVolumeResponse, error) {
			return func(ctx context.Context) (*csipb.NodeExpandVolumeResponse, error) {
				return nc.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: id, VolumePath: path, Secrets: l.cfg.Secrets})
			}
		}
		bad := unknownID(l.externalID)
		expectRPC(ctx, l, step, methodNodeExpand, csi.CodeNotFound, fmt.Sprintf("%s (volume_id %q)", expectUnknownVol, bad), expand(bad, l.allocs[0].path))
		expectRPC(ctx, l, step, methodNodeExpand, csi.CodeInvalidArgument, expectMissingField+" (NodeExpandVolumeRequest.volume_id)", expand("", l.allocs[0].path))
		expectRPC(ctx, l, step, methodNodeExpand, csi.CodeInvalidArgument, expectMissingField+" (NodeExpandVolumeRequest.volume_path)", expand(l.externalID, ""))
	}},
	{name: "NodeUnpublishVolume (missing fields)", phase: phaseUnmounted, needs: needUnmounted, run: func(l *run, ctx context.Context, step string) {
		nc, ok := l.nodeRaw(ctx, step)
		if !ok {
			return
		}
		unpublish := func(id, path string) func(context.Context) (*csipb.NodeUnpublishVolumeResponse, error) {
			return func(ctx context.Context) (*csipb.NodeUnpublishVolumeResponse, error) {
				return nc.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: path})
			}
		}
		expectRPC(ctx, l, step, methodNodeUnpublish, csi.CodeInvalidArgument, expectMissingField+" (NodeUnpublishVolumeRequest.volume_id)", unpublish("", l.allocs[0].path))
		expectRPC(ctx, l, step, methodNodeUnpublish, csi.CodeInvalidArgument, expectMissingField+" (NodeUnpublishVolumeRequest.target_path)", unpublish(l.externalID, ""))
	}},
	{name: "NodeUnstageVolume (missing fields)", phase: phaseUnmounted, needs: needBoth(needUnmounted, needNode(func(c csi.NodeCapabilities) bool { return c.StageUnstageVolume }, "STAGE_UNSTAGE_VOLUME")),
		run: func(l *run, ctx context.Context, step string) {
			nc, ok := l.nodeRaw(ctx, step)
			if !ok {
				return
			}
			unstage := func(id, path string) func(context.Context) (*csipb.NodeUnstageVolumeResponse, error) {
				return func(ctx context.Context) (*csipb.NodeUnstageVolumeResponse, error) {
					return nc.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: path})
				}
			}
			staging := filepath.Join(l.cfg.MountRoot, "plugintest-nothing-"+randomHex(4))
			if st, ok := l.calls.last(0, methodNodeStage, nil); ok {
				staging = st.Req.(*plugin.NodeStageRequest).StagingPath
			}
			expectRPC(ctx, l, step, methodNodeUnstage, csi.CodeInvalidArgument, expectMissingField+" (NodeUnstageVolumeRequest.volume_id)", unstage("", staging))
			expectRPC(ctx, l, step, methodNodeUnstage, csi.CodeInvalidArgument, expectMissingField+" (NodeUnstageVolumeRequest.staging_target_path)", unstage(l.externalID, ""))
		}},
}

// checkStats reads the statistics of the published volume, of a volume
// that does not exist and of a path where nothing is published.
func (l *run) checkStats(ctx context.Context, step string) {
	nc, ok := l.nodeRaw(ctx, step)
	if !ok {
		return
	}
	stats := func(id, path string) func(context.Context) (*csipb.NodeGetVolumeStatsResponse, error) {
		return func(ctx context.Context) (*csipb.NodeGetVolumeStatsResponse, error) {
			return nc.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: path})
		}
	}
	path := l.allocs[0].path
	resp, ok := callOK(ctx, l, step, methodNodeGetVolumeStats, fmt.Sprintf("the spec requires OK from NodeGetVolumeStats of volume %q at %s, where NodePublishVolume returned OK", l.externalID, path), stats(l.externalID, path))
	if ok {
		for _, u := range resp.GetUsage() {
			if u.GetUnit() == csipb.VolumeUsage_UNKNOWN || u.GetTotal() < 0 || u.GetUsed() < 0 || u.GetAvailable() < 0 {
				l.wrong(ctx, step, methodNodeGetVolumeStats, fmt.Sprintf("with usage %v", u), "the spec requires each usage entry to name its unit (BYTES or INODES) with counts ≥ 0")
			}
		}
		if l.cfg.Capability.AttachmentMode == csi.AttachmentModeFileSystem && len(resp.GetUsage()) == 0 {
			l.wrong(ctx, step, methodNodeGetVolumeStats, "with no usage", "a plugin that advertises GET_VOLUME_STATS must report the usage of a published file-system volume")
		}
	}
	bad := unknownID(l.externalID)
	expectRPC(ctx, l, step, methodNodeGetVolumeStats, csi.CodeNotFound, fmt.Sprintf("%s (volume_id %q)", expectUnknownVol, bad), stats(bad, path))
	none := filepath.Join(l.cfg.MountRoot, "plugintest-nothing-"+randomHex(4))
	expectRPC(ctx, l, step, methodNodeGetVolumeStats, csi.CodeNotFound, fmt.Sprintf("the spec requires NotFound when the volume does not exist at volume_path (%s)", none), stats(l.externalID, none))
	expectRPC(ctx, l, step, methodNodeGetVolumeStats, csi.CodeInvalidArgument, expectMissingField+" (NodeGetVolumeStatsRequest.volume_id)", stats("", path))
	expectRPC(ctx, l, step, methodNodeGetVolumeStats, csi.CodeInvalidArgument, expectMissingField+" (NodeGetVolumeStatsRequest.volume_path)", stats(l.externalID, ""))
}
