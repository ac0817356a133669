package mounter

import "github.com/csikit/csikit/csi/metrics"

// count adds one to the counter key of Config.MetricSink
// (metrics.MountsStaged and its kin) for pluginID, once the node plugin
// has answered the call it counts. The plugin ID is the only label: a
// node runs a handful of plugins, while volume and allocation IDs would
// make the series unbounded.
func (m *Mounter) count(key []string, pluginID string) {
	if m.metrics == nil {
		return
	}
	m.metrics.IncrCounterWithLabels(key, 1, []metrics.Label{{Name: "plugin", Value: pluginID}})
}
