package rpcshim_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

// authAsk is one question a Server put to its Authorizer.
type authAsk struct {
	Namespace string
	Perm      csi.Permission
	Principal csi.Principal
}

// recordingAuthorizer records every question and answers with answer
// (nil allows).
type recordingAuthorizer struct {
	mu     sync.Mutex
	asks   []authAsk
	answer func(authAsk) error
}

func (a *recordingAuthorizer) Authorize(ctx context.Context, namespace string, perm csi.Permission) error {
	p, _ := csi.PrincipalFrom(ctx)
	ask := authAsk{Namespace: namespace, Perm: perm, Principal: p}
	a.mu.Lock()
	a.asks = append(a.asks, ask)
	a.mu.Unlock()
	if a.answer == nil {
		return nil
	}
	return a.answer(ask)
}

func (a *recordingAuthorizer) take() []authAsk {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.asks
	a.asks = nil
	return out
}

// authEndpoint is one row of the endpoint table: how to call the
// endpoint on volume vol-a (or a plugin) in namespace default, and what
// it must ask.
type authEndpoint struct {
	call      func(ctx context.Context, s *rpcshim.Server) error
	namespace string
	perm      csi.Permission
}

// authEndpoints has a row per exported method of *rpcshim.Server. A new
// endpoint needs a row here, or TestServer_Authorize_EveryEndpoint fails.
func authEndpoints(volID string) map[string]authEndpoint {
	claim := csi.Claim{AllocationID: "a1", NodeID: "n2", Mode: csi.ClaimWrite, AccessMode: mnmwFS.AccessMode, AttachmentMode: mnmwFS.AttachmentMode}
	vol := csi.Volume{ID: volID, Namespace: "default", PluginID: rtPlugin, ExternalID: "ext-" + volID, Capabilities: []csi.Capability{mnmwFS}}
	return map[string]authEndpoint{
		"RegisterVolume": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.RegisterVolume(ctx, &rpcshim.VolumeRegisterRequest{Volume: vol})
			return err
		}, "default", csi.PermVolumeWrite},
		"CreateVolume": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.CreateVolume(ctx, &rpcshim.VolumeCreateRequest{Volume: vol})
			return err
		}, "default", csi.PermVolumeWrite},
		"DeregisterVolume": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.DeregisterVolume(ctx, &rpcshim.VolumeDeregisterRequest{Namespace: "default", VolumeID: volID, Force: true})
			return err
		}, "default", csi.PermVolumeWrite},
		"DeleteVolume": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.DeleteVolume(ctx, &rpcshim.VolumeDeleteRequest{Namespace: "default", VolumeID: volID})
			return err
		}, "default", csi.PermVolumeWrite},
		"Claim": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.Claim(ctx, &rpcshim.VolumeClaimRequest{Namespace: "default", VolumeID: volID, Claim: claim})
			return err
		}, "default", csi.PermVolumeClaim},
		"Unpublish": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.Unpublish(ctx, &rpcshim.VolumeUnpublishRequest{Namespace: "default", VolumeID: volID, AllocationID: "a1", NodeID: "n2", NodeDetached: true})
			return err
		}, "default", csi.PermVolumeClaim},
		"Volume": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.Volume(ctx, "default", volID)
			return err
		}, "default", csi.PermVolumeRead},
		"Volumes": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.Volumes(ctx, "", "")
			return err
		}, csi.AllNamespaces, csi.PermVolumeRead},
		"Feasibility": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.Feasibility(ctx, &rpcshim.FeasibilityRequest{Namespace: "default", VolumeID: volID, Claim: csi.PlacementRequest{Namespace: "default", Mode: csi.ClaimWrite, Capability: mnmwFS}})
			return err
		}, "default", csi.PermVolumeRead},
		"Plugin": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.Plugin(ctx, rtPlugin)
			return err
		}, "", csi.PermPluginRead},
		"Plugins": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.Plugins(ctx)
			return err
		}, "", csi.PermPluginRead},
		"ExpandVolume": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.ExpandVolume(ctx, &rpcshim.VolumeExpandRequest{Namespace: "default", VolumeID: volID, RequiredBytes: 1 << 30})
			return err
		}, "default", csi.PermVolumeWrite},
		"ModifyVolume": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.ModifyVolume(ctx, &rpcshim.VolumeModifyRequest{Namespace: "default", VolumeID: volID, MutableParameters: map[string]string{"k": "v"}})
			return err
		}, "default", csi.PermVolumeWrite},
		"CompleteNodeExpansions": {func(ctx context.Context, s *rpcshim.Server) error {
			return s.CompleteNodeExpansions(ctx, "n2")
		}, "", csi.PermNodeRegister},
		"NodeExpandedAtMount": {func(ctx context.Context, s *rpcshim.Server) error {
			return s.NodeExpandedAtMount(ctx, &rpcshim.NodeExpandedRequest{Namespace: "default", VolumeID: volID, NodeID: "n2", RequiredBytes: 1})
		}, "", csi.PermNodeRegister},
		"ResumeVolumeChanges": {func(ctx context.Context, s *rpcshim.Server) error {
			return s.ResumeVolumeChanges(ctx)
		}, "", csi.PermOperator},
		"CreateSnapshot": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.CreateSnapshot(ctx, &rpcshim.SnapshotCreateRequest{Namespace: "default", VolumeID: volID, SnapshotID: "snap-a"})
			return err
		}, "default", csi.PermVolumeWrite},
		"DeleteSnapshot": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.DeleteSnapshot(ctx, &rpcshim.SnapshotDeleteRequest{Namespace: "default", SnapshotID: "snap-a"})
			return err
		}, "default", csi.PermVolumeWrite},
		"Snapshot": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.Snapshot(ctx, "default", "snap-a")
			return err
		}, "default", csi.PermVolumeRead},
		"ListSnapshots": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.ListSnapshots(ctx, "", "")
			return err
		}, csi.AllNamespaces, csi.PermVolumeRead},
		"RegisterSnapshot": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.RegisterSnapshot(ctx, &rpcshim.SnapshotRegisterRequest{Snapshot: csi.Snapshot{Namespace: "default", ID: "snap-b", SourceVolumeID: volID, PluginID: rtPlugin, ExternalID: "ext-snap-b"}})
			return err
		}, "default", csi.PermVolumeWrite},
		"ReconcileSnapshots": {func(ctx context.Context, s *rpcshim.Server) error {
			_, err := s.ReconcileSnapshots(ctx, &rpcshim.SnapshotReconcileRequest{PluginID: rtPlugin, Namespace: "default"})
			return err
		}, "default", csi.PermVolumeWrite},
	}
}

// TestServer_Authorize_EveryEndpoint calls every exported method of
// *Server (found by reflection, so a new endpoint without a row fails)
// with an Authorizer that refuses: each asks once, with its namespace
// and permission and the caller's principal, and returns
// csi.ErrPermissionDenied (also after crossing a transport) having
// written nothing and called no plugin. With an Authorizer that allows,
// each asks the same and runs.
func TestServer_Authorize_EveryEndpoint(t *testing.T) {
	e := newSrvEnv(t, allControllerCaps)
	e.register("vol-a", "ext-a", mnmwFS)
	e.allocs("a1", "n2")
	kinds := &kindsApplier{Applier: e.applier}
	auth := &recordingAuthorizer{answer: func(authAsk) error { return errors.New("token acc-1 has no such policy") }}
	srv, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Applier: kinds, Router: e.router, Authorizer: auth})
	must(t, err)
	rows := authEndpoints("vol-a")
	who := csi.Principal{Kind: "token", ID: "acc-1"}
	ctx := csi.WithPrincipal(context.Background(), who)
	typ := reflect.TypeOf(srv)
	for i := range typ.NumMethod() {
		name := typ.Method(i).Name
		row, ok := rows[name]
		if !ok {
			t.Errorf("Server.%s has no row in authEndpoints: add one naming the permission it asks", name)
			continue
		}
		t.Run(name+"/denied", func(t *testing.T) {
			e.ctl.ResetCalls()
			err := row.call(ctx, srv)
			if !errors.Is(err, csi.ErrPermissionDenied) {
				t.Fatalf("err = %v, want csi.ErrPermissionDenied", err)
			}
			if !errors.Is(rpcshim.EncodeError(err).Err(), csi.ErrPermissionDenied) {
				t.Fatalf("ErrPermissionDenied lost crossing the wire: %v", err)
			}
			want := []authAsk{{Namespace: row.namespace, Perm: row.perm, Principal: who}}
			if got := auth.take(); !reflect.DeepEqual(got, want) {
				t.Fatalf("asked %v, want %v", got, want)
			}
			if k := kinds.take(); len(k) != 0 {
				t.Fatalf("a refused call wrote %v", k)
			}
			if c := e.ctl.Calls(); len(c) != 0 {
				t.Fatalf("a refused call reached the plugin: %d calls", len(c))
			}
		})
	}
	if len(rows) != typ.NumMethod() {
		t.Errorf("authEndpoints has %d rows for %d exported methods: remove rows of methods that are gone", len(rows), typ.NumMethod())
	}
	auth.answer = nil
	for name, row := range rows {
		t.Run(name+"/allowed", func(t *testing.T) {
			// The call may fail on its own terms (the table's calls run
			// in map order); it must not be refused.
			if err := row.call(ctx, srv); errors.Is(err, csi.ErrPermissionDenied) {
				t.Fatalf("allowed call refused: %v", err)
			}
			want := []authAsk{{Namespace: row.namespace, Perm: row.perm, Principal: who}}
			if got := auth.take(); !reflect.DeepEqual(got, want) {
				t.Fatalf("asked %v, want %v", got, want)
			}
		})
	}
}

// TestServer_Authorize_HidesExistence checks that a refused read of a
// volume that exists reads the same as one of a volume that does not.
func TestServer_Authorize_HidesExistence(t *testing.T) {
	e := newSrvEnv(t, allControllerCaps)
	e.register("vol-a", "ext-a", mnmwFS)
	deny := rpcshim.AuthorizerFunc(func(context.Context, string, csi.Permission) error {
		return csi.ErrPermissionDenied
	})
	srv, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Applier: e.applier, Router: e.router, Authorizer: deny})
	must(t, err)
	for _, name := range []string{"Volume", "Feasibility", "DeleteVolume", "Claim"} {
		t.Run(name, func(t *testing.T) {
			there := authEndpoints("vol-a")[name].call(context.Background(), srv)
			gone := authEndpoints("vol-z")[name].call(context.Background(), srv)
			if errors.Is(gone, csi.ErrVolumeNotFound) || !errors.Is(gone, csi.ErrPermissionDenied) {
				t.Fatalf("refused read of a missing volume: %v", gone)
			}
			if strings.ReplaceAll(gone.Error(), "vol-z", "vol-a") != there.Error() {
				t.Fatalf("refusals differ:\n exists:  %v\n missing: %v", there, gone)
			}
		})
	}
}

// TestServer_Authorize_Errors checks how an Authorizer's errors come
// back: a plain error and ErrPermissionDenied as a Final
// csi.ErrPermissionDenied, csi.ErrUnavailable as Retryable; and that a
// nil Authorizer allows every call.
func TestServer_Authorize_Errors(t *testing.T) {
	e := newSrvEnv(t, allControllerCaps)
	e.register("vol-a", "ext-a", mnmwFS)
	cases := []struct {
		name   string
		answer error
		denied bool
		class  csi.Class
	}{
		{"plain error", errors.New("no policy"), true, csi.ClassFinal},
		{"denied", csi.ErrPermissionDenied, true, csi.ClassFinal},
		{"backend down", csi.ErrUnavailable, false, csi.ClassRetryable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := rpcshim.AuthorizerFunc(func(context.Context, string, csi.Permission) error { return tc.answer })
			srv, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Applier: e.applier, Router: e.router, Authorizer: a})
			must(t, err)
			_, err = srv.Volume(context.Background(), "default", "vol-a")
			if errors.Is(err, csi.ErrPermissionDenied) != tc.denied || csi.Classify(err) != tc.class {
				t.Fatalf("err = %v (class %s), want denied=%v class %s", err, csi.Classify(err), tc.denied, tc.class)
			}
		})
	}
	if _, err := e.server.Volume(context.Background(), "default", "vol-a"); err != nil {
		t.Fatalf("nil Authorizer refused a read: %v", err)
	}
}
