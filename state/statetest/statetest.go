package statetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/state"
)

// Run runs the conformance suite. newStore must return a new, empty store
// each time it is called; the suite calls it many times, once per case
// and once per property check, and never uses a store from two
// goroutines except where a case tests concurrency (blocking queries).
func Run(t *testing.T, newStore func(t *testing.T) state.Store) {
	t.Helper()
	s := suite{newStore: newStore}
	t.Run("Volume", s.volumes)
	t.Run("Claim", s.claims)
	t.Run("Attachment", s.attachments)
	t.Run("ExternalID", s.externalIDs)
	t.Run("Creating", s.creating)
	t.Run("Deleting", s.deleting)
	t.Run("Release", s.releases)
	t.Run("Plugin", s.plugins)
	t.Run("Allocation", s.allocations)
	t.Run("Batch", s.batches)
	t.Run("Wait", s.blocking)
	t.Run("Replay", s.replay)
	t.Run("Snapshot", s.snapshots)
	t.Run("Ownership", s.ownership)
	t.Run("Placement", s.placement)
	t.Run("Capacity", s.capacity)
	t.Run("Expansion", s.expansions)
	t.Run("VolumeSnapshot", s.volumeSnapshots)
	t.Run("Health", s.health)
	t.Run("Property", s.property)
	t.Run("NodeIdentity", s.nodeIdentity)
	t.Run("ACLToken", s.aclTokens)
}

type suite struct {
	newStore func(t *testing.T) state.Store
}

// reporter is what both *testing.T and *rapid.T offer.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// Names used by the standard world.
const (
	nsDefault = "default"
	nsOther   = "other"
	pluginEBS = "ebs"
	provider  = "ebs.csi.example.com"
)

// t0 is the time of every fingerprint and release in the suite.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

// world is a store with the log index the suite hands out and the IDs it
// has used, so that a dump can read every object back.
type world struct {
	s      state.Store
	idx    uint64
	nodes  map[string]bool
	allocs map[string]bool
	// log records every command applied, refused ones included, for
	// the replay case.
	log []logEntry
}

type logEntry struct {
	index uint64
	cmd   []byte
	err   error
}

func newWorld(s state.Store) *world {
	return &world{s: s, nodes: map[string]bool{}, allocs: map[string]bool{}}
}

func (s suite) empty(t *testing.T) *world {
	t.Helper()
	st := s.newStore(t)
	if st == nil {
		t.Fatalf("newStore returned nil")
	}
	return newWorld(st)
}

func (w *world) apply(t reporter, cmd state.Command) (state.Result, error) {
	t.Helper()
	w.idx++
	w.track(cmd)
	b, err := state.EncodeCommand(cmd)
	if err != nil {
		t.Fatalf("encode %s: %v", cmd.Kind(), err)
	}
	res, err := w.s.Apply(w.idx, cmd)
	w.log = append(w.log, logEntry{index: w.idx, cmd: b, err: err})
	return res, err
}

// track remembers the node and allocation IDs a command names.
func (w *world) track(cmd state.Command) {
	switch c := cmd.(type) {
	case state.UpsertNodePlugins:
		w.trackNode(c.NodeID)
	case state.DeleteNode:
		w.trackNode(c.NodeID)
	case state.RegisterNode:
		w.trackNode(c.NodeID)
	case state.UpsertAllocations:
		for _, a := range c.Allocations {
			if csi.ValidateAllocationID(a.ID) == nil {
				w.allocs[a.ID] = true
			}
		}
	case state.Batch:
		for _, sub := range c.Commands {
			w.track(sub)
		}
	}
}

func (w *world) trackNode(id string) {
	if csi.ValidateNodeID(id) == nil {
		w.nodes[id] = true
	}
}

// must applies cmd and stops the case if it fails.
func (w *world) must(t reporter, cmd state.Command) state.Result {
	t.Helper()
	res, err := w.apply(t, cmd)
	if err != nil {
		t.Fatalf("apply %s: %v", cmd.Kind(), err)
	}
	if res.Index != w.idx {
		t.Errorf("apply %s at %d: Result.Index = %d", cmd.Kind(), w.idx, res.Index)
	}
	return res
}

// refuse applies cmd, which must fail with an error matching want whose
// text mentions every string in mention, and leave the store unchanged.
func (w *world) refuse(t reporter, cmd state.Command, want error, mention ...string) {
	t.Helper()
	w.refuseErr(t, cmd, want, mention...)
}

// refuseErr is refuse, returning the error.
func (w *world) refuseErr(t reporter, cmd state.Command, want error, mention ...string) error {
	t.Helper()
	before := w.dump(t)
	_, err := w.apply(t, cmd)
	switch {
	case err == nil:
		t.Errorf("apply %s: succeeded, want an error matching %q", cmd.Kind(), want)
	case !errors.Is(err, want):
		t.Errorf("apply %s: error %q does not match %q", cmd.Kind(), err, want)
	}
	if err != nil {
		for _, m := range mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("apply %s: error %q does not name %q", cmd.Kind(), err, m)
			}
		}
	}
	if after := w.dump(t); after != before {
		t.Errorf("refused %s changed the store:\nbefore: %s\nafter:  %s", cmd.Kind(), before, after)
	}
	return err
}

// noop applies cmd, which must succeed without changing anything.
func (w *world) noop(t reporter, cmd state.Command) state.Result {
	t.Helper()
	before := w.dump(t)
	res, err := w.apply(t, cmd)
	if err != nil {
		t.Errorf("apply %s: %v", cmd.Kind(), err)
		return res
	}
	if res.Changed {
		t.Errorf("apply %s: Result.Changed = true, want false", cmd.Kind())
	}
	if after := w.dump(t); after != before {
		t.Errorf("%s changed the store:\nbefore: %s\nafter:  %s", cmd.Kind(), before, after)
	}
	return res
}

// view is everything readable from a store, for comparisons.
type view struct {
	Indexes     map[state.Table]uint64
	Volumes     []*csi.Volume
	Plugins     []*csi.Plugin
	Nodes       map[string]*state.Node
	Allocations map[string]*csi.Allocation
	// PastClaimVolumes is PastClaimVolumeIDs, checked against Volumes.
	PastClaimVolumes []state.VolumeStamp
	// Snapshots are the snapshot records (volumesnapshots.go).
	Snapshots []*csi.Snapshot
	Healths   []*state.VolumeHealth `json:",omitempty"`
	// ACLTokens are the tokens of a store that is a state.ACLReader.
	ACLTokens []*state.ACLToken `json:",omitempty"`
}

func (w *world) view(t reporter) view {
	t.Helper()
	v := view{Indexes: map[state.Table]uint64{}, Nodes: map[string]*state.Node{}, Allocations: map[string]*csi.Allocation{}}
	for _, tb := range state.Tables() {
		idx, err := w.s.Index(tb)
		if err != nil {
			t.Fatalf("Index(%s): %v", tb, err)
		}
		v.Indexes[tb] = idx
	}
	var err error
	if v.Volumes, err = w.s.Volumes("", ""); err != nil {
		t.Fatalf("Volumes: %v", err)
	}
	v.PastClaimVolumes = w.pastStamps(t)
	var want []state.VolumeStamp
	for _, vol := range v.Volumes {
		if len(vol.PastClaims) > 0 {
			want = append(want, stampOf(vol))
		}
	}
	if !slices.Equal(v.PastClaimVolumes, want) {
		t.Errorf("PastClaimVolumeIDs = %v, the volumes with past claims are %v", stampStrings(v.PastClaimVolumes), stampStrings(want))
	}
	if v.Plugins, err = w.s.Plugins(); err != nil {
		t.Fatalf("Plugins: %v", err)
	}
	if v.Healths, err = w.s.Healths(); err != nil {
		t.Fatalf("Healths: %v", err)
	}
	for _, id := range slices.Sorted(maps.Keys(w.nodes)) {
		n, err := w.s.Node(id)
		switch {
		case errors.Is(err, csi.ErrNodeNotFound):
		case err != nil:
			t.Fatalf("Node(%s): %v", id, err)
		default:
			v.Nodes[id] = n
		}
	}
	for _, id := range slices.Sorted(maps.Keys(w.allocs)) {
		a, err := w.s.Allocation(id)
		switch {
		case errors.Is(err, csi.ErrAllocationNotFound):
		case err != nil:
			t.Fatalf("Allocation(%s): %v", id, err)
		default:
			v.Allocations[id] = a
		}
	}
	if v.Snapshots, err = w.s.Snapshots(""); err != nil {
		t.Fatalf("Snapshots: %v", err)
	}
	if ar, ok := w.s.(state.ACLReader); ok {
		if v.ACLTokens, err = ar.ACLTokens(); err != nil {
			t.Fatalf("ACLTokens: %v", err)
		}
	}
	w.checkAllocationsByNode(t, v)
	w.checkVolumeLookups(t, v)
	return v
}

// checkVolumeLookups checks VolumesByNode, for every node the world has
// named, and VolumesByPlugin, for every plugin of a volume, against the
// volumes of the view.
func (w *world) checkVolumeLookups(t reporter, v view) {
	t.Helper()
	byNode, byPlugin := map[string][]string{}, map[string][]string{}
	for id := range w.nodes {
		byNode[id] = nil
	}
	for _, vol := range v.Volumes { // in (namespace, ID) order
		byPlugin[vol.PluginID] = append(byPlugin[vol.PluginID], vol.Namespace+"/"+vol.ID)
		nodes := map[string]bool{}
		for _, m := range []map[string]*csi.Claim{vol.ReadClaims, vol.WriteClaims, vol.PastClaims} {
			for _, c := range m {
				nodes[c.NodeID] = true
			}
		}
		for n := range vol.Attachments { // an adopted leak has no claim
			nodes[n] = true
		}
		for n := range nodes {
			byNode[n] = append(byNode[n], vol.Namespace+"/"+vol.ID)
		}
	}
	lookups := []struct {
		name string
		read func(string) ([]*csi.Volume, error)
		want map[string][]string
		what string
	}{
		{"VolumesByNode", w.s.VolumesByNode, byNode, "the volumes with a claim or an attachment there"},
		{"VolumesByPlugin", w.s.VolumesByPlugin, byPlugin, "the volumes of the plugin"},
	}
	for _, l := range lookups {
		for _, k := range slices.Sorted(maps.Keys(l.want)) {
			got, err := l.read(k)
			if err != nil {
				t.Fatalf("%s(%s): %v", l.name, k, err)
			}
			if ids := volumeIDs(got); !slices.Equal(ids, l.want[k]) {
				t.Errorf("%s(%s) = %v, %s are %v", l.name, k, ids, l.what, l.want[k])
			}
		}
	}
}

// checkAllocationsByNode checks AllocationsByNode against the
// allocations of the view for every node the world has named.
func (w *world) checkAllocationsByNode(t reporter, v view) {
	t.Helper()
	byNode := map[string][]string{}
	for id := range w.nodes {
		byNode[id] = nil
	}
	for _, id := range slices.Sorted(maps.Keys(v.Allocations)) {
		a := v.Allocations[id]
		byNode[a.NodeID] = append(byNode[a.NodeID], id)
	}
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		allocs, err := w.s.AllocationsByNode(node)
		if err != nil {
			t.Fatalf("AllocationsByNode(%s): %v", node, err)
		}
		var got []string
		for _, a := range allocs {
			got = append(got, a.ID)
			if want := v.Allocations[a.ID]; toJSON(a) != toJSON(want) {
				t.Errorf("AllocationsByNode(%s) lists %s, Allocation(%s) = %s", node, toJSON(a), a.ID, toJSON(want))
			}
		}
		if !slices.Equal(got, byNode[node]) {
			t.Errorf("AllocationsByNode(%s) = %v, the allocations on it are %v", node, got, byNode[node])
		}
	}
}

// dump is the view as JSON: empty and nil collections compare equal.
func (w *world) dump(t reporter) string {
	t.Helper()
	b, err := json.Marshal(w.view(t))
	if err != nil {
		t.Fatalf("encode view: %v", err)
	}
	return string(b)
}

func (w *world) index(t reporter, tb state.Table) uint64 {
	t.Helper()
	idx, err := w.s.Index(tb)
	if err != nil {
		t.Fatalf("Index(%s): %v", tb, err)
	}
	return idx
}

func (w *world) volume(t reporter, ns, id string) *csi.Volume {
	t.Helper()
	v, err := w.s.Volume(ns, id)
	if err != nil {
		t.Fatalf("Volume(%s, %s): %v", ns, id, err)
	}
	return v
}

// pastStamps returns PastClaimVolumeIDs after checking that it names
// the volumes VolumesWithPastClaims returns, in the same order and at
// the same ModifyIndex.
func (w *world) pastStamps(t reporter) []state.VolumeStamp {
	t.Helper()
	stamps, err := w.s.PastClaimVolumeIDs()
	if err != nil {
		t.Fatalf("PastClaimVolumeIDs: %v", err)
	}
	vols, err := w.s.VolumesWithPastClaims()
	if err != nil {
		t.Fatalf("VolumesWithPastClaims: %v", err)
	}
	want := make([]state.VolumeStamp, len(vols))
	for i, v := range vols {
		want[i] = stampOf(v)
	}
	if !slices.Equal(stamps, want) {
		t.Errorf("PastClaimVolumeIDs = %v, VolumesWithPastClaims = %v; want the same volumes, order and indexes",
			stampStrings(stamps), stampStrings(want))
	}
	return stamps
}

func stampOf(v *csi.Volume) state.VolumeStamp {
	return state.VolumeStamp{VolumeKey: state.VolumeKey{Namespace: v.Namespace, ID: v.ID}, ModifyIndex: v.ModifyIndex}
}

// stampStrings formats stamps as namespace/id@index.
func stampStrings(stamps []state.VolumeStamp) []string {
	out := make([]string, len(stamps))
	for i, s := range stamps {
		out[i] = fmt.Sprintf("%s/%s@%d", s.Namespace, s.ID, s.ModifyIndex)
	}
	return out
}

func (w *world) plugin(t reporter, id string) *csi.Plugin {
	t.Helper()
	p, err := w.s.Plugin(id)
	if err != nil {
		t.Fatalf("Plugin(%s): %v", id, err)
	}
	return p
}

// --- builders ---

func capab(m csi.AccessMode, a csi.AttachmentMode) csi.Capability {
	return csi.Capability{AccessMode: m, AttachmentMode: a}
}

var (
	fsSNW  = capab(csi.AccessModeSingleNodeWriter, csi.AttachmentModeFileSystem)
	fsMNMW = capab(csi.AccessModeMultiNodeMultiWriter, csi.AttachmentModeFileSystem)
	fsMNR  = capab(csi.AccessModeMultiNodeReaderOnly, csi.AttachmentModeFileSystem)
	fsSNSW = capab(csi.AccessModeSingleNodeSingleWriter, csi.AttachmentModeFileSystem)
	blkSNW = capab(csi.AccessModeSingleNodeWriter, csi.AttachmentModeBlockDevice)
)

// fingerprint is a plugin instance on node; its CSI node ID is
// "ext-"+node.
func fingerprint(plugin string, typ csi.PluginType, node, alloc string, healthy bool) csi.PluginInfo {
	p := csi.PluginInfo{
		PluginID: plugin, AllocationID: alloc, Type: typ, Healthy: healthy,
		UpdateTime: t0, Provider: provider, ProviderVersion: "1.2.0", RequiresController: true,
	}
	if !healthy {
		p.HealthDescription = "probe failed"
	}
	if typ.HasController() {
		p.ControllerInfo = &csi.ControllerInfo{Capabilities: csi.ControllerCapabilities{PublishUnpublishVolume: true}}
	}
	if typ.HasNode() {
		p.NodeInfo = &csi.NodeInfo{ID: "ext-" + node, Capabilities: csi.NodeCapabilities{StageUnstageVolume: true}}
	}
	return p
}

func volume(ns, id, plugin string, caps ...csi.Capability) csi.Volume {
	return csi.Volume{
		ID: id, Namespace: ns, Name: id, ExternalID: "vol-" + ns + "-" + id, PluginID: plugin,
		Capabilities: caps,
		Secrets:      csi.Secrets{"key": "s3cret"},
		Parameters:   map[string]string{"type": "gp3"},
		Context:      map[string]string{"origin": "statetest"},
	}
}

func alloc(id, ns, node, job string, plugins ...csi.AllocPlugin) csi.Allocation {
	return csi.Allocation{ID: id, Namespace: ns, NodeID: node, JobID: job, TaskGroup: job + "-group", Plugins: plugins}
}

func claim(allocID, node string, mode csi.ClaimMode, c csi.Capability) csi.Claim {
	return csi.Claim{AllocationID: allocID, NodeID: node, Mode: mode, AccessMode: c.AccessMode, AttachmentMode: c.AttachmentMode}
}

func claimCmd(ns, vol string, c csi.Claim) state.ClaimVolume {
	return state.ClaimVolume{Namespace: ns, VolumeID: vol, Claim: c}
}

func terminal(a csi.Allocation) csi.Allocation {
	a.Terminal = true
	return a
}

// The standard world's allocations.
func allocEBSController() csi.Allocation {
	return alloc("ebs-ctl-1", nsDefault, "n1", "ebs-controller", csi.AllocPlugin{PluginID: pluginEBS, Type: csi.PluginTypeController})
}

func allocEBSNode(node string) csi.Allocation {
	return alloc("ebs-node-"+strings.TrimPrefix(node, "n"), nsDefault, node, "ebs-nodes", csi.AllocPlugin{PluginID: pluginEBS, Type: csi.PluginTypeNode})
}

func allocWeb(n int, node string) csi.Allocation {
	return alloc(fmt.Sprintf("web-%d", n), nsDefault, node, "web")
}

// standard returns a world with plugin "ebs" (a healthy controller on
// n1, healthy node instances on n1 and n2, none on n3), workload
// allocations web-1 and web-3 on n1, web-2 on n2, web-4 on n3, batch-1
// (namespace other) on n1, the terminal allocation dead-1 on n1, and the
// volumes default/data (single-node-writer), default/shared
// (multi-node-multi-writer), default/logs (multi-node-reader-only),
// default/solo (single-node-single-writer) and other/data.
func (s suite) standard(t *testing.T) *world {
	t.Helper()
	w := s.empty(t)
	w.must(t, state.UpsertAllocations{
		Allocations: []csi.Allocation{
			allocEBSController(), allocEBSNode("n1"), allocEBSNode("n2"),
			allocWeb(1, "n1"), allocWeb(2, "n2"), allocWeb(3, "n1"), allocWeb(4, "n3"),
			alloc("batch-1", nsOther, "n1", "batch"),
			terminal(alloc("dead-1", nsDefault, "n1", "web")),
		},
		ReleasedAt: t0,
	})
	w.must(t, state.UpsertNodePlugins{NodeID: "n1", Plugins: []csi.PluginInfo{
		fingerprint(pluginEBS, csi.PluginTypeController, "n1", "ebs-ctl-1", true),
		fingerprint(pluginEBS, csi.PluginTypeNode, "n1", "ebs-node-1", true),
	}})
	w.must(t, state.UpsertNodePlugins{NodeID: "n2", Plugins: []csi.PluginInfo{
		fingerprint(pluginEBS, csi.PluginTypeNode, "n2", "ebs-node-2", true),
	}})
	w.must(t, state.UpsertNodePlugins{NodeID: "n3"})
	w.must(t, state.RegisterVolume{Volume: volume(nsDefault, "data", pluginEBS, fsSNW)})
	w.must(t, state.RegisterVolume{Volume: volume(nsDefault, "shared", pluginEBS, fsMNMW)})
	w.must(t, state.RegisterVolume{Volume: volume(nsDefault, "logs", pluginEBS, fsMNR)})
	w.must(t, state.RegisterVolume{Volume: volume(nsDefault, "solo", pluginEBS, fsSNSW)})
	w.must(t, state.RegisterVolume{Volume: volume(nsOther, "data", pluginEBS, fsSNW)})
	return w
}

func volumeIDs(vols []*csi.Volume) []string {
	ids := make([]string, len(vols))
	for i, v := range vols {
		ids[i] = v.Namespace + "/" + v.ID
	}
	return ids
}

func toJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}
