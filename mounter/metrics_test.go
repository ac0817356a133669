package mounter_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/metrics/metricstest"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/mounter"
)

// TestMounter_MetricSink counts the stages, publications and teardowns
// the plugin answered: one stage for three publications, nothing for a
// repeated mount or a failed call, and the unstage with the last
// unpublish.
func TestMounter_MetricSink(t *testing.T) {
	e := newEnv(t, stageCaps)
	e.volume("vol1")
	rec := metricstest.New()
	m, err := mounter.New(mounter.Config{Root: e.root, StateDir: e.state, Plugins: e.reg, MetricSink: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	plugin := metrics.Label{Name: "plugin", Value: testPlugin}
	want := func(when string, staged, published, unpublished, unstaged float64) {
		t.Helper()
		for key, n := range map[string]float64{
			metricstest.Name(metrics.MountsStaged, plugin):      staged,
			metricstest.Name(metrics.MountsPublished, plugin):   published,
			metricstest.Name(metrics.MountsUnpublished, plugin): unpublished,
			metricstest.Name(metrics.MountsUnstaged, plugin):    unstaged,
		} {
			if got := rec.Counter(key); got != n {
				t.Errorf("%s: %s = %v, want %v; recorded %v", when, key, got, n, rec.Names())
			}
		}
	}

	e.p.FailNext(csitest.MethodNodeStageVolume, codes.Internal, 1)
	if _, err := m.MountVolume(context.Background(), mountReq("vol1", "a1")); err == nil {
		t.Fatal("mount with a failing NodeStageVolume succeeded")
	}
	want("after a failed stage", 0, 0, 0, 0)
	e.p.FailNext(csitest.MethodNodePublishVolume, codes.Internal, 1)
	if _, err := m.MountVolume(context.Background(), mountReq("vol1", "a1")); err == nil {
		t.Fatal("mount with a failing NodePublishVolume succeeded")
	}
	want("after a failed publish", 1, 0, 0, 0)
	for _, a := range []string{"a1", "a2", "a3", "a2"} {
		mustMount(t, m, mountReq("vol1", a))
	}
	want("after three mounts and a repeat", 1, 3, 0, 0)
	e.p.FailNext(csitest.MethodNodeUnpublishVolume, codes.Internal, 1)
	if err := m.UnmountVolume(context.Background(), unmountReq("vol1", "a1")); err == nil {
		t.Fatal("unmount with a failing NodeUnpublishVolume succeeded")
	}
	want("after a failed unpublish", 1, 3, 0, 0)
	for _, a := range []string{"a1", "a2", "a3", "a3"} {
		mustUnmount(t, m, unmountReq("vol1", a))
	}
	want("after the unmounts", 1, 3, 3, 1)
}
