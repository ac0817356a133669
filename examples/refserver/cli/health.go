package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/csikit/csikit/state"
)

// volumeHealth lists the volumes a plugin reported abnormal or the
// backend no longer has.
func (e *env) volumeHealth(ctx context.Context, args []string) int {
	c := e.newCommand("volume health", "", "Lists the volumes the health monitor found abnormal, or missing on the backend, with where and since when.",
		"refserver volume health")
	all := c.fs.Bool("all", false, "list every volume with a health record, not only the abnormal ones")
	code := ExitOK
	if !c.parse(args, 0, 0, &code) {
		return code
	}
	cl, ctx, done, err := c.client(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer done()
	hs, err := cl.Healths(ctx)
	if err != nil {
		return c.fail(err)
	}
	if !*all {
		hs = slices.DeleteFunc(hs, func(h *state.VolumeHealth) bool { return !h.Abnormal() })
	}
	if *c.json {
		return c.printJSON(hs)
	}
	if len(hs) == 0 {
		fmt.Fprintln(e.stdout, "No abnormal volumes")
		return ExitOK
	}
	now := time.Now()
	t := newTable(e.stdout, "VOLUME", "NAMESPACE", "WHERE", "CONDITION", "SINCE")
	for _, h := range hs {
		for _, r := range healthRows(h, now) {
			t.row(h.VolumeID, h.Namespace, r.where, r.condition, r.since)
		}
	}
	t.flush()
	return ExitOK
}

type healthRow struct{ where, condition, usage, since string }

// healthRows is a record as one row for the controller and one per node.
func healthRows(h *state.VolumeHealth, now time.Time) []healthRow {
	var rows []healthRow
	if h.Missing || h.Condition != nil {
		cond := conditionText(h.Condition)
		if h.Missing {
			cond = "missing on the backend"
		}
		rows = append(rows, healthRow{where: "controller", condition: cond, usage: "-", since: ago(h.SeenAt, now)})
	}
	for _, node := range slices.Sorted(maps.Keys(h.Nodes)) {
		n := h.Nodes[node]
		rows = append(rows, healthRow{where: "node " + node, condition: conditionText(n.Condition), usage: usageText(n.Usage), since: ago(n.SeenAt, now)})
	}
	return rows
}

func conditionText(c *state.Condition) string {
	switch {
	case c == nil:
		return "-"
	case c.Abnormal && c.Message != "":
		return "abnormal: " + c.Message
	case c.Abnormal:
		return "abnormal"
	}
	return "normal"
}

func usageText(u state.Usage) string {
	if u.BytesTotal == 0 {
		return "-"
	}
	s := fmt.Sprintf("%s of %s (%d%%)", bytesText(u.BytesUsed), bytesText(u.BytesTotal), u.BytesUsed*100/u.BytesTotal)
	if u.InodesTotal > 0 {
		s += fmt.Sprintf(", inodes %d of %d", u.InodesUsed, u.InodesTotal)
	}
	return s
}

// printHealth adds a volume's health to volume status.
func (e *env) printHealth(h *state.VolumeHealth) {
	if h == nil {
		fmt.Fprintln(e.stdout, "Health: nothing reported (normal, or not checked yet)")
		return
	}
	t := newTable(e.stdout, "HEALTH", "CONDITION", "USAGE", "LAST CHECK")
	for _, r := range healthRows(h, time.Now()) {
		t.row(r.where, r.condition, r.usage, r.since)
	}
	t.flush()
}
