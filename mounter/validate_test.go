package mounter_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/mounter"
)

var hostileIDs = []struct {
	name, id string
}{
	{"empty", ""},
	{"dot", "."},
	{"dot dot", ".."},
	{"parent escape", "../../etc"},
	{"slash", "a/b"},
	{"absolute", "/etc/passwd"},
	{"backslash", `a\b`},
	{"very long", strings.Repeat("a", 300)},
	{"just over the limit", strings.Repeat("b", csi.MaxIDLength+1)},
	{"NUL", "a\x00b"},
	{"newline", "a\nb"},
	{"escape", "a\x1b[2Jb"},
	{"DEL", "a\x7fb"},
	{"space", "a b"},
	{"unicode slash", "a\u2215b"},
	{"tilde", "~root"},
}

// TestMounter_HostileIDs sends every hostile ID in every ID field of a
// mount, an unmount and a HasMount: each is refused with ErrInvalidID,
// with no plugin call and nothing written under the root or the state
// directory.
func TestMounter_HostileIDs(t *testing.T) {
	e := newEnv(t, stageCaps)
	e.volume("vol1")
	m := e.mounter()
	before := append(files(t, e.root), files(t, e.state)...)
	fields := []struct {
		name string
		set  func(ns, vol, alloc *string, v string)
	}{
		{"namespace", func(ns, _, _ *string, v string) { *ns = v }},
		{"volume", func(_, vol, _ *string, v string) { *vol = v }},
		{"allocation", func(_, _, alloc *string, v string) { *alloc = v }},
	}
	for _, f := range fields {
		for _, h := range hostileIDs {
			t.Run(f.name+"/"+h.name, func(t *testing.T) {
				ns, vol, alloc := testNS, "vol1", "a1"
				f.set(&ns, &vol, &alloc, h.id)
				r := mountReq(vol, alloc)
				r.Namespace = ns
				_, err := m.MountVolume(context.Background(), r)
				requireInvalidID(t, "MountVolume", err, h.id)
				err = m.UnmountVolume(context.Background(), &mounter.UnmountRequest{Namespace: ns, VolumeID: vol, AllocationID: alloc})
				requireInvalidID(t, "UnmountVolume", err, h.id)
				_, err = m.HasMount(context.Background(), ns, vol, alloc)
				requireInvalidID(t, "HasMount", err, h.id)
			})
		}
	}
	t.Run("plugin", func(t *testing.T) {
		for _, h := range hostileIDs {
			r := mountReq("vol1", "a1")
			r.PluginID = h.id
			_, err := m.MountVolume(context.Background(), r)
			requireInvalidID(t, "MountVolume", err, h.id)
		}
	})
	if n := len(e.p.Calls()); n != 0 {
		t.Errorf("%d plugin calls for refused requests: %v", n, e.p.Calls())
	}
	after := append(files(t, e.root), files(t, e.state)...)
	if !slices.Equal(before, after) {
		t.Errorf("files changed: before %v, after %v", before, after)
	}
}

func requireInvalidID(t *testing.T, op string, err error, id string) {
	t.Helper()
	if !errors.Is(err, csi.ErrInvalidID) {
		t.Fatalf("%s with ID %q: error %v, want ErrInvalidID", op, id, err)
	}
	if csi.IsRetryable(err) {
		t.Errorf("%s with ID %q: error is retryable", op, id)
	}
	if len(id) > 2 && strings.ContainsAny(id, "\x00\n\x1b") && strings.Contains(err.Error(), id) {
		t.Errorf("%s: error %q holds the raw control characters of the ID", op, err)
	}
}

// TestMounter_OddButValidIDs mounts IDs that are valid yet look like
// path tricks ("...", "-", ".hidden", the longest allowed): every path
// the plugin sees stays inside the root.
func TestMounter_OddButValidIDs(t *testing.T) {
	e := newEnv(t, stageCaps)
	m := e.mounter()
	for _, id := range []string{"...", "-", "-rf", ".hidden", "a..b", "_", strings.Repeat("z", csi.MaxIDLength)} {
		t.Run(id[:min(len(id), 10)], func(t *testing.T) {
			ext := "ext-" + id[:min(len(id), 100)]
			e.p.AddVolume(ext, 1<<30, nil)
			r := mountReq(id, id)
			r.Namespace, r.ExternalID = id, ext
			mi := mustMount(t, m, r)
			requireInside(t, e.root, mi.Path)
			vs, _ := e.p.Volume(ext)
			for _, st := range vs.Staged {
				requireInside(t, e.root, st.Path)
			}
			if has, err := m.HasMount(context.Background(), id, id, id); err != nil || !has {
				t.Fatalf("HasMount = %v, %v", has, err)
			}
			mustUnmount(t, m, &mounter.UnmountRequest{Namespace: id, VolumeID: id, AllocationID: id})
		})
	}
	e.p.RequireNoViolations(t)
}

func TestMountRequest_Validate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(r *mounter.MountRequest)
		want   error
	}{
		{"valid", func(*mounter.MountRequest) {}, nil},
		{"nil request", nil, csi.ErrInvalidRequest},
		{"empty external ID", func(r *mounter.MountRequest) { r.ExternalID = "" }, csi.ErrInvalidID},
		{"long external ID", func(r *mounter.MountRequest) { r.ExternalID = strings.Repeat("x", 129) }, csi.ErrInvalidID},
		{"unknown access mode", func(r *mounter.MountRequest) { r.Capability.AccessMode = 42 }, csi.ErrInvalidRequest},
		{"unknown attachment mode", func(r *mounter.MountRequest) { r.Capability.AttachmentMode = 0 }, csi.ErrInvalidRequest},
		{"unknown claim mode", func(r *mounter.MountRequest) { r.ClaimMode = 7 }, csi.ErrInvalidRequest},
		{"write claim on read-only mode", func(r *mounter.MountRequest) {
			r.Capability.AccessMode = csi.AccessModeMultiNodeReaderOnly
		}, csi.ErrAccessModeNotAllowed},
		{"mount options on a block device", func(r *mounter.MountRequest) {
			r.Capability.AttachmentMode = csi.AttachmentModeBlockDevice
			r.MountOptions = &csi.MountOptions{FSType: "ext4"}
		}, csi.ErrInvalidRequest},
		{"empty mount options on a block device", func(r *mounter.MountRequest) {
			r.Capability.AttachmentMode = csi.AttachmentModeBlockDevice
			r.MountOptions = &csi.MountOptions{}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r *mounter.MountRequest
			if tc.change != nil {
				r = mountReq("vol1", "a1")
				tc.change(r)
			}
			err := r.Validate()
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Validate() = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestNewMountRequest(t *testing.T) {
	vol := &csi.Volume{
		ID: "vol1", Namespace: testNS, ExternalID: "ext-vol1", PluginID: testPlugin,
		MountOptions: &csi.MountOptions{FSType: "xfs", MountFlags: []string{"noatime"}},
		Secrets:      csi.Secrets{"k": "v"},
		Context:      map[string]string{"c": "1"},
		Attachments: map[string]*csi.Attachment{
			"n1": {NodeID: "n1", State: csi.AttachmentAttached, PublishContext: map[string]string{"p": "2"}},
			"n2": {NodeID: "n2", State: csi.AttachmentAttached},
		},
	}
	for _, tc := range []struct {
		name   string
		claim  *csi.Claim
		wantMO *csi.MountOptions
		wantPC map[string]string
	}{
		{
			name: "claim options override the volume's",
			claim: &csi.Claim{AllocationID: "a1", NodeID: "n1", Mode: csi.ClaimRead, AccessMode: csi.AccessModeMultiNodeReaderOnly,
				AttachmentMode: csi.AttachmentModeFileSystem, MountOptions: &csi.MountOptions{MountFlags: []string{"ro"}}},
			wantMO: &csi.MountOptions{FSType: "xfs", MountFlags: []string{"ro"}},
			wantPC: map[string]string{"p": "2"},
		},
		{
			name: "block device gets no mount options",
			claim: &csi.Claim{AllocationID: "a1", NodeID: "n2", Mode: csi.ClaimWrite, AccessMode: csi.AccessModeSingleNodeWriter,
				AttachmentMode: csi.AttachmentModeBlockDevice},
		},
		{
			name: "no attachment to the node: no publish context",
			claim: &csi.Claim{AllocationID: "a1", NodeID: "n3", Mode: csi.ClaimWrite, AccessMode: csi.AccessModeSingleNodeWriter,
				AttachmentMode: csi.AttachmentModeBlockDevice},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := mounter.NewMountRequest(vol, tc.claim)
			if err != nil {
				t.Fatal(err)
			}
			if r.Namespace != testNS || r.VolumeID != "vol1" || r.ExternalID != "ext-vol1" || r.PluginID != testPlugin ||
				r.AllocationID != "a1" || r.ClaimMode != tc.claim.Mode || r.Capability != tc.claim.Capability() {
				t.Errorf("request %+v does not match the volume and claim", r)
			}
			if r.Secrets["k"] != "v" || r.VolumeContext["c"] != "1" {
				t.Errorf("secrets or volume context not carried")
			}
			if !maps.Equal(r.PublishContext, tc.wantPC) {
				t.Errorf("publish context %v, want the attachment's %v", r.PublishContext, tc.wantPC)
			}
			if (tc.wantMO == nil) != (r.MountOptions == nil) ||
				tc.wantMO != nil && (r.MountOptions.FSType != tc.wantMO.FSType || !slices.Equal(r.MountOptions.MountFlags, tc.wantMO.MountFlags)) {
				t.Errorf("mount options %+v, want %+v", r.MountOptions, tc.wantMO)
			}
			// The request owns its maps.
			r.Secrets["k"], r.VolumeContext["c"] = "x", "x"
			if vol.Secrets["k"] != "v" || vol.Context["c"] != "1" {
				t.Errorf("request shares maps with the volume")
			}
		})
	}
	if _, err := mounter.NewMountRequest(nil, nil); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Errorf("NewMountRequest(nil, nil) = %v", err)
	}
	bad := &csi.Claim{AllocationID: "../x", Mode: csi.ClaimRead, AccessMode: csi.AccessModeMultiNodeReaderOnly,
		AttachmentMode: csi.AttachmentModeFileSystem}
	if _, err := mounter.NewMountRequest(vol, bad); !errors.Is(err, csi.ErrInvalidID) {
		t.Errorf("NewMountRequest with a hostile allocation ID = %v", err)
	}
}

func TestUsage_String(t *testing.T) {
	seen := map[string]mounter.Usage{}
	for _, mode := range []csi.ClaimMode{csi.ClaimRead, csi.ClaimWrite} {
		for am := csi.AccessModeSingleNodeWriter; am <= csi.AccessModeSingleNodeMultiWriter; am++ {
			for _, at := range []csi.AttachmentMode{csi.AttachmentModeFileSystem, csi.AttachmentModeBlockDevice} {
				u := mounter.Usage{ClaimMode: mode, AccessMode: am, AttachmentMode: at}
				if mode == csi.ClaimWrite && am.ReadOnly() {
					if u.Validate() == nil {
						t.Errorf("%+v: a write claim on a read-only mode validates", u)
					}
					continue
				}
				s := u.String()
				if err := csi.ValidateID("usage", s); err != nil || len(s) > 10 {
					t.Errorf("%+v: String %q is not a short path-safe name: %v", u, s, err)
				}
				if other, dup := seen[s]; dup {
					t.Errorf("%+v and %+v share the string %q", u, other, s)
				}
				seen[s] = u
				back, err := mounter.ParseUsage(s)
				if err != nil || back != u {
					t.Errorf("ParseUsage(%q) = %+v, %v; want %+v", s, back, err, u)
				}
			}
		}
	}
	if len(seen) != 2*7*2-2*2 {
		t.Errorf("%d distinct usages", len(seen))
	}
	for _, s := range []string{"", "w", "x-snw-fs", "w-xyz-fs", "w-snw-nfs", "w-mnro-fs", "w-snw-fs-extra", "../w-snw-fs"} {
		if _, err := mounter.ParseUsage(s); !errors.Is(err, csi.ErrInvalidRequest) && !errors.Is(err, csi.ErrAccessModeNotAllowed) {
			t.Errorf("ParseUsage(%q) = %v, want an error", s, err)
		}
	}
	if s := (mounter.Usage{}).String(); !strings.HasPrefix(s, "invalid(") {
		t.Errorf("zero Usage prints %q", s)
	}
}

func TestStageUsage_String(t *testing.T) {
	seen := map[string]mounter.StageUsage{}
	for am := csi.AccessModeSingleNodeWriter; am <= csi.AccessModeSingleNodeMultiWriter; am++ {
		for _, at := range []csi.AttachmentMode{csi.AttachmentModeFileSystem, csi.AttachmentModeBlockDevice} {
			su := mounter.StageUsage{AccessMode: am, AttachmentMode: at}
			s := su.String()
			if err := csi.ValidateID("stage usage", s); err != nil || len(s) > 8 {
				t.Errorf("%+v: String %q is not a short path-safe name: %v", su, s, err)
			}
			if other, dup := seen[s]; dup {
				t.Errorf("%+v and %+v share the string %q", su, other, s)
			}
			seen[s] = su
			if back, err := mounter.ParseStageUsage(s); err != nil || back != su {
				t.Errorf("ParseStageUsage(%q) = %+v, %v; want %+v", s, back, err, su)
			}
			// A usage is its claim mode and its stage usage, in value and
			// in string.
			for _, mode := range []csi.ClaimMode{csi.ClaimRead, csi.ClaimWrite} {
				u := su.Usage(mode)
				if u.Validate() != nil {
					continue
				}
				if u.StageUsage() != su || u.String() != map[csi.ClaimMode]string{csi.ClaimRead: "r-", csi.ClaimWrite: "w-"}[mode]+s {
					t.Errorf("usage %s of stage usage %s: StageUsage %s", u, s, u.StageUsage())
				}
			}
		}
	}
	if len(seen) != 7*2 {
		t.Errorf("%d distinct stage usages", len(seen))
	}
	for _, s := range []string{"", "snw", "xyz-fs", "snw-nfs", "w-snw-fs", "snw-fs-extra", "../snw-fs", "snw-"} {
		if _, err := mounter.ParseStageUsage(s); !errors.Is(err, csi.ErrInvalidRequest) {
			t.Errorf("ParseStageUsage(%q) = %v, want ErrInvalidRequest", s, err)
		}
	}
	if s := (mounter.StageUsage{}).String(); !strings.HasPrefix(s, "invalid(") {
		t.Errorf("zero StageUsage prints %q", s)
	}
}

func TestNew_Config(t *testing.T) {
	dir := t.TempDir()
	reg := &registry{id: testPlugin}
	for _, tc := range []struct {
		name string
		cfg  mounter.Config
	}{
		{"no root", mounter.Config{StateDir: dir, Plugins: reg}},
		{"relative root", mounter.Config{Root: "mnt", StateDir: dir, Plugins: reg}},
		{"no state dir", mounter.Config{Root: dir, Plugins: reg}},
		{"relative state dir", mounter.Config{Root: dir, StateDir: "state", Plugins: reg}},
		{"no plugins", mounter.Config{Root: dir, StateDir: dir}},
		{"negative parallelism", mounter.Config{Root: dir, StateDir: dir, Plugins: reg, MaxParallel: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := mounter.New(tc.cfg); !errors.Is(err, csi.ErrInvalidRequest) {
				t.Fatalf("New = %v, want ErrInvalidRequest", err)
			}
		})
	}
}

// TestNew_CorruptState: a state file that cannot be trusted stops New
// with ErrCorruptState and is left untouched for the operator.
func TestNew_CorruptState(t *testing.T) {
	valid := `{"Version":2,"Namespace":"default","VolumeID":"vol1","ExternalID":"ext","PluginID":"p",
"Stages":{"snw-fs":{"Stage":"staged","StagingPath":"/mnt/staging/default/vol1/snw-fs",
"Writers":{"a1":{"State":"published","TargetPath":"/mnt/per-alloc/a1/vol1/w-snw-fs"}}}}}`
	validV1 := `{"Version":1,"Namespace":"default","VolumeID":"vol1","ExternalID":"ext","PluginID":"p",
"Usages":{"w-snw-fs":{"Stage":"staged","StagingPath":"/mnt/staging/default/vol1/w-snw-fs",
"Allocations":{"a1":{"State":"published","TargetPath":"/mnt/per-alloc/a1/vol1/w-snw-fs"}}}}}`
	// Format 1 could stage a volume for readers and writers at two
	// paths; format 2 has one staging path per stage usage.
	twoStagesV1 := `{"Version":1,"Namespace":"default","VolumeID":"vol1","ExternalID":"ext","PluginID":"p",
"Usages":{"w-snw-fs":{"Stage":"staged","StagingPath":"/mnt/staging/default/vol1/w-snw-fs",
"Allocations":{"a1":{"State":"published","TargetPath":"/mnt/per-alloc/a1/vol1/w-snw-fs"}}},
"r-snw-fs":{"Stage":"staged","StagingPath":"/mnt/staging/default/vol1/r-snw-fs",
"Allocations":{"a2":{"State":"published","TargetPath":"/mnt/per-alloc/a2/vol1/r-snw-fs"}}}}}`
	for _, tc := range []struct {
		name, file, content string
		reason              string // part of the error, if set
	}{
		{name: "not JSON", file: "default/vol1.json", content: "{\"Version\":2,"},
		{name: "empty file", file: "default/vol1.json", content: ""},
		{name: "garbage", file: "default/vol1.json", content: "\x00\x01\x02"},
		{name: "future version", file: "default/vol1.json", content: strings.Replace(valid, `"Version":2`, `"Version":3`, 1), reason: "format version 3"},
		{name: "no version", file: "default/vol1.json", content: strings.Replace(valid, `"Version":2,`, ``, 1), reason: "format version 0"},
		{name: "unknown field", file: "default/vol1.json", content: strings.Replace(valid, `"PluginID":"p"`, `"PluginID":"p","Extra":true`, 1)},
		{name: "trailing data", file: "default/vol1.json", content: valid + "{}"},
		{name: "wrong file name", file: "default/vol2.json", content: valid},
		{name: "wrong namespace dir", file: "other/vol1.json", content: valid},
		{name: "invalid file name", file: "default/bad name.json", content: valid},
		{name: "bad plugin ID", file: "default/vol1.json", content: strings.Replace(valid, `"PluginID":"p"`, `"PluginID":"../p"`, 1)},
		{name: "empty external ID", file: "default/vol1.json", content: strings.Replace(valid, `"ExternalID":"ext"`, `"ExternalID":""`, 1)},
		{name: "bad stage key", file: "default/vol1.json", content: strings.Replace(valid, `"snw-fs":{`, `"snw-zz":{`, 1)},
		{name: "full usage as stage key", file: "default/vol1.json", content: strings.Replace(valid, `"snw-fs":{`, `"w-snw-fs":{`, 1)},
		{name: "writer on a read-only mode", file: "default/vol1.json", content: strings.Replace(valid, `"snw-fs":{`, `"mnro-fs":{`, 1), reason: "read-only"},
		{name: "unknown stage state", file: "default/vol1.json", content: strings.Replace(valid, `"staged"`, `"half-staged"`, 1)},
		{name: "unknown publish state", file: "default/vol1.json", content: strings.Replace(valid, `"published"`, `"maybe"`, 1)},
		{name: "relative target", file: "default/vol1.json", content: strings.Replace(valid, `"/mnt/per-alloc/a1/vol1/w-snw-fs"`, `"per-alloc/a1"`, 1)},
		{name: "unclean target", file: "default/vol1.json", content: strings.Replace(valid, `"/mnt/per-alloc/a1/vol1/w-snw-fs"`, `"/mnt/per-alloc/../../etc"`, 1)},
		{name: "bad allocation ID", file: "default/vol1.json", content: strings.Replace(valid, `"a1":{`, `"../a1":{`, 1)},
		{name: "null allocation", file: "default/vol1.json", content: strings.Replace(valid, `{"State":"published","TargetPath":"/mnt/per-alloc/a1/vol1/w-snw-fs"}`, `null`, 1)},
		{name: "no stages", file: "default/vol1.json", content: `{"Version":2,"Namespace":"default","VolumeID":"vol1","ExternalID":"ext","PluginID":"p","Stages":{}}`},
		{name: "stage tracks nothing", file: "default/vol1.json", content: `{"Version":2,"Namespace":"default","VolumeID":"vol1","ExternalID":"ext","PluginID":"p","Stages":{"snw-fs":{}}}`},
		{name: "staged without path", file: "default/vol1.json", content: strings.Replace(valid, `"StagingPath":"/mnt/staging/default/vol1/snw-fs",`, ``, 1)},
		{name: "directory as record", file: "default/vol1.json/", content: ""},
		{name: "v1 in the v2 layout", file: "default/vol1.json", content: strings.Replace(valid, `"Version":2`, `"Version":1`, 1)},
		{name: "v1 bad usage key", file: "default/vol1.json", content: strings.Replace(validV1, `"w-snw-fs":{`, `"w-snw-zz":{`, 1)},
		{name: "v1 write claim on a read-only mode", file: "default/vol1.json", content: strings.Replace(validV1, `"w-snw-fs":{`, `"w-mnro-fs":{`, 1)},
		{name: "v1 usage tracks nothing", file: "default/vol1.json", content: strings.Replace(validV1, `"Stage":"staged","StagingPath":"/mnt/staging/default/vol1/w-snw-fs",
"Allocations":{"a1":{"State":"published","TargetPath":"/mnt/per-alloc/a1/vol1/w-snw-fs"}}`, ``, 1)},
		{name: "v1 bad target", file: "default/vol1.json", content: strings.Replace(validV1, `"/mnt/per-alloc/a1/vol1/w-snw-fs"`, `"x"`, 1)},
		{name: "v1 two staging paths", file: "default/vol1.json", content: twoStagesV1, reason: "version 1 record that cannot be upgraded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			p := filepath.Join(state, "volumes", tc.file)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(tc.file, "/") {
				if err := os.Mkdir(p, 0o700); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			requireStateRefused(t, state, p, tc.content, strings.HasSuffix(tc.file, "/"), tc.reason)
		})
	}

	for _, f := range []struct{ name, content string }{{"v2", valid}, {"v1", validV1}} {
		t.Run("valid "+f.name+" file loads", func(t *testing.T) {
			state := t.TempDir()
			p := filepath.Join(state, "volumes", "default", "vol1.json")
			writeState(t, p, f.content)
			m, err := mounter.New(mounter.Config{Root: filepath.Join(t.TempDir(), "mnt"), StateDir: state, Plugins: &registry{id: testPlugin}})
			if err != nil {
				t.Fatal(err)
			}
			if has, err := m.HasMount(context.Background(), "default", "vol1", "a1"); err != nil || !has {
				t.Errorf("HasMount from a loaded file = %v, %v", has, err)
			}
		})
	}

	t.Run("leftover temporary file", func(t *testing.T) {
		state := t.TempDir()
		p := filepath.Join(state, "volumes", "default", "vol1.json")
		writeState(t, p, valid)
		// A leftover temporary file (a write cut short) is removed.
		writeState(t, p+".tmp", "{")
		m, err := mounter.New(mounter.Config{Root: filepath.Join(t.TempDir(), "mnt"), StateDir: state, Plugins: &registry{id: testPlugin}})
		if err != nil {
			t.Fatal(err)
		}
		if has, err := m.HasMount(context.Background(), "default", "vol1", "a1"); err != nil || !has {
			t.Errorf("HasMount from a loaded file = %v, %v", has, err)
		}
		if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
			t.Errorf("leftover temporary file kept: %v", err)
		}
	})
}
