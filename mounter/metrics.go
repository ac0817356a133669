package mounter

import "github.com/csikit/csikit/csi/metrics"

// mountEvent is a plugin call the Mounter counts once the node plugin
// has answered it.
type mountEvent int

const (
	eventStaged      mountEvent = iota // NodeStageVolume OK
	eventPublished                     // NodePublishVolume OK
	eventUnpublished                   // NodeUnpublishVolume OK or NotFound
	eventUnstaged                      // NodeUnstageVolume OK or NotFound
)

// key is the metric an event counts under.
func (e mountEvent) key() []string {
	switch e {
	case eventStaged:
		return metrics.MountsStaged
	case eventPublished:
		return metrics.MountsPublished
	case eventUnpublished:
		return metrics.MountsUnpublished
	default:
		return metrics.MountsUnstaged
	}
}

// count adds one to an event's counter (Config.MetricSink) for
// pluginID. The plugin ID is the only label: a node runs a handful of
// plugins, while volume and allocation IDs would make the series
// unbounded.
func (m *Mounter) count(e mountEvent, pluginID string) {
	if m.metrics == nil {
		return
	}
	m.metrics.IncrCounterWithLabels(e.key(), 1, []metrics.Label{{Name: "plugin", Value: pluginID}})
}
