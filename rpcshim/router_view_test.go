package rpcshim_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/state"
)

// countingReader counts the reads of a plugin's healthy controllers.
type countingReader struct {
	state.Reader
	healthy atomic.Int32
}

func (r *countingReader) HealthyControllers(id string) (map[string]*csi.PluginInfo, error) {
	r.healthy.Add(1)
	return r.Reader.HealthyControllers(id)
}

// TestRouter_ControllerView checks that the router reads a plugin's
// controllers from the store once per change of the plugin table, not
// once per call, and that a change is seen by the very next call.
func TestRouter_ControllerView(t *testing.T) {
	c := newRTCluster(t)
	c.controller("n1", true, "")
	c.controller("n2", true, "")
	reads := &countingReader{Reader: c.store}
	r, err := rpcshim.NewRouter(rpcshim.RouterConfig{Store: reads, Transport: c.tr, NodeStatuses: c.statuses})
	must(t, err)
	ctx := context.Background()
	publish := func() string {
		t.Helper()
		resp, err := r.ControllerPublish(ctx, rtPublishRequest("", "csi-n9"))
		must(t, err)
		return resp.ControllerNodeID
	}

	steps := []struct {
		name      string
		change    func()
		wantNode  string
		wantReads int32
	}{
		{"first call reads the store", nil, "n1", 1},
		{"calls while nothing changed do not", nil, "n1", 1},
		{"a write to another table does not", func() {
			c.apply(state.UpsertAllocations{Allocations: []csi.Allocation{{ID: "a1", Namespace: "default", NodeID: "n2"}}})
		}, "n1", 1},
		{"a controller turning unhealthy does", func() { c.controller("n1", false, "disk full") }, "n2", 2},
		{"and the view is kept again", nil, "n2", 2},
		{"a controller coming back is seen at once", func() { c.apply(state.UpsertNodePlugins{NodeID: "n2"}); c.controller("n1", true, "") }, "n1", 3},
	}
	for _, s := range steps {
		if s.change != nil {
			s.change()
		}
		if got := publish(); got != s.wantNode {
			t.Errorf("%s: served by %s, want %s", s.name, got, s.wantNode)
		}
		if got := reads.healthy.Load(); got != s.wantReads {
			t.Errorf("%s: %d reads of the controllers, want %d", s.name, got, s.wantReads)
		}
	}

	// A restore takes the store back to an older state, and its lower
	// index: the router reads that state, not the view it kept.
	var snap bytes.Buffer
	must(t, c.store.Snapshot(ctx, &snap)) // n1 alone, healthy
	c.controller("n1", false, "disk full")
	c.controller("n2", true, "")
	if got := publish(); got != "n2" {
		t.Fatalf("with n1 unhealthy: served by %s, want n2", got)
	}
	must(t, c.store.Restore(ctx, &snap))
	for range 2 {
		if got := publish(); got != "n1" {
			t.Errorf("after the restore: served by %s, want n1 (healthy in the restored state)", got)
		}
	}

	// The plugin goes away: the router says so, and finds it again.
	c.apply(state.UpsertNodePlugins{NodeID: "n1"})
	if _, err := r.ControllerPublish(ctx, rtPublishRequest("", "csi-n9")); !errors.Is(err, csi.ErrNoController) {
		t.Errorf("publish with no plugin: %v, want ErrNoController", err)
	}
	c.controller("n2", true, "")
	if got := publish(); got != "n2" {
		t.Errorf("after the plugin came back: served by %s, want n2", got)
	}
}
