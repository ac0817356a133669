package csitest_test

import (
	"slices"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
)

// healthClient starts a fake with the health knobs' capabilities and a
// csikit client for it, so that the test covers the client's reading of
// the legacy condition fields too.
func healthClient(t *testing.T) (*csitest.Plugin, *plugin.Client) {
	t.Helper()
	ctrl := allController
	ctrl.GetVolumeHealth = true
	node := allNode
	node.GetVolumeHealth = true
	p := csitest.Start(t, csitest.Config{Controller: ctrl, Node: node, VolumeStatus: csitest.StatusWithCondition})
	c, err := plugin.New(plugin.Config{Endpoint: p.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return p, c
}

func TestHealth_ControllerCondition(t *testing.T) {
	p, c := healthClient(t)
	ctx := ctxT(t)
	for _, id := range []string{"a", "b"} {
		p.AddVolume(id, 100, nil)
	}
	if !p.SetVolumeCondition("b", true, "disk lost") || p.SetVolumeCondition("zz", true, "") {
		t.Fatal("SetVolumeCondition reports the wrong existence")
	}
	got, err := c.ControllerGetVolume(ctx, &plugin.ControllerGetVolumeRequest{ExternalID: "b"})
	if err != nil || got.Status == nil || *got.Status.Condition != (plugin.VolumeCondition{Abnormal: true, Message: "disk lost"}) {
		t.Fatalf("ControllerGetVolume = %+v, %v; want the abnormal condition", got, err)
	}
	page, err := c.ListVolumes(ctx, &plugin.ListVolumesRequest{})
	if err != nil || len(page.Entries) != 2 {
		t.Fatalf("ListVolumes = %+v, %v", page, err)
	}
	if a, b := page.Entries[0].Condition, page.Entries[1].Condition; a == nil || a.Abnormal || b == nil || !b.Abnormal || b.Message != "disk lost" {
		t.Fatalf("ListVolumes conditions = %+v, %+v; want normal and abnormal", a, b)
	}
}

func TestHealth_ListVolumes_ConditionWithoutPublishedNodes(t *testing.T) {
	ctrl := allController
	ctrl.ListVolumesPublishedNodes = false
	p := csitest.Start(t, csitest.Config{Controller: ctrl, VolumeStatus: csitest.StatusWithCondition})
	c, err := plugin.New(plugin.Config{Endpoint: p.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.AddVolume("a", 1, nil)
	p.SetVolumeCondition("a", true, "slow")
	page, err := c.ListVolumes(ctxT(t), nil)
	if err != nil || len(page.Entries) != 1 || page.Entries[0].Condition == nil || !page.Entries[0].Condition.Abnormal || page.Entries[0].PublishedNodeIDs != nil {
		t.Fatalf("ListVolumes = %+v, %v; want a condition and no nodes", page, err)
	}
}

func TestHealth_NodeConditionAndUsage(t *testing.T) {
	p, c := healthClient(t)
	ctx := ctxT(t)
	p.AddVolume("a", 1000, nil)
	stage := t.TempDir()
	err := c.NodeStageVolume(ctx, &plugin.NodeStageRequest{ExternalID: "a", StagingPath: stage,
		Capability: csi.Capability{AccessMode: csi.AccessModeSingleNodeWriter, AttachmentMode: csi.AttachmentModeFileSystem}})
	if err != nil {
		t.Fatal(err)
	}
	req := &plugin.NodeVolumeStatsRequest{ExternalID: "a", VolumePath: stage, StagingPath: stage}
	got, err := c.NodeGetVolumeStats(ctx, req)
	if err != nil || got.Condition == nil || got.Condition.Abnormal || *got.Bytes != (plugin.Usage{Available: 1000, Total: 1000}) || got.Inodes != nil {
		t.Fatalf("NodeGetVolumeStats = %+v, %v; want normal, all free", got, err)
	}
	p.SetNodeVolumeCondition("a", true, "read-only")
	p.SetVolumeUsage("a", csitest.Usage{UsedBytes: 900, UsedInodes: 3, InodesTotal: 10})
	got, err = c.NodeGetVolumeStats(ctx, req)
	if err != nil || !got.Condition.Abnormal || got.Condition.Message != "read-only" ||
		*got.Bytes != (plugin.Usage{Available: 100, Total: 1000, Used: 900}) || *got.Inodes != (plugin.Usage{Available: 7, Total: 10, Used: 3}) {
		t.Fatalf("NodeGetVolumeStats = %+v, %v; want abnormal, 900 used", got, err)
	}
	p.SetCapabilities(allController, allNode) // no GetVolumeHealth: no condition
	if got, err = c.NodeGetVolumeStats(ctx, req); err != nil || got.Condition != nil {
		t.Fatalf("NodeGetVolumeStats without the capability = %+v, %v; want no condition", got, err)
	}
}

func TestHealth_AttachOutOfBandAndDrop(t *testing.T) {
	p, c := healthClient(t)
	ctx := ctxT(t)
	p.AddVolume("a", 1, nil)
	if !p.AttachOutOfBand("a", "n9") || p.AttachOutOfBand("zz", "n9") {
		t.Fatal("AttachOutOfBand reports the wrong existence")
	}
	page, err := c.ListVolumes(ctx, nil)
	if err != nil || !slices.Equal(page.Entries[0].PublishedNodeIDs, []string{"n9"}) {
		t.Fatalf("ListVolumes = %+v, %v; want the leaked node listed", page, err)
	}
	if err := c.ControllerUnpublishVolume(ctx, &plugin.ControllerUnpublishRequest{ExternalID: "a", ExternalNodeID: "n9"}); err != nil {
		t.Fatal(err)
	}
	if v, _ := p.Volume("a"); len(v.Attachments) != 0 {
		t.Fatalf("attachments after unpublish = %v", v.Attachments)
	}
	p.AttachOutOfBand("a", "n1")
	if !p.DropAttachment("a", "n1") || p.DropAttachment("a", "n1") {
		t.Fatal("DropAttachment reports the wrong existence")
	}
	got, err := c.ControllerGetVolume(ctx, &plugin.ControllerGetVolumeRequest{ExternalID: "a"})
	if err != nil || len(got.Status.PublishedNodeIDs) != 0 {
		t.Fatalf("ControllerGetVolume after drop = %+v, %v", got, err)
	}
	if v := p.Violations(); len(v) != 0 {
		t.Fatalf("violations: %v", v)
	}
}

func TestHealth_ListVolumes_Paged(t *testing.T) {
	p, c := healthClient(t)
	ctx := ctxT(t)
	for _, id := range []string{"v1", "v2", "v3", "v4", "v5", "v6", "v7"} {
		p.AddVolume(id, 1, nil)
	}
	var ids []string
	pages := 0
	for token := ""; ; {
		page, err := c.ListVolumes(ctx, &plugin.ListVolumesRequest{MaxEntries: 2, StartingToken: token})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, e := range page.Entries {
			ids = append(ids, e.Volume.ExternalID)
		}
		if token = page.NextToken; token == "" {
			break
		}
	}
	if pages != 4 || len(ids) != 7 || p.CallCount(csitest.MethodListVolumes) != 4 {
		t.Fatalf("%d pages, ids %v, %d calls; want 4 pages of 7 volumes", pages, ids, p.CallCount(csitest.MethodListVolumes))
	}
}
