// expansion.go owns the commands of a volume's expansion and of its
// mutable parameters (ControllerModifyVolume): the written intent, the
// controller's answer, each node's NodeExpandVolume, and the errors met
// on the way. They are fields of the volume row (csi.Volume.Expansion,
// MutableParameters, ModifyingParameters), so snapshots and the raft
// FSM carry them with the volume.
//
// Rules a reader must know:
//
//   - RequestExpansion is written before any plugin call. A repeated
//     request for the same range (pending, or done with the capacity
//     reached) is a no-op, so a retried or resumed
//     ExpandVolume never starts a second expansion; another range while
//     one is pending is refused (csi.ErrVolumeInUse, Retryable).
//   - The nodes that must run NodeExpandVolume are fixed when the node
//     step starts (csi.Volume.ExpansionNodes); a node that stages the
//     volume later is added by RecordNodeExpansion itself, which
//     accepts any node.
//   - Every record is idempotent: recording a step already recorded
//     changes nothing.
//   - Capacity only grows: a report below the recorded capacity keeps
//     the recorded one.

package state

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/csikit/csikit/csi"
)

// The kinds of the expansion and modify commands.
const (
	KindRequestExpansion          Kind = "request-expansion"
	KindRecordControllerExpansion Kind = "record-controller-expansion"
	KindRecordNodeExpansion       Kind = "record-node-expansion"
	KindRecordExpansionError      Kind = "record-expansion-error"
	KindRequestModify             Kind = "request-modify"
	KindRecordModify              Kind = "record-modify"
)

// RequestExpansion writes the intent of an expansion to at least
// RequiredBytes (and at most LimitBytes, 0 for no limit). Controller
// says a ControllerExpandVolume comes first; without it the expansion
// is node-only and its node step starts at once on the volume's
// expansion nodes.
//
// Refused: a volume being created (csi.ErrVolumeInUse), RequiredBytes
// not positive or above a set limit (csi.ErrInvalidRequest), a range
// below the recorded capacity (csi.ErrShrinkRefused), and another range
// while an expansion is pending (csi.ErrVolumeInUse).
type RequestExpansion struct {
	Namespace     string
	VolumeID      string
	RequiredBytes int64
	LimitBytes    int64 `json:",omitempty"`
	Controller    bool  `json:",omitempty"`
	RequestedAt   time.Time
}

// RecordControllerExpansion records ControllerExpandVolume's answer:
// the new capacity and whether a node step follows. On a volume whose
// expansion is past its controller step it changes nothing.
type RecordControllerExpansion struct {
	Namespace             string
	VolumeID              string
	Capacity              int64
	NodeExpansionRequired bool `json:",omitempty"`
}

// RecordNodeExpansion records that NodeExpandVolume succeeded on NodeID
// (or that the node holds no mount of the volume, Capacity 0). The last
// pending node completes the expansion. A node that was not pending (it
// staged the volume after the node step started) joins DoneNodes.
// NotMounted says the node holds no mount of the volume: it leaves the
// pending nodes without joining DoneNodes, so that a later stage there
// still runs the node step.
type RecordNodeExpansion struct {
	Namespace  string
	VolumeID   string
	NodeID     string
	Capacity   int64 `json:",omitempty"`
	NotMounted bool  `json:",omitempty"`
}

// RecordExpansionError sets the pending expansion's LastError (cut to
// MaxClaimError bytes). Final drops the intent: a controller step the
// plugin refused for good leaves the volume as it was.
type RecordExpansionError struct {
	Namespace string
	VolumeID  string
	Error     string
	Final     bool `json:",omitempty"`
}

// RequestModify writes the intent of a ControllerModifyVolume:
// Parameters become the volume's ModifyingParameters. Empty parameters
// are csi.ErrInvalidRequest; other parameters while a modify is pending
// are csi.ErrVolumeInUse; the same ones are a no-op.
type RequestModify struct {
	Namespace  string
	VolumeID   string
	Parameters map[string]string
}

// RecordModify ends a pending modify: on success its parameters are
// merged into MutableParameters; Failed drops them. Without a pending
// modify it changes nothing.
type RecordModify struct {
	Namespace string
	VolumeID  string
	Failed    bool `json:",omitempty"`
}

// Kind implements Command.
func (RequestExpansion) Kind() Kind { return KindRequestExpansion }

// Kind implements Command.
func (RecordControllerExpansion) Kind() Kind { return KindRecordControllerExpansion }

// Kind implements Command.
func (RecordNodeExpansion) Kind() Kind { return KindRecordNodeExpansion }

// Kind implements Command.
func (RecordExpansionError) Kind() Kind { return KindRecordExpansionError }

// Kind implements Command.
func (RequestModify) Kind() Kind { return KindRequestModify }

// Kind implements Command.
func (RecordModify) Kind() Kind { return KindRecordModify }

// decodeVolumeChange decodes the body of one of this file's commands.
func decodeVolumeChange(kind Kind, body []byte) (Command, error) {
	switch kind {
	case KindRequestExpansion:
		return decodeBody[RequestExpansion](kind, body)
	case KindRecordControllerExpansion:
		return decodeBody[RecordControllerExpansion](kind, body)
	case KindRecordNodeExpansion:
		return decodeBody[RecordNodeExpansion](kind, body)
	case KindRecordExpansionError:
		return decodeBody[RecordExpansionError](kind, body)
	case KindRequestModify:
		return decodeBody[RequestModify](kind, body)
	case KindRecordModify:
		return decodeBody[RecordModify](kind, body)
	}
	return nil, fmt.Errorf("%w: unknown command kind %q", csi.ErrInvalidRequest, kind)
}

// changeVolume reads ns/id for a change, refusing one being created.
func (w *writer) changeVolume(ns, id, op string) (*csi.Volume, error) {
	if err := validateVolumeRef(ns, id); err != nil {
		return nil, err
	}
	v, err := w.mustVolume(ns, id)
	if err != nil {
		return nil, err
	}
	if v.Creating {
		return nil, fmt.Errorf("%w: %s volume %s: it is still being created; retry once the creation completes",
			csi.ErrVolumeInUse, op, volName(ns, id))
	}
	return editable(v), nil
}

func (c RequestExpansion) apply(w *writer) error {
	v, err := w.changeVolume(c.Namespace, c.VolumeID, "expand")
	if err != nil {
		return err
	}
	name := volName(c.Namespace, c.VolumeID)
	switch {
	case c.RequiredBytes <= 0:
		return fmt.Errorf("%w: expand volume %s: required bytes %d; ask for a positive size", csi.ErrInvalidRequest, name, c.RequiredBytes)
	case c.LimitBytes < 0 || c.LimitBytes > 0 && c.LimitBytes < c.RequiredBytes:
		return fmt.Errorf("%w: expand volume %s: limit %d is below the required %d bytes", csi.ErrInvalidRequest, name, c.LimitBytes, c.RequiredBytes)
	}
	if v.Expansion.Pending() {
		if v.Expansion.SameRange(c.RequiredBytes, c.LimitBytes) {
			return nil
		}
		return fmt.Errorf("%w: expand volume %s: an expansion to %d bytes is in progress; retry once it is done",
			csi.ErrVolumeInUse, name, v.Expansion.RequiredBytes)
	}
	if v.Expansion.SameRange(c.RequiredBytes, c.LimitBytes) && v.Capacity >= c.RequiredBytes {
		return nil // a repeat of the expansion just done
	}
	if c.RequiredBytes < v.Capacity || c.LimitBytes > 0 && c.LimitBytes < v.Capacity {
		return fmt.Errorf("%w: expand volume %s to %d bytes: it has %d already; volumes only grow",
			csi.ErrShrinkRefused, name, c.RequiredBytes, v.Capacity)
	}
	e := &csi.Expansion{RequiredBytes: c.RequiredBytes, LimitBytes: c.LimitBytes, State: csi.ExpansionController, RequestedAt: c.RequestedAt.UTC()}
	if !c.Controller {
		startNodeStep(e, v)
	}
	v.Expansion = e
	v.RequestedCapacityMin, v.RequestedCapacityMax = c.RequiredBytes, c.LimitBytes
	return w.putVolume(v)
}

// startNodeStep moves e to its node step on v's expansion nodes (done at
// once when there are none).
func startNodeStep(e *csi.Expansion, v *csi.Volume) {
	e.NodeRequired = true
	e.PendingNodes = nilIfEmptySlice(v.ExpansionNodes())
	e.State = csi.ExpansionNode
	if len(e.PendingNodes) == 0 {
		e.State = csi.ExpansionDone
	}
}

func (c RecordControllerExpansion) apply(w *writer) error {
	v, err := w.changeVolume(c.Namespace, c.VolumeID, "record the expansion of")
	if err != nil {
		return err
	}
	if c.Capacity < 0 {
		return fmt.Errorf("%w: volume %s: capacity %d is negative", csi.ErrInvalidRequest, volName(c.Namespace, c.VolumeID), c.Capacity)
	}
	e := v.Expansion.Copy()
	if e == nil || e.State != csi.ExpansionController {
		return nil
	}
	v.Capacity = max(v.Capacity, c.Capacity)
	e.LastError = ""
	if c.NodeExpansionRequired {
		startNodeStep(e, v)
	} else {
		e.State = csi.ExpansionDone
	}
	v.Expansion = e
	return w.putVolume(v)
}

func (c RecordNodeExpansion) apply(w *writer) error {
	v, err := w.changeVolume(c.Namespace, c.VolumeID, "record the node expansion of")
	if err != nil {
		return err
	}
	if err := csi.ValidateNodeID(c.NodeID); err != nil {
		return err
	}
	e := v.Expansion.Copy()
	if e == nil || !e.NeedsNode(c.NodeID) {
		return nil
	}
	pending := slices.Contains(e.PendingNodes, c.NodeID)
	if c.NotMounted && !pending {
		return nil
	}
	e.PendingNodes = nilIfEmptySlice(slices.DeleteFunc(e.PendingNodes, func(n string) bool { return n == c.NodeID }))
	if !c.NotMounted {
		i, _ := slices.BinarySearch(e.DoneNodes, c.NodeID)
		e.DoneNodes = slices.Insert(e.DoneNodes, i, c.NodeID)
	}
	e.LastError = ""
	if len(e.PendingNodes) == 0 {
		e.State = csi.ExpansionDone
	}
	v.Expansion = e
	v.Capacity = max(v.Capacity, c.Capacity)
	return w.putVolume(v)
}

func (c RecordExpansionError) apply(w *writer) error {
	v, err := w.changeVolume(c.Namespace, c.VolumeID, "record an expansion error of")
	if err != nil {
		return err
	}
	if !v.Expansion.Pending() {
		return nil
	}
	if c.Final && v.Expansion.State == csi.ExpansionController {
		v.Expansion = nil
		return w.putVolume(v)
	}
	e := v.Expansion.Copy()
	msg := c.Error
	if len(msg) > MaxClaimError {
		msg = msg[:MaxClaimError]
	}
	if e.LastError == msg {
		return nil
	}
	e.LastError = msg
	v.Expansion = e
	return w.putVolume(v)
}

func (c RequestModify) apply(w *writer) error {
	v, err := w.changeVolume(c.Namespace, c.VolumeID, "modify")
	if err != nil {
		return err
	}
	name := volName(c.Namespace, c.VolumeID)
	if len(c.Parameters) == 0 {
		return fmt.Errorf("%w: modify volume %s: no mutable parameters given", csi.ErrInvalidRequest, name)
	}
	if v.ModifyingParameters != nil {
		if maps.Equal(v.ModifyingParameters, c.Parameters) {
			return nil
		}
		return fmt.Errorf("%w: modify volume %s: another modify is in progress; retry once it is done", csi.ErrVolumeInUse, name)
	}
	v.ModifyingParameters = maps.Clone(c.Parameters)
	return w.putVolume(v)
}

func (c RecordModify) apply(w *writer) error {
	v, err := w.changeVolume(c.Namespace, c.VolumeID, "record the modify of")
	if err != nil {
		return err
	}
	if v.ModifyingParameters == nil {
		return nil
	}
	if !c.Failed {
		m := maps.Clone(v.MutableParameters)
		if m == nil {
			m = make(map[string]string, len(v.ModifyingParameters))
		}
		maps.Copy(m, v.ModifyingParameters)
		v.MutableParameters = m
	}
	v.ModifyingParameters = nil
	return w.putVolume(v)
}
