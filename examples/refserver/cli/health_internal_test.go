package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/csikit/csikit/state"
)

func TestHealthRows(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	h := &state.VolumeHealth{
		Namespace: "default", VolumeID: "data",
		Condition: &state.Condition{Abnormal: true, Message: "replica lost"}, SeenAt: now.Add(-time.Minute),
		Nodes: map[string]*state.NodeHealth{
			"node-2": {Condition: &state.Condition{}, Usage: state.Usage{BytesUsed: 3 << 30, BytesTotal: 4 << 30, InodesUsed: 5, InodesTotal: 10}, SeenAt: now},
		},
	}
	rows := healthRows(h, now)
	if len(rows) != 2 {
		t.Fatalf("rows = %+v", rows)
	}
	if r := rows[0]; r.where != "controller" || r.condition != "abnormal: replica lost" || r.since != "1m0s ago" {
		t.Errorf("controller row = %+v", r)
	}
	if r := rows[1]; r.where != "node node-2" || r.condition != "normal" || !strings.Contains(r.usage, "(75%)") || !strings.Contains(r.usage, "inodes 5 of 10") {
		t.Errorf("node row = %+v", r)
	}
	h.Missing = true
	if r := healthRows(h, now)[0]; r.condition != "missing on the backend" {
		t.Errorf("missing row = %+v", r)
	}
}
