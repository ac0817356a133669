package health

import "fmt"

// EventKind says what an Event reports.
type EventKind int

// The kinds of events.
const (
	// EventAbnormal: a controller or node (Event.NodeID) reported the
	// volume abnormal, where it was not before.
	EventAbnormal EventKind = iota + 1
	// EventRecovered: the volume is normal again where it was abnormal.
	EventRecovered
	// EventMissing: the controller no longer has the volume.
	EventMissing
	// EventLeak: the backend has an attachment csikit has no record or
	// claim for; it has been seen for the grace period and is being
	// detached.
	EventLeak
	// EventLeakDetached: a leaked attachment was detached and its
	// record removed.
	EventLeakDetached
	// EventVanished: the backend lost an attachment csikit records;
	// the record was flagged so the next claim publishes again.
	EventVanished
)

var eventNames = [...]string{"", "abnormal", "recovered", "missing", "leak", "leak-detached", "vanished"}

func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one decision or finding of the Monitor.
type Event struct {
	Kind      EventKind
	PluginID  string
	Namespace string
	VolumeID  string
	// NodeID is the node concerned, "" for the controller's view.
	NodeID string
	// Reason is the plugin's condition message or the Monitor's reason,
	// for operators.
	Reason string
}
