package plugintest

import (
	"context"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// The controller's rows: listing, capacity, reading a volume, validating
// capabilities, names, and the codes for unknown IDs and missing fields.

const (
	methodListVolumes         = "ListVolumes"
	methodGetCapacity         = "GetCapacity"
	methodControllerGetVolume = "ControllerGetVolume"
)

var (
	needList      = needController(func(c csi.ControllerCapabilities) bool { return c.ListVolumes }, "LIST_VOLUMES")
	needCapacity  = needController(func(c csi.ControllerCapabilities) bool { return c.GetCapacity }, "GET_CAPACITY")
	needGetVolume = needController(func(c csi.ControllerCapabilities) bool { return c.GetVolume }, "GET_VOLUME")
	needPublish   = needController(func(c csi.ControllerCapabilities) bool { return c.PublishUnpublishVolume }, "PUBLISH_UNPUBLISH_VOLUME")
	needAnyCtrl   = needController(func(csi.ControllerCapabilities) bool { return true }, "")
)

// pagingVolumes is how many scratch volumes "list volumes (paging)"
// adds, so that max_entries 1 takes several pages.
const pagingVolumes = 2

var controllerChecks = []coverageCheck{
	{name: "ListVolumes", needs: needList, run: (*run).checkListVolumes},
	{name: "ListVolumes (paging)", needs: needList, run: (*run).checkListPaging},
	{name: "ListVolumes (invalid starting token)", needs: needList, run: func(l *run, ctx context.Context, step string) {
		cc, ok := l.ctrlRaw(ctx, step)
		if !ok {
			return
		}
		tok := invalidToken()
		expectRPC(ctx, l, step, methodListVolumes, csi.CodeAborted, fmt.Sprintf("the spec requires Aborted when starting_token (%q) is not one the plugin issued", tok),
			func(ctx context.Context) (*csipb.ListVolumesResponse, error) {
				return cc.ListVolumes(ctx, &csipb.ListVolumesRequest{StartingToken: tok})
			})
	}},
	{name: "GetCapacity", needs: needCapacity, run: (*run).checkGetCapacity},
	{name: "ControllerGetVolume", needs: needGetVolume, run: (*run).checkGetVolume},
	{name: "ValidateVolumeCapabilities", needs: needAnyCtrl, run: (*run).checkValidate},
	{name: "CreateVolume (128-byte name)", needs: needCreate, run: func(l *run, ctx context.Context, step string) {
		name := longName(l.name+"-", 128)
		v, err := l.scratch(ctx, step, name[len(l.name)+1:], nil)
		if err != nil {
			l.expectCode(ctx, step, methodCreateVolume, err, csi.CodeOK, "the spec recommends that a plugin take names of at least 128 bytes; this one is 128")
			return
		}
		l.dropScratch(ctx, step, v.GetVolumeId())
	}},
	{name: "DeleteVolume (errors)", needs: needCreate, run: func(l *run, ctx context.Context, step string) {
		cc, ok := l.ctrlRaw(ctx, step)
		if !ok {
			return
		}
		id := unknownID(l.externalID)
		callOK(ctx, l, step, methodDeleteVolume, fmt.Sprintf("the spec requires OK from DeleteVolume of a volume that does not exist (volume_id %q)", id),
			func(ctx context.Context) (*csipb.DeleteVolumeResponse, error) {
				return cc.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id, Secrets: l.cfg.Secrets})
			})
		expectRPC(ctx, l, step, methodDeleteVolume, csi.CodeInvalidArgument, expectMissingField+" (DeleteVolumeRequest.volume_id)",
			func(ctx context.Context) (*csipb.DeleteVolumeResponse, error) {
				return cc.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{Secrets: l.cfg.Secrets})
			})
	}},
	{name: "ControllerPublishVolume (errors)", needs: needPublish, run: (*run).checkPublishErrors},
	{name: "ControllerUnpublishVolume (errors)", needs: needPublish, run: (*run).checkUnpublishErrors},
	{name: "ControllerPublishVolume (attach limit)", needs: needAttachLimit, run: (*run).checkAttachLimit},
}

// checkListVolumes requires the run's volume in the list.
func (l *run) checkListVolumes(ctx context.Context, step string) {
	ids, ok := l.listAll(ctx, step, 0)
	if ok && !ids[l.externalID] {
		l.wrong(ctx, step, methodListVolumes, fmt.Sprintf("without volume_id %q", l.externalID),
			"the spec requires ListVolumes to list every volume; this one "+l.volumeOrigin())
	}
}

// checkListPaging adds volumes, then pages through them one at a time:
// each page holds at most max_entries, and the pages together list
// every volume once.
func (l *run) checkListPaging(ctx context.Context, step string) {
	var made []string
	if l.ctrlCaps.CreateDeleteVolume {
		for i := range pagingVolumes {
			v, err := l.scratch(ctx, step, fmt.Sprintf("page-%d", i), nil)
			if err != nil {
				l.expectCode(ctx, step, methodCreateVolume, err, csi.CodeOK, "the spec requires OK from CreateVolume with the run's parameters")
				return
			}
			made = append(made, v.GetVolumeId())
		}
	}
	defer func() {
		for _, id := range made {
			l.dropScratch(ctx, step, id)
		}
	}()
	all, ok := l.listAll(ctx, step, 0)
	if !ok {
		return
	}
	paged, ok := l.listAll(ctx, step, 1)
	if !ok {
		return
	}
	for _, id := range append(made, l.externalID) {
		if !paged[id] {
			l.wrong(ctx, step, methodListVolumes, fmt.Sprintf("without volume_id %q on any page of max_entries 1", id),
				"the spec requires the pages, followed by next_token, to list every volume")
		}
	}
	if len(paged) < len(all)-pagingVolumes {
		l.wrong(ctx, step, methodListVolumes, fmt.Sprintf("%d volumes on pages of 1, %d in one list", len(paged), len(all)),
			"the spec requires the pages to list the same volumes as one list")
	}
}

// listAll lists every volume, max entries a page (0: no limit), and
// checks each page's size and that no volume comes twice.
func (l *run) listAll(ctx context.Context, step string, max int32) (map[string]bool, bool) {
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return nil, false
	}
	ids := map[string]bool{}
	tok := ""
	for page := 0; page < 10000; page++ {
		resp, ok := callOK(ctx, l, step, methodListVolumes, fmt.Sprintf("the spec requires OK from ListVolumes (max_entries %d, starting_token %q from the previous page)", max, tok),
			func(ctx context.Context) (*csipb.ListVolumesResponse, error) {
				return cc.ListVolumes(ctx, &csipb.ListVolumesRequest{MaxEntries: max, StartingToken: tok})
			})
		if !ok {
			return nil, false
		}
		if max > 0 && len(resp.GetEntries()) > int(max) {
			l.wrong(ctx, step, methodListVolumes, fmt.Sprintf("with %d entries", len(resp.GetEntries())), fmt.Sprintf("the spec requires at most max_entries (%d) entries", max))
			return nil, false
		}
		for _, e := range resp.GetEntries() {
			id := e.GetVolume().GetVolumeId()
			if ids[id] {
				l.wrong(ctx, step, methodListVolumes, fmt.Sprintf("with volume_id %q twice", id), "the spec requires each volume listed once across the pages")
				return nil, false
			}
			ids[id] = true
		}
		if tok = resp.GetNextToken(); tok == "" {
			return ids, true
		}
	}
	l.wrong(ctx, step, methodListVolumes, "with a next_token after 10000 pages", "the spec requires an empty next_token on the last page")
	return nil, false
}

// checkGetCapacity asks for the capacity for the run's capability and
// parameters, and with no arguments at all.
func (l *run) checkGetCapacity(ctx context.Context, step string) {
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return
	}
	for _, req := range []*csipb.GetCapacityRequest{
		{VolumeCapabilities: []*csipb.VolumeCapability{l.capPB()}, Parameters: l.cfg.Parameters},
		{},
	} {
		resp, ok := callOK(ctx, l, step, methodGetCapacity, "the spec requires OK from GetCapacity of an advertised GET_CAPACITY, with or without capabilities and parameters",
			func(ctx context.Context) (*csipb.GetCapacityResponse, error) { return cc.GetCapacity(ctx, req) })
		if ok && resp.GetAvailableCapacity() < 0 {
			l.wrong(ctx, step, methodGetCapacity, fmt.Sprintf("with available_capacity %d", resp.GetAvailableCapacity()), "the spec requires available_capacity ≥ 0")
		}
	}
}

// checkGetVolume reads the run's volume, an unknown one and one without
// an ID.
func (l *run) checkGetVolume(ctx context.Context, step string) {
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return
	}
	resp, ok := callOK(ctx, l, step, methodControllerGetVolume, fmt.Sprintf("the spec requires OK from ControllerGetVolume of volume %q, which %s", l.externalID, l.volumeOrigin()),
		func(ctx context.Context) (*csipb.ControllerGetVolumeResponse, error) {
			return cc.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: l.externalID})
		})
	if ok && resp.GetVolume().GetVolumeId() != l.externalID {
		l.wrong(ctx, step, methodControllerGetVolume, fmt.Sprintf("with volume_id %q", resp.GetVolume().GetVolumeId()), fmt.Sprintf("the spec requires the volume asked for (%q)", l.externalID))
	}
	id := unknownID(l.externalID)
	expectRPC(ctx, l, step, methodControllerGetVolume, csi.CodeNotFound, fmt.Sprintf("%s (volume_id %q)", expectUnknownVol, id),
		func(ctx context.Context) (*csipb.ControllerGetVolumeResponse, error) {
			return cc.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: id})
		})
	expectRPC(ctx, l, step, methodControllerGetVolume, csi.CodeInvalidArgument, expectMissingField+" (ControllerGetVolumeRequest.volume_id)",
		func(ctx context.Context) (*csipb.ControllerGetVolumeResponse, error) {
			return cc.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{})
		})
}

// checkValidate confirms the run's capability and sends the requests
// the spec requires refused.
func (l *run) checkValidate(ctx context.Context, step string) {
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return
	}
	req := func(id string, caps ...*csipb.VolumeCapability) *csipb.ValidateVolumeCapabilitiesRequest {
		return &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: caps, VolumeContext: l.volumeContext(), Parameters: l.cfg.Parameters, Secrets: l.cfg.Secrets}
	}
	validate := func(r *csipb.ValidateVolumeCapabilitiesRequest) func(context.Context) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
		return func(ctx context.Context) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
			return cc.ValidateVolumeCapabilities(ctx, r)
		}
	}
	resp, ok := callOK(ctx, l, step, methodValidate, l.expectOK(methodValidate, csi.CodeOK), validate(req(l.externalID, l.capPB())))
	if ok && resp.GetConfirmed() == nil {
		l.wrong(ctx, step, methodValidate, fmt.Sprintf("without confirming %s (message %q)", l.cfg.Capability, resp.GetMessage()),
			"the volume was made with that capability (or given for it), so the spec requires it confirmed")
	}
	id := unknownID(l.externalID)
	expectRPC(ctx, l, step, methodValidate, csi.CodeNotFound, fmt.Sprintf("%s (volume_id %q)", expectUnknownVol, id), validate(req(id, l.capPB())))
	expectRPC(ctx, l, step, methodValidate, csi.CodeInvalidArgument, expectMissingField+" (ValidateVolumeCapabilitiesRequest.volume_id)", validate(req("", l.capPB())))
	expectRPC(ctx, l, step, methodValidate, csi.CodeInvalidArgument, expectMissingField+" (ValidateVolumeCapabilitiesRequest.volume_capabilities)", validate(req(l.externalID)))
}

// volumeContext is the context of the run's volume: what CreateVolume
// returned, or Config.VolumeContext.
func (l *run) volumeContext() map[string]string {
	if c, ok := l.calls.last(0, methodCreateVolume, nil); ok {
		if v, ok := c.Result.(*plugin.Volume); ok && v != nil {
			return v.Context
		}
	}
	return l.cfg.VolumeContext
}

// checkPublishErrors sends ControllerPublishVolume requests the spec
// requires refused, beyond those the claim step sends. An unknown
// node_id is not among them: a controller need not know every node.
func (l *run) checkPublishErrors(ctx context.Context, step string) {
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return
	}
	req := func(vol, node string, vc *csipb.VolumeCapability) func(context.Context) (*csipb.ControllerPublishVolumeResponse, error) {
		return func(ctx context.Context) (*csipb.ControllerPublishVolumeResponse, error) {
			return cc.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: node, VolumeCapability: vc, Secrets: l.cfg.Secrets, VolumeContext: l.volumeContext()})
		}
	}
	expectRPC(ctx, l, step, methodControllerPublish, csi.CodeInvalidArgument, expectMissingField+" (ControllerPublishVolumeRequest.volume_id)", req("", l.csiNode, l.capPB()))
	expectRPC(ctx, l, step, methodControllerPublish, csi.CodeInvalidArgument, expectMissingField+" (ControllerPublishVolumeRequest.volume_capability)", req(l.externalID, l.csiNode, nil))
}

// checkUnpublishErrors: a volume that does not exist is already
// unpublished (OK or NotFound), and volume_id is required.
func (l *run) checkUnpublishErrors(ctx context.Context, step string) {
	cc, ok := l.ctrlRaw(ctx, step)
	if !ok {
		return
	}
	id := unknownID(l.externalID)
	_, err := retry(ctx, func(ctx context.Context) (*csipb.ControllerUnpublishVolumeResponse, error) {
		return cc.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: l.csiNode, Secrets: l.cfg.Secrets})
	})
	if err != nil && status.Code(err) != codes.NotFound {
		l.expectCode(ctx, step, methodControllerUnpublish, err, csi.CodeOK, fmt.Sprintf("the spec requires OK (or NotFound) from ControllerUnpublishVolume of a volume that does not exist (volume_id %q): it is unpublished", id))
	}
	expectRPC(ctx, l, step, methodControllerUnpublish, csi.CodeInvalidArgument, expectMissingField+" (ControllerUnpublishVolumeRequest.volume_id)",
		func(ctx context.Context) (*csipb.ControllerUnpublishVolumeResponse, error) {
			return cc.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{NodeId: l.csiNode, Secrets: l.cfg.Secrets})
		})
}
