package fingerprint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
	"github.com/csikit/csikit/csi/plugin"
)

// DefaultStaticRefresh is how long a Fingerprinter trusts its cached
// static answers (GetPluginInfo, GetPluginCapabilities, NodeGetInfo)
// before it asks again, when nothing else made it drop them. These
// answers change only when the plugin is upgraded or reconfigured, which
// restarts it and so replaces its socket; the slow refresh catches a
// plugin that changed them without restarting.
const DefaultStaticRefresh = 10 * time.Minute

// Client is the part of a CSI plugin client a Fingerprinter calls: the
// Identity service, plus the capability and node-info RPCs of the
// controller and node services. *plugin.Client implements it.
//
// It has six methods, one more than the house limit, because it is
// exactly the fingerprint's RPC set; splitting it would only make callers
// pass the same client three times.
//
// The Fingerprinter calls it from the goroutine that calls Fingerprint,
// one call at a time. The Fingerprinter keeps none of the returned
// values: it copies what it needs. An error means the plugin could not
// answer; the Fingerprinter reports the plugin unhealthy with the error's
// text.
type Client interface {
	plugin.IdentityClient
	ControllerGetCapabilities(ctx context.Context) (*csi.ControllerCapabilities, error)
	NodeGetCapabilities(ctx context.Context) (*csi.NodeCapabilities, error)
	NodeGetInfo(ctx context.Context) (*csi.NodeInfo, error)
}

var _ Client = (*plugin.Client)(nil)

// FingerprinterConfig configures a Fingerprinter.
type FingerprinterConfig struct {
	// PluginID, AllocationID and Type identify the instance; they are
	// copied into every PluginInfo. PluginID and AllocationID must be
	// valid IDs (csi.ValidatePluginID, csi.ValidateAllocationID) and Type
	// a valid csi.PluginType.
	PluginID     string
	AllocationID string
	Type         csi.PluginType
	// Client talks to the plugin. Required.
	Client Client
	// Socket, when set, is the plugin's socket path, checked before each
	// fingerprint: a missing socket makes the plugin unhealthy without an
	// RPC (which would otherwise wait for the socket until its ctx ends),
	// and a socket file replaced by another one (the plugin restarted)
	// drops the cached static answers.
	Socket string
	// Clock stamps UpdateTime and times StaticRefresh; nil means
	// clock.Real.
	Clock clock.Clock
	// StaticRefresh is how long cached static answers are trusted; 0
	// means DefaultStaticRefresh.
	StaticRefresh time.Duration
}

// Fingerprinter asks one plugin instance what it is and whether it is
// healthy, and caches the answers that do not change between cycles. A
// steady-state cycle of a healthy plugin sends Probe plus
// ControllerGetCapabilities and/or NodeGetCapabilities (so two RPCs for a
// node or controller plugin, three for a monolith). GetPluginInfo,
// GetPluginCapabilities and NodeGetInfo are sent on the first cycle, after
// any failed cycle, after the socket was replaced, after Invalidate, and
// once StaticRefresh has passed.
//
// Fingerprint calls are serialized; Invalidate may be called from any
// goroutine at any time.
type Fingerprinter struct {
	cfg   FingerprinterConfig
	clock clock.Clock
	stale atomic.Bool // set by Invalidate, read by the next Fingerprint

	mu       sync.Mutex // serializes Fingerprint; guards the fields below
	static   *static
	staticAt time.Time
	socket   os.FileInfo // identity of the socket seen by the last cycle
	last     *csi.PluginInfo
}

// static is what the cache holds.
type static struct {
	info *plugin.Info
	caps plugin.Capabilities
	node *csi.NodeInfo // nil for a controller-only instance
}

// NewFingerprinter validates cfg and returns a Fingerprinter. It makes no
// call.
func NewFingerprinter(cfg FingerprinterConfig) (*Fingerprinter, error) {
	if err := csi.ValidatePluginID(cfg.PluginID); err != nil {
		return nil, fmt.Errorf("fingerprinter: %w", err)
	}
	if err := csi.ValidateAllocationID(cfg.AllocationID); err != nil {
		return nil, fmt.Errorf("fingerprinter for plugin %q: %w", cfg.PluginID, err)
	}
	if !cfg.Type.Valid() {
		return nil, fmt.Errorf("%w: fingerprinter for plugin %q: type %q is not %q, %q or %q",
			csi.ErrInvalidRequest, cfg.PluginID, cfg.Type, csi.PluginTypeController, csi.PluginTypeNode, csi.PluginTypeMonolith)
	}
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: fingerprinter for plugin %q: Client is nil; pass a *plugin.Client for the plugin's socket",
			csi.ErrInvalidRequest, cfg.PluginID)
	}
	if cfg.StaticRefresh < 0 {
		return nil, fmt.Errorf("%w: fingerprinter for plugin %q: StaticRefresh %s is negative; use 0 for the default (%s)",
			csi.ErrInvalidRequest, cfg.PluginID, cfg.StaticRefresh, DefaultStaticRefresh)
	}
	if cfg.StaticRefresh == 0 {
		cfg.StaticRefresh = DefaultStaticRefresh
	}
	f := &Fingerprinter{cfg: cfg, clock: clock.Or(cfg.Clock)}
	f.last = &csi.PluginInfo{PluginID: cfg.PluginID, AllocationID: cfg.AllocationID, Type: cfg.Type}
	return f, nil
}

// Invalidate drops the cached static answers: the next Fingerprint asks
// for them again.
func (f *Fingerprinter) Invalidate() { f.stale.Store(true) }

// Fingerprint asks the plugin once and returns its fingerprint, which the
// caller owns. The info is never nil. The error is nil exactly when the
// info is healthy; otherwise it says why not, the same reason as
// info.HealthDescription: it wraps the plugin's *csi.RPCError when a call
// failed, csi.ErrUnavailable when the socket is missing, and
// csi.ErrPluginUnhealthy when Probe answered "not ready". An unhealthy
// info keeps the provider, capabilities and node info last seen, so that
// a plugin that flaps does not look like a new one each time.
func (f *Fingerprinter) Fingerprint(ctx context.Context) (*csi.PluginInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stale.Swap(false) {
		f.static = nil
	}

	if f.cfg.Socket != "" {
		fi, err := os.Stat(f.cfg.Socket)
		if err != nil {
			f.static, f.socket = nil, nil
			if errors.Is(err, fs.ErrNotExist) {
				return f.fail(fmt.Errorf("%w: plugin socket %s does not exist", csi.ErrUnavailable, f.cfg.Socket))
			}
			return f.fail(fmt.Errorf("%w: plugin socket: %w", csi.ErrUnavailable, err))
		}
		if f.socket != nil && !sameSocket(f.socket, fi) {
			// A new socket file means a new plugin process, which may
			// answer the static questions differently.
			f.static = nil
		}
		f.socket = fi
	}

	ready, err := f.cfg.Client.Probe(ctx)
	if err != nil {
		// An unreachable plugin may come back as another process.
		f.static = nil
		return f.fail(err)
	}
	if !ready {
		return f.fail(fmt.Errorf("%w: Probe: plugin is not ready", csi.ErrPluginUnhealthy))
	}

	if f.static == nil || !f.clock.Now().Before(f.staticAt.Add(f.cfg.StaticRefresh)) {
		s, err := f.fetchStatic(ctx)
		if err != nil {
			f.static = nil
			return f.fail(err)
		}
		f.static, f.staticAt = s, f.clock.Now()
	}

	info := &csi.PluginInfo{
		PluginID:           f.cfg.PluginID,
		AllocationID:       f.cfg.AllocationID,
		Type:               f.cfg.Type,
		Healthy:            true,
		Provider:           f.static.info.Name,
		ProviderVersion:    f.static.info.VendorVersion,
		RequiresController: f.static.caps.ControllerService,
		RequiresTopologies: f.static.caps.VolumeAccessibilityConstraints,
		OnlineExpansion:    f.static.caps.OnlineExpansion,
		OfflineExpansion:   f.static.caps.OfflineExpansion,
	}
	if f.cfg.Type.HasController() {
		caps, err := f.cfg.Client.ControllerGetCapabilities(ctx)
		if err != nil {
			f.static = nil
			return f.fail(err)
		}
		info.ControllerInfo = &csi.ControllerInfo{Capabilities: *caps}
	}
	if f.cfg.Type.HasNode() {
		caps, err := f.cfg.Client.NodeGetCapabilities(ctx)
		if err != nil {
			f.static = nil
			return f.fail(err)
		}
		ni := *f.static.node
		ni.AccessibleTopology = ni.AccessibleTopology.Copy()
		ni.Capabilities = *caps
		info.NodeInfo = &ni
	}
	info.UpdateTime = f.clock.Now()
	f.last = info
	return info.Copy(), nil
}

// fetchStatic asks the questions whose answers are cached.
func (f *Fingerprinter) fetchStatic(ctx context.Context) (*static, error) {
	pi, err := f.cfg.Client.GetPluginInfo(ctx)
	if err != nil {
		return nil, err
	}
	caps, err := f.cfg.Client.GetPluginCapabilities(ctx)
	if err != nil {
		return nil, err
	}
	s := &static{info: pi, caps: *caps}
	if f.cfg.Type.HasNode() {
		ni, err := f.cfg.Client.NodeGetInfo(ctx)
		if err != nil {
			return nil, err
		}
		s.node = ni
	}
	return s, nil
}

// fail returns the last fingerprint marked unhealthy for err.
func (f *Fingerprinter) fail(err error) (*csi.PluginInfo, error) {
	info := f.last.Copy()
	info.Healthy = false
	info.HealthDescription = err.Error()
	info.UpdateTime = f.clock.Now()
	f.last = info
	return info.Copy(), fmt.Errorf("plugin %q (allocation %q) is unhealthy: %w", f.cfg.PluginID, f.cfg.AllocationID, err)
}

// sameSocket reports whether a and b describe the same socket file. The
// inode alone is not enough: a file system may give a new socket the inode
// number of the one just removed. A socket's modification time is set when
// it is created and does not change with traffic.
func sameSocket(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime())
}
