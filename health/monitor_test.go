package health_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/metrics/metricstest"
	"github.com/csikit/csikit/csi/plugin"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/health"
	"github.com/csikit/csikit/state"
)

var (
	getVolume  = csi.ControllerCapabilities{PublishUnpublishVolume: true, GetVolume: true, GetVolumeHealth: true}
	listVolume = csi.ControllerCapabilities{PublishUnpublishVolume: true, ListVolumes: true, ListVolumesPublishedNodes: true, GetVolumeHealth: true}
	statsNode  = csi.NodeCapabilities{StageUnstageVolume: true, GetVolumeStats: true, GetVolumeHealth: true}
)

func TestMonitor_Pass_ControllerAbnormal(t *testing.T) {
	for name, caps := range map[string]csi.ControllerCapabilities{"GetVolume": getVolume, "ListVolumes": listVolume} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, options{ctrl: caps})
			h.volume("v1")
			h.pass()
			if got := h.health("v1"); got == nil || got.Condition == nil || got.Condition.Abnormal || got.Abnormal() {
				t.Fatalf("after a normal report: %+v", got)
			}
			h.fake.SetVolumeCondition("ext-v1", true, "disk lost")
			h.clock.Advance(1)
			h.pass()
			got := h.health("v1")
			if !got.Abnormal() || got.Condition.Message != "disk lost" || !got.SeenAt.Equal(t0.Add(1)) {
				t.Fatalf("after an abnormal report: %+v", got)
			}
			if evs := h.drain(); len(evs) != 1 || evs[0].Kind != health.EventAbnormal || evs[0].Reason != "disk lost" {
				t.Fatalf("events = %s", kinds(evs))
			}
			h.fake.SetVolumeCondition("ext-v1", false, "")
			h.pass()
			if evs := h.drain(); len(evs) != 1 || evs[0].Kind != health.EventRecovered || h.health("v1").Abnormal() {
				t.Fatalf("events = %s, health %+v", kinds(evs), h.health("v1"))
			}
			if !strings.Contains(h.logs.String(), "volume=v1") || !strings.Contains(h.logs.String(), "reason=\"disk lost\"") {
				t.Errorf("decision not logged with volume and reason:\n%s", h.logs)
			}
		})
	}
}

func TestMonitor_Pass_NodeAbnormalAndUsage(t *testing.T) {
	h := newHarness(t, options{ctrl: getVolume, node: statsNode})
	h.volume("v1")
	h.claim("v1", "a1", "n1")
	h.volume("v2")
	h.claim("v2", "a2", "n2") // n2's node answers NotFound: no report
	stage := t.TempDir()
	if err := h.client.NodeStageVolume(context.Background(), &plugin.NodeStageRequest{ExternalID: "ext-v1", StagingPath: stage, Capability: fsSNW}); err != nil {
		t.Fatal(err)
	}
	h.paths["ext-v1"] = stage
	h.fake.SetNodeVolumeCondition("ext-v1", true, "read-only file system")
	h.fake.SetVolumeUsage("ext-v1", csitest.Usage{UsedBytes: 95, UsedInodes: 4, InodesTotal: 8})
	h.pass()
	got := h.health("v1")
	n1 := got.Nodes["n1"]
	if n1 == nil || !n1.Condition.Abnormal || n1.Usage != (state.Usage{BytesUsed: 95, BytesTotal: 100, BytesAvailable: 5, InodesUsed: 4, InodesTotal: 8, InodesAvailable: 4}) {
		t.Fatalf("node report = %+v", n1)
	}
	if !got.Abnormal() || h.health("v2").Nodes != nil {
		t.Errorf("health = %+v, v2 %+v", got, h.health("v2"))
	}
	evs := h.drain()
	if len(evs) != 1 || evs[0].Kind != health.EventAbnormal || evs[0].NodeID != "n1" {
		t.Fatalf("events = %s", kinds(evs))
	}
	// Once the volume is gone from the node, its report goes.
	delete(h.paths, "ext-v1")
	h.pass()
	if got := h.health("v1"); got.Nodes != nil {
		t.Errorf("node report kept after the volume left the node: %+v", got.Nodes)
	}
}

func TestMonitor_Pass_NothingWrittenWhenNothingChanged(t *testing.T) {
	h := newHarness(t, options{ctrl: listVolume, node: statsNode})
	for _, id := range []string{"v1", "v2", "v3"} {
		h.volume(id)
	}
	h.claim("v1", "a1", "n1")
	h.pass()
	before := h.applier.total()
	if before == 0 {
		t.Fatal("the first pass wrote nothing")
	}
	idx, _ := h.store.Index(state.TableVolumes)
	h.clock.Advance(grace * 3)
	h.pass()
	h.pass()
	if n := h.applier.total(); n != before {
		t.Errorf("%d commands applied by passes that found nothing new", n-before)
	}
	if again, _ := h.store.Index(state.TableVolumes); again != idx {
		t.Errorf("TableVolumes index moved from %d to %d", idx, again)
	}
}

func TestMonitor_Pass_PagesListVolumes(t *testing.T) {
	h := newHarness(t, options{ctrl: listVolume, pageSize: 2})
	for _, id := range []string{"v1", "v2", "v3", "v4", "v5", "v6", "v7"} {
		h.volume(id)
	}
	h.fake.SetVolumeCondition("ext-v7", true, "last page")
	h.pass()
	if n := h.fake.CallCount(csitest.MethodListVolumes); n != 4 {
		t.Errorf("%d ListVolumes calls for 7 volumes in pages of 2, want 4", n)
	}
	for _, c := range h.fake.CallsTo(csitest.MethodListVolumes) {
		if c.Request.(*csipb.ListVolumesRequest).GetMaxEntries() != 2 {
			t.Errorf("ListVolumes request %s, want max_entries 2", c.Request)
		}
	}
	if n := h.fake.CallCount(csitest.MethodControllerGetVolume); n != 0 {
		t.Errorf("%d ControllerGetVolume calls; ListVolumes is advertised", n)
	}
	all, _ := h.store.Healths()
	if len(all) != 7 || !h.health("v7").Abnormal() || h.health("v6").Abnormal() {
		t.Errorf("records = %d, v7 %+v", len(all), h.health("v7"))
	}
}

func TestMonitor_Pass_Missing(t *testing.T) {
	for name, caps := range map[string]csi.ControllerCapabilities{"GetVolume": getVolume, "ListVolumes": listVolume} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, options{ctrl: caps})
			h.volume("v1")
			h.volume("v2")
			h.fake.RemoveVolume("ext-v2")
			h.pass()
			if got := h.health("v2"); got == nil || !got.Missing {
				t.Fatalf("v2 health = %+v, want missing", got)
			}
			if h.health("v1").Missing {
				t.Error("v1 marked missing")
			}
			if evs := h.drain(); len(evs) != 1 || evs[0].Kind != health.EventMissing || evs[0].VolumeID != "v2" {
				t.Errorf("events = %s", kinds(evs))
			}
		})
	}
}

func TestMonitor_Pass_FailedListingMarksNothingMissing(t *testing.T) {
	h := newHarness(t, options{ctrl: listVolume, pageSize: 1})
	h.volume("v1")
	h.volume("v2")
	h.volume("v3")
	// The second page fails: v2 is on it, so it is not known missing.
	h.fake.SetHook(csitest.MethodListVolumes, func(_ context.Context, _ string, req any) error {
		if req.(*csipb.ListVolumesRequest).GetStartingToken() != "" {
			return status.Error(codes.Unavailable, "backend busy")
		}
		return nil
	})
	h.fake.RemoveVolume("ext-v3")
	h.pass()
	if all, _ := h.store.Healths(); len(all) != 0 {
		t.Errorf("a listing cut short wrote %+v", all)
	}
}

func TestNew_Invalid(t *testing.T) {
	st, _ := state.NewMemStore(state.Config{})
	for name, cfg := range map[string]health.Config{
		"no store":    {Applier: state.NewLocalApplier(st), Controllers: health.ControllerFuncs{}},
		"no applier":  {Store: st, Controllers: health.ControllerFuncs{}},
		"no ctrls":    {Store: st, Applier: state.NewLocalApplier(st)},
		"negative":    {Store: st, Applier: state.NewLocalApplier(st), Controllers: health.ControllerFuncs{}, Parallelism: -1},
		"neg. grace":  {Store: st, Applier: state.NewLocalApplier(st), Controllers: health.ControllerFuncs{}, LeakGrace: -1},
		"neg. paging": {Store: st, Applier: state.NewLocalApplier(st), Controllers: health.ControllerFuncs{}, PageSize: -1},
	} {
		if _, err := health.New(cfg); !errors.Is(err, csi.ErrInvalidRequest) {
			t.Errorf("%s: New = %v, want ErrInvalidRequest", name, err)
		}
	}
}

func TestMonitor_Pass_Metrics(t *testing.T) {
	rec := metricstest.New()
	h := newHarness(t, options{ctrl: listVolume, sink: rec})
	h.volume("v1")
	h.volume("v2")
	h.fake.SetVolumeCondition("ext-v1", true, "bad")
	h.pass()
	if got := rec.Counter(metricstest.Name(metrics.HealthResults, metrics.Label{Name: "result", Value: "abnormal"})); got != 1 {
		t.Errorf("abnormal results = %v; names %v", got, rec.Names())
	}
	if got := rec.Counter(metricstest.Name(metrics.HealthPasses, metrics.Label{Name: "result", Value: "ok"})); got != 1 {
		t.Errorf("passes = %v", got)
	}
	if g, ok := rec.Gauge(metricstest.Name(metrics.HealthAbnormal)); !ok || g != 1 {
		t.Errorf("abnormal gauge = %v, %v", g, ok)
	}
	if rec.Samples(metricstest.Name(metrics.HealthPassLatency)) != 1 {
		t.Error("no pass latency sample")
	}
}
