package plugintest

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csi/clock"
)

// DefaultTimeout bounds each step of the lifecycle when Config.Timeout is
// zero. A step is one or two plugin calls through the csikit stack; a
// minute leaves room for a plugin that attaches or formats real storage
// and still ends a run whose plugin hangs.
const DefaultTimeout = time.Minute

// DefaultCapability is the (access, attachment) pair the harness uses when
// Config.Capability is zero: the mode almost every plugin supports.
var DefaultCapability = csi.Capability{
	AccessMode:     csi.AccessModeSingleNodeWriter,
	AttachmentMode: csi.AttachmentModeFileSystem,
}

// DataCheck says how the harness checks the data path of a file-system
// volume once it is published for both allocations.
type DataCheck int

const (
	// DataShared (the default) writes a file through the writer's target
	// and reads it back through every target: one volume published at
	// two targets must show the same files.
	DataShared DataCheck = iota
	// DataWriterOnly writes and reads back through the writer's target
	// only. Use it for plugins that present no real storage (such as
	// csitest's fake, whose targets are separate directories).
	DataWriterOnly
	// DataOff skips the data check.
	DataOff
)

func (d DataCheck) String() string {
	switch d {
	case DataShared:
		return "shared"
	case DataWriterOnly:
		return "writer-only"
	case DataOff:
		return "off"
	}
	return fmt.Sprintf("DataCheck(%d)", int(d))
}

// ParseDataCheck parses the String form of a DataCheck.
func ParseDataCheck(s string) (DataCheck, error) {
	for _, d := range []DataCheck{DataShared, DataWriterOnly, DataOff} {
		if d.String() == s {
			return d, nil
		}
	}
	return DataShared, fmt.Errorf("%w: unknown data check %q; use shared, writer-only or off", csi.ErrInvalidRequest, s)
}

// Config says which plugin to drive and how. Give either Endpoint (a
// plugin serving the controller and node services from one socket, or a
// node-only plugin) or both ControllerEndpoint and NodeEndpoint (a split
// plugin whose controller and node run apart, sharing their back end).
type Config struct {
	// Endpoint is the plugin's unix socket, "/path/csi.sock" or
	// "unix:///path/csi.sock". A plugin that advertises
	// CONTROLLER_SERVICE is driven as a monolith, one that does not as a
	// node-only plugin (give VolumeID then).
	Endpoint string
	// ControllerEndpoint and NodeEndpoint are the sockets of a split
	// plugin's controller and node processes; set both, and not
	// Endpoint.
	ControllerEndpoint string
	NodeEndpoint       string

	// VolumeID is the plugin's ID of a pre-provisioned volume to use
	// instead of creating one. Required when the plugin cannot create
	// volumes (no CREATE_DELETE_VOLUME, or a node-only plugin, which
	// csi-sanity skips). The harness never deletes a volume it did not
	// create, and removes the one file it writes there.
	VolumeID string
	// VolumeContext is the pre-provisioned volume's context, passed to
	// every node call (CreateVolume supplies it for created volumes).
	VolumeContext map[string]string

	// Capability is the access and attachment mode of the volume and its
	// claims; zero means DefaultCapability (single-node-writer,
	// file-system).
	Capability csi.Capability
	// MountOptions go with a file-system capability (fs type, mount
	// flags); nil for none. They must be nil for a block device.
	MountOptions *csi.MountOptions
	// Parameters are passed to CreateVolume.
	Parameters map[string]string
	// Secrets are passed to every call that takes secrets. They never
	// reach a report, a log line or an error.
	Secrets csi.Secrets
	// CallSecrets replace Secrets for the calls that csikit sends with a
	// set of their own, keyed by the bare RPC name: CreateSnapshot,
	// DeleteSnapshot and ListSnapshots (a snapshot carries its own
	// csi.Snapshot.Secrets). Every volume call (CreateVolume,
	// ControllerPublishVolume, NodeStageVolume, …) gets Secrets: csikit
	// keeps one set per volume (csi.Volume.Secrets), so another key is
	// refused. They never reach a report, a log line or an error.
	CallSecrets map[string]csi.Secrets
	// CapacityBytes is CreateVolume's required capacity; 0 asks for none.
	CapacityBytes int64
	// MutableParameters, when set, are what step "modify volume" asks
	// ControllerModifyVolume to set through the csikit server; nil skips
	// the step (the harness cannot guess a plugin's mutable parameters).
	MutableParameters map[string]string

	// MountRoot is the node's mount root (staging and target paths live
	// under it) and StateDir the mounter's state directory. Run defaults
	// both to t.TempDir(); Check to a temporary directory it removes
	// when nothing is left mounted there.
	MountRoot string
	StateDir  string
	// StagingDir and TargetDir, when set, replace MountRoot for the
	// staging paths and for the target paths the mounter hands the
	// plugin (csi-sanity's --stagingdir and --mountdir): absolute, and
	// neither inside the other. Each defaults to MountRoot.
	StagingDir, TargetDir string
	// CreatePath, RemovePath and CheckPath reach the paths where the
	// plugin sees them, inside another mount namespace or container
	// (csicheck's --create-path-cmd, --remove-path-cmd and
	// --check-path-cmd, as csi-sanity's). CreatePath makes there every
	// directory the plugin is given or looks beneath: MountRoot,
	// StagingDir and TargetDir before the first step, the probes'
	// directory and the second node's roots when the run needs them,
	// and each staging_target_path and the parent of each target_path
	// before the stack sends them (the target itself is the plugin's to
	// make); each path once. RemovePath removes every one of them after
	// the last step, the last made first, but for a path with something
	// the run left behind at or beneath it, which is kept and logged (a
	// recursive remove would delete a leftover mount's data). The mounter still makes the
	// same directories on the host, and the harness writes through the
	// targets, so the roots must be shared with the plugin (a bind
	// mount). CheckPath says what is at a path;
	// the "nothing left behind" step asks it about every target_path and
	// staging_target_path the plugin was given, which must then be
	// PathNotFound. Each is nil when unused.
	CreatePath, RemovePath func(ctx context.Context, path string) error
	CheckPath              func(ctx context.Context, path string) (PathKind, error)

	// Timeout bounds each step; 0 means DefaultTimeout.
	Timeout time.Duration

	// SkipIdempotency skips repeating each mutating call with identical
	// arguments.
	SkipIdempotency bool
	// SkipNegative skips the lifecycle's calls that the spec requires
	// the plugin to refuse (an unknown volume, a missing required
	// field). The coverage rows, which send such calls too, are chosen
	// with RunChecks and SkipChecks ("errors|missing|invalid" leaves
	// out the rows that only send refusals).
	SkipNegative bool
	// StrictUnstage makes the harness call NodeUnstageVolume while the
	// volume is still published, and require the plugin to refuse it
	// with FailedPrecondition. The spec puts the duty of ordering on the
	// CO, so this is off by default; turn it on for a plugin whose
	// unstage would pull the storage out from under live publications.
	StrictUnstage bool
	// DataCheck chooses the data check of a file-system volume; the
	// zero value is DataShared.
	DataCheck DataCheck

	// Logger receives the csikit stack's logs and a debug line per step;
	// nil means no logging.
	Logger hclog.Logger

	// Faults makes the harness restart its own node agent (mounter and
	// node endpoint) from its state directory after the first mount,
	// between the unmounts, during the last unmount (stopped after
	// NodeUnpublishVolume, before NodeUnstageVolume, after which the
	// plugin must see only that unstage and identical repeats) and
	// before the release, and cancel each
	// publish and stage call right after sending it and retry it, which
	// must succeed. The plugin keeps running; it only sees repeats.
	Faults bool
	// RestartPlugin, when set, restarts the plugin itself after the
	// first mount (csicheck runs --restart-cmd). The harness then waits
	// until Probe says ready and repeats the publish calls, which must
	// succeed: a restarted plugin still knows what it published.
	RestartPlugin func(ctx context.Context) error

	// SecondNodeEndpoint is the socket of the same plugin's node service
	// on a second node (another process with its own node ID, sharing
	// the back end). When set, after the release the harness hands the
	// volume over to that node through its stack, which then has a second
	// node agent (registry, mounter, node endpoint) for it: an
	// allocation there claims the volume through the server (which
	// attaches it to the second node), the second mounter stages and
	// publishes it under MountRoot/plugintest-node-2 (and likewise under
	// StagingDir and TargetDir) and unmounts it, and the claim release
	// worker detaches it once the allocation stops. A single-node volume
	// must be refused on the first node meanwhile.
	SecondNodeEndpoint string

	// RunChecks and SkipChecks are regular expressions over the names of
	// the per-RPC coverage checks ("ListVolumes (paging)",
	// "CreateSnapshot (errors)"): a check runs when RunChecks is empty
	// or matches its name, and SkipChecks is empty or does not. The
	// lifecycle's own steps always run, since each depends on the one
	// before. SkipChecks "." keeps the lifecycle alone.
	RunChecks, SkipChecks string

	// SettingNames maps a Config field's name ("VolumeID") to the name
	// the caller gives its users ("--volume-id"): messages that tell
	// what to change then name the caller's setting, not the Go field.
	// csicheck maps every field to its flag; nil keeps "Config.VolumeID".
	SettingNames map[string]string

	runRE, skipRE *regexp.Regexp // RunChecks and SkipChecks, compiled
	// clock times the fingerprint's wait for Probe to say ready; nil is
	// the wall clock. Tests set it (export_test.go) so that the verdict
	// on a plugin that never gets ready does not depend on the load.
	clock clock.Clock
}

// withDefaults validates c and fills its defaults, except the
// directories, which the caller (Run or Check) chooses.
func (c Config) withDefaults() (Config, error) {
	out, err := c.validate()
	return out, c.renameErr(err)
}

// validate is withDefaults before its errors name the caller's settings.
func (c Config) validate() (Config, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: plugintest: %s", csi.ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	split := c.ControllerEndpoint != "" || c.NodeEndpoint != ""
	switch {
	case c.Endpoint == "" && !split:
		return c, bad("no endpoint: set Config.Endpoint to the plugin's unix socket, or ControllerEndpoint and NodeEndpoint for a split plugin")
	case c.Endpoint != "" && split:
		return c, bad("Endpoint and ControllerEndpoint/NodeEndpoint are both set: use Endpoint for one socket, or the two others for a split plugin")
	case split && (c.ControllerEndpoint == "" || c.NodeEndpoint == ""):
		return c, bad("a split plugin needs both ControllerEndpoint and NodeEndpoint; for a node-only plugin set Endpoint")
	}
	for _, e := range []struct{ field, v string }{
		{"Endpoint", c.Endpoint}, {"ControllerEndpoint", c.ControllerEndpoint}, {"NodeEndpoint", c.NodeEndpoint},
		{"SecondNodeEndpoint", c.SecondNodeEndpoint},
	} {
		if e.v == "" {
			continue
		}
		if err := checkEndpoint(e.v); err != nil {
			return c, bad("Config.%s: %v", e.field, err)
		}
	}
	if c.VolumeID != "" {
		if err := csi.ValidateExternalID("volume ID", c.VolumeID); err != nil {
			return c, fmt.Errorf("plugintest: Config.VolumeID: %w", err)
		}
	}
	if c.Capability == (csi.Capability{}) {
		c.Capability = DefaultCapability
	}
	if err := c.Capability.Validate(); err != nil {
		return c, fmt.Errorf("plugintest: Config.Capability: %w", err)
	}
	if c.Capability.AttachmentMode == csi.AttachmentModeBlockDevice && c.MountOptions != nil {
		return c, bad("Config.MountOptions are set but the capability is a block device, which takes none; leave them nil")
	}
	if c.CapacityBytes < 0 {
		return c, bad("Config.CapacityBytes is %d; use 0 for no requirement", c.CapacityBytes)
	}
	for _, d := range []struct{ field, v string }{
		{"MountRoot", c.MountRoot}, {"StateDir", c.StateDir}, {"StagingDir", c.StagingDir}, {"TargetDir", c.TargetDir},
	} {
		if d.v != "" && !filepath.IsAbs(d.v) {
			return c, bad("Config.%s %q is not an absolute path", d.field, d.v)
		}
	}
	if err := cmp.Or(c.checkCallSecrets(), c.checkDirs()); err != nil {
		return c, bad("%v", err)
	}
	if c.Timeout < 0 {
		return c, bad("Config.Timeout is %s; use a positive duration, or 0 for the default (%s)", c.Timeout, DefaultTimeout)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.DataCheck < DataShared || c.DataCheck > DataOff {
		return c, bad("Config.DataCheck %s is not DataShared, DataWriterOnly or DataOff", c.DataCheck)
	}
	for _, e := range []struct {
		field, expr string
		re          **regexp.Regexp
	}{{"RunChecks", c.RunChecks, &c.runRE}, {"SkipChecks", c.SkipChecks, &c.skipRE}} {
		if e.expr == "" {
			continue
		}
		re, err := regexp.Compile(e.expr)
		if err != nil {
			return c, bad("Config.%s %q is not a regular expression: %v", e.field, e.expr, err)
		}
		*e.re = re
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c, nil
}

// checkEndpoint accepts "/path" and "unix:///path", as csi/plugin does.
func checkEndpoint(e string) error {
	p := e
	switch {
	case strings.HasPrefix(e, "unix://"):
		p = strings.TrimPrefix(e, "unix://")
	case strings.HasPrefix(e, "unix:"):
		p = strings.TrimPrefix(e, "unix:")
	case strings.Contains(e, "://"):
		return fmt.Errorf("%q is not a unix socket; CSI plugins listen on unix:///path", e)
	}
	if !filepath.IsAbs(p) {
		return fmt.Errorf("%q is not an absolute socket path; use /path or unix:///path", e)
	}
	return nil
}
