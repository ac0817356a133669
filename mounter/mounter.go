package mounter

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/metrics"
	"github.com/csikit/csikit/csi/plugin"
)

// VolumeMounter makes CSI volumes available to allocations on one node.
//
// Methods may be called from any goroutine. Calls on one volume
// (namespace, volume ID) run one at a time, in no promised order; calls
// on different volumes run in parallel. Every method is idempotent: a
// repeated mount returns the same MountInfo, an unmount of something not
// mounted succeeds. Errors are classified by csi.Classify: Retryable and
// Uncertain ones may be retried with the same request.
type VolumeMounter interface {
	// MountVolume stages the volume if the plugin needs it and no
	// allocation staged it yet, then publishes it for the allocation,
	// and returns where it is. A volume is staged once per node: a mount
	// that needs another access or attachment mode than the one it is
	// staged with for other allocations fails with csi.ErrVolumeInUse
	// (Retryable) until they have unmounted.
	MountVolume(ctx context.Context, req *MountRequest) (*MountInfo, error)
	// UnmountVolume unpublishes the volume for the allocation, and
	// unstages it when no other allocation uses it.
	UnmountVolume(ctx context.Context, req *UnmountRequest) error
	// HasMount reports whether the allocation may have the volume
	// published: from a MountVolume that sent NodePublishVolume (unless
	// the plugin refused it with a Final error), or died during its
	// NodeStageVolume, until an UnmountVolume for it has completed.
	HasMount(ctx context.Context, namespace, volumeID, allocID string) (bool, error)
}

// Plugins finds the node plugin for a plugin ID on this node; the
// Mounter calls it from any goroutine. fingerprint.Manager satisfies it.
type Plugins interface {
	NodePlugin(pluginID string) (plugin.NodeClient, *csi.PluginInfo, error)
}

// DefaultMaxParallel bounds how many volume operations run at once when
// Config.MaxParallel is 0. Each holds a plugin call in flight; plugins
// serialize much of their own work, so more rarely helps.
const DefaultMaxParallel = 16

// Config configures a Mounter.
type Config struct {
	// Root is the absolute directory under which volumes are staged and
	// published, created if missing. Required unless both StagingRoot
	// and TargetRoot are set.
	Root string
	// StagingRoot and TargetRoot, when set, replace Root for staging
	// paths (<StagingRoot>/staging/...) and target paths
	// (<TargetRoot>/per-alloc/...), and are treated like it: a plugin
	// that sees the host through another mount namespace may need them
	// on separate file systems. Neither may lie inside the other.
	StagingRoot, TargetRoot string
	// StateDir is the absolute directory where the usage tracker is
	// persisted (see the package doc). Required; it must survive a
	// restart of the node agent, and New fails while another Mounter
	// holds it.
	StateDir string
	// Plugins finds node plugins. Required.
	Plugins Plugins
	// Logger; nil means no logging. Secrets are never logged.
	Logger hclog.Logger
	// NoSync writes everything to mounter.db, unsynced: an OS crash may
	// then lose recent commits, or leave a database that New refuses as
	// corrupt. Only for tests and throwaway nodes.
	NoSync bool
	// MaxParallel bounds volume operations running at once; 0 means
	// DefaultMaxParallel.
	MaxParallel int
	// MetricSink counts the stages, publications and teardowns the node
	// plugin answered (metrics.MountsStaged and its kin); nil: none.
	MetricSink metrics.Sink
}

// Mounter is the VolumeMounter over CSI node plugins, with a usage
// tracker persisted in Config.StateDir.
type Mounter struct {
	tree    roots // the paths handed out are built on its roots, resolved
	plugins Plugins
	logger  hclog.Logger
	store   *store
	sem     chan struct{}

	mu   sync.Mutex
	vols map[volKey]*volume

	calls   atomic.Uint64
	metrics metrics.Sink // nil: no metrics
}

var _ VolumeMounter = (*Mounter)(nil)

type volKey struct{ namespace, volumeID string }

// volume is the lock and tracker record of one volume.
type volume struct {
	key  volKey
	lock chan struct{} // held while an operation runs on the volume
	refs int           // holders and waiters; guarded by Mounter.mu
	rec  *volumeRecord // guarded by lock; nil when nothing is tracked
}

// New validates cfg, opens the state in cfg.StateDir (locking it until
// Close) and loads the tracker. It starts no goroutine and calls no
// plugin. State that cannot be read is a *StateError (ErrCorruptState).
func New(cfg Config) (*Mounter, error) {
	if err := cfg.checkRoots(); err != nil {
		return nil, err
	}
	if cfg.StateDir == "" || !filepath.IsAbs(cfg.StateDir) {
		return nil, fmt.Errorf("%w: mounter: StateDir %q must be an absolute directory", csi.ErrInvalidRequest, cfg.StateDir)
	}
	if cfg.Plugins == nil {
		return nil, fmt.Errorf("%w: mounter: Plugins is nil; pass the node's plugin registry (fingerprint.Manager)", csi.ErrInvalidRequest)
	}
	if cfg.MaxParallel < 0 {
		return nil, fmt.Errorf("%w: mounter: MaxParallel is %d; use 0 for the default (%d)", csi.ErrInvalidRequest, cfg.MaxParallel, DefaultMaxParallel)
	}
	logger := cmp.Or(cfg.Logger, hclog.NewNullLogger())
	// A teardown never removes the roots and their two directories.
	t, err := newRoots(cfg.stagingRoot(), cfg.targetRoot())
	if err != nil {
		return nil, fmt.Errorf("mounter: create mount root: %w", err)
	}
	st, recs, err := openStore(filepath.Clean(cfg.StateDir), !cfg.NoSync, !cfg.NoSync, logger)
	if err != nil {
		return nil, fmt.Errorf("mounter: %w", err)
	}
	m := &Mounter{tree: t, plugins: cfg.Plugins, logger: logger, store: st,
		sem: make(chan struct{}, cmp.Or(cfg.MaxParallel, DefaultMaxParallel)), vols: map[volKey]*volume{}, metrics: cfg.MetricSink}
	for k, rec := range recs {
		m.vols[k] = &volume{key: k, lock: make(chan struct{}, 1), rec: rec}
	}
	if len(recs) > 0 {
		m.logger.Info("loaded mount state", "volumes", len(recs))
	}
	return m, nil
}

// Stats counts what the Mounter did since New.
type Stats struct {
	// PluginCalls counts node RPCs issued: NodeStageVolume,
	// NodePublishVolume, NodeUnpublishVolume, NodeUnstageVolume and
	// NodeGetCapabilities.
	PluginCalls uint64
	// Syncs counts synced commits of mounter.db (none with NoSync),
	// each two fdatasyncs; writers that overlap share one.
	Syncs uint64
}

// Stats returns the counters.
func (m *Mounter) Stats() Stats {
	return Stats{PluginCalls: m.calls.Load(), Syncs: m.store.syncs()}
}

// Close writes into mounter.db the notes it lacks, so that a reboot
// finds them, and unlocks the state for the next Mounter. Call it when
// the node agent stops, after every call has returned; the Mounter must
// not be used afterwards.
func (m *Mounter) Close() error { return m.store.close() }

// HasMount implements VolumeMounter. It waits for an operation running
// on the volume. After an OS crash it may report true for an
// allocation whose UnmountVolume had succeeded; another clears it.
func (m *Mounter) HasMount(ctx context.Context, namespace, volumeID, allocID string) (bool, error) {
	if err := validateTriple(namespace, volumeID, allocID); err != nil {
		return false, err
	}
	v, err := m.acquire(ctx, volKey{namespace, volumeID})
	if err != nil {
		return false, err
	}
	defer m.release(v)
	if v.rec == nil {
		return false, nil
	}
	for _, s := range v.rec.Stages {
		if s.Writers[allocID] != nil || s.Readers[allocID] != nil {
			return true, nil
		}
	}
	return false, nil
}

// acquire locks the volume, waiting at most until ctx ends.
func (m *Mounter) acquire(ctx context.Context, k volKey) (*volume, error) {
	m.mu.Lock()
	v := m.vols[k]
	if v == nil {
		v = &volume{key: k, lock: make(chan struct{}, 1)}
		m.vols[k] = v
	}
	v.refs++
	m.mu.Unlock()
	select {
	case v.lock <- struct{}{}:
		return v, nil
	case <-ctx.Done():
		m.unref(v)
		return nil, fmt.Errorf("waiting for another operation on volume %s/%s: %w", k.namespace, k.volumeID, ctx.Err())
	}
}

func (m *Mounter) release(v *volume) {
	m.unref(v)
	<-v.lock
}

// unref drops a hold on the volume, and forgets it when nothing is
// tracked and nobody waits.
func (m *Mounter) unref(v *volume) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v.refs--
	if v.refs == 0 && v.rec == nil && m.vols[v.key] == v {
		delete(m.vols, v.key)
	}
}

// slot takes one of the MaxParallel places until the returned func.
func (m *Mounter) slot(ctx context.Context) (func(), error) {
	select {
	case m.sem <- struct{}{}:
		return func() { <-m.sem }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a free operation slot: %w", ctx.Err())
	}
}

// stages reports whether the plugin wants NodeStageVolume: from its
// fingerprint when the registry has one (fingerprint.Manager does),
// else by asking NodeGetCapabilities.
func (m *Mounter) stages(ctx context.Context, pluginID string, c plugin.NodeClient, info *csi.PluginInfo) (bool, error) {
	if info != nil && info.NodeInfo != nil {
		return info.NodeInfo.Capabilities.StageUnstageVolume, nil
	}
	m.calls.Add(1)
	caps, err := c.NodeGetCapabilities(ctx)
	if err != nil {
		return false, fmt.Errorf("node plugin %s: NodeGetCapabilities: %w", pluginID, err)
	}
	return caps.StageUnstageVolume, nil
}
