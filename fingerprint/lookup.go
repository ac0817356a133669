package fingerprint

import (
	"fmt"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/plugin"
)

// NodePlugin returns a client of the node service of plugin pluginID on
// this node (a node or monolith instance), and a copy of its latest
// fingerprint, nil if it has not been fingerprinted yet. When several
// allocations serve the plugin here, a healthy instance is preferred,
// then the most recently registered.
//
// The client belongs to the Manager, which closes it when the instance is
// deregistered or Run returns; calls made on it afterwards fail. Callers
// look it up again for each operation rather than keeping it.
//
// When no instance is registered the error wraps csi.ErrPluginNotFound,
// which is retryable: the plugin's allocation may be starting or
// restarting. An unhealthy instance is still returned; the caller decides
// from the info whether to call it.
func (m *Manager) NodePlugin(pluginID string) (plugin.NodeClient, *csi.PluginInfo, error) {
	inst, info := m.lookup(pluginID, csi.PluginType.HasNode)
	if inst == nil {
		return nil, nil, m.notFound(pluginID, csi.PluginTypeNode)
	}
	return inst.client, info, nil
}

// ControllerPlugin is NodePlugin for the controller service (a controller
// or monolith instance).
func (m *Manager) ControllerPlugin(pluginID string) (plugin.ControllerClient, *csi.PluginInfo, error) {
	inst, info := m.lookup(pluginID, csi.PluginType.HasController)
	if inst == nil {
		return nil, nil, m.notFound(pluginID, csi.PluginTypeController)
	}
	return inst.client, info, nil
}

// lookup picks the best instance of pluginID whose type serves: healthy
// first, then newest. It returns a copy of its info.
func (m *Manager) lookup(pluginID string, serves func(csi.PluginType) bool) (*instance, *csi.PluginInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var best *instance
	for _, inst := range m.instances {
		if inst.PluginID != pluginID || !serves(inst.Type) {
			continue
		}
		if best == nil || better(inst, best) {
			best = inst
		}
	}
	if best == nil {
		return nil, nil
	}
	return best, best.info.Copy()
}

func better(a, b *instance) bool {
	ha, hb := a.info != nil && a.info.Healthy, b.info != nil && b.info.Healthy
	if ha != hb {
		return ha
	}
	return a.seq > b.seq
}

func (m *Manager) notFound(pluginID string, t csi.PluginType) error {
	return fmt.Errorf("%w: no %s plugin %q is registered on node %q; its allocation may not have started yet, retry later",
		csi.ErrPluginNotFound, t, pluginID, m.cfg.NodeID)
}
