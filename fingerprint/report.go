package fingerprint

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
)

// reportLoop is the one goroutine that calls Config.Report while Run
// runs. It reports whenever the node's list differs from the last one
// delivered, so changes that happen while a report is in flight or being
// retried are folded into the next one.
func (m *Manager) reportLoop(ctx context.Context) {
	failures := 0
	for {
		m.mu.Lock()
		list := m.snapshotLocked()
		same := sameList(list, m.delivered)
		m.mu.Unlock()

		if same {
			failures = 0
			select {
			case <-ctx.Done():
				return
			case <-m.changed:
				continue
			}
		}
		m.mu.Lock()
		m.attempted = list
		m.mu.Unlock()
		if err := m.cfg.Report(ctx, copyList(list)); err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			d := m.delay(failures)
			m.logger.Warn("reporting plugins failed; will retry", "node_id", m.cfg.NodeID, "error", err, "next", d)
			if clock.Sleep(ctx, m.clock, d) != nil {
				return
			}
			continue
		}
		failures = 0
		m.mu.Lock()
		m.delivered = list
		m.dropDeliveredLocked()
		m.mu.Unlock()
	}
}

// snapshotLocked returns the list to report, sorted by plugin and
// allocation: the latest fingerprint of every instance that has one, and
// the final fingerprint of each deregistered instance that the host still
// knows as alive. A deregistered instance the host never heard of is
// dropped here: there is nothing to take back.
func (m *Manager) snapshotLocked() []*csi.PluginInfo {
	list := make([]*csi.PluginInfo, 0, len(m.instances)+len(m.leaving))
	for _, inst := range m.instances {
		if inst.info != nil {
			list = append(list, inst.info)
		}
	}
	kept := m.leaving[:0]
	for _, inst := range m.leaving {
		if indexOf(m.delivered, inst.key) >= 0 {
			list = append(list, inst.info)
			kept = append(kept, inst)
		}
	}
	clear(m.leaving[len(kept):])
	m.leaving = kept
	slices.SortFunc(list, func(a, b *csi.PluginInfo) int {
		ka, kb := keyOf(a), keyOf(b)
		switch {
		case ka.less(kb):
			return -1
		case kb.less(ka):
			return 1
		}
		return 0
	})
	return list
}

// dropDeliveredLocked forgets the deregistered instances whose final
// fingerprint was just delivered, so that the next report removes them.
func (m *Manager) dropDeliveredLocked() {
	kept := m.leaving[:0]
	for _, inst := range m.leaving {
		if i := indexOf(m.delivered, inst.key); i < 0 || m.delivered[i] != inst.info {
			kept = append(kept, inst)
		}
	}
	clear(m.leaving[len(kept):])
	m.leaving = kept
}

// finalReports tells the host, after Run's ctx ended, that every plugin
// it may know from this node is unhealthy, then that none is left. That
// covers the last list the host accepted and the last one handed to it:
// a report that failed (a timeout, a lost reply) may still have been
// applied, and leaving it would keep a stopped plugin healthy there.
func (m *Manager) finalReports(ctx context.Context) {
	m.mu.Lock()
	last := slices.Clone(m.delivered)
	for _, info := range m.attempted {
		if indexOf(last, keyOf(info)) < 0 {
			last = append(last, info)
		}
	}
	m.mu.Unlock()
	if len(last) == 0 {
		return
	}
	now := m.clock.Now()
	final := copyList(last)
	for _, info := range final {
		info.Healthy = false
		info.HealthDescription = "plugin manager of node " + m.cfg.NodeID + " stopped"
		info.UpdateTime = now
	}
	for _, list := range [][]*csi.PluginInfo{final, {}} {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.FinalReportTimeout)
		err := m.cfg.Report(rctx, list)
		cancel()
		if err != nil {
			m.logger.Warn("final plugin report failed", "node_id", m.cfg.NodeID, "plugins", len(list), "error", err)
		}
	}
}

func keyOf(info *csi.PluginInfo) instanceKey {
	return instanceKey{info.PluginID, info.AllocationID}
}

func indexOf(list []*csi.PluginInfo, key instanceKey) int {
	return slices.IndexFunc(list, func(info *csi.PluginInfo) bool { return keyOf(info) == key })
}

// sameList compares two sorted lists with SameAs.
func sameList(a, b []*csi.PluginInfo) bool {
	return slices.EqualFunc(a, b, func(x, y *csi.PluginInfo) bool { return x.SameAs(y) })
}

func copyList(list []*csi.PluginInfo) []*csi.PluginInfo {
	out := make([]*csi.PluginInfo, len(list))
	for i, info := range list {
		out[i] = info.Copy()
	}
	return out
}

func socketExists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
