package rpcshim_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/rpcshim"
)

// TestServer_DeleteVolume_Intent: a delete writes its intent before the
// plugin call. When the call ends without knowing whether the plugin
// deleted the volume, the intent stays, so no claim is taken on a
// volume that may be gone, and a new leader's ResumeVolumeChanges
// completes the delete. When the plugin says it did not delete it, the
// intent is withdrawn.
func TestServer_DeleteVolume_Intent(t *testing.T) {
	for _, tc := range []struct {
		code      codes.Code
		class     csi.Class
		keepsMark bool
	}{
		{codes.DeadlineExceeded, csi.ClassUncertain, true},
		{codes.FailedPrecondition, csi.ClassFinal, false},
		{codes.Unavailable, csi.ClassRetryable, false},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			e := newSnapEnv(t, snapCaps, csitest.Config{})
			e.register("db", "ext-db", snwFS)
			ctx := context.Background()
			req := &rpcshim.VolumeDeleteRequest{Namespace: "default", VolumeID: "db"}
			e.ctl.FailNext(csitest.MethodDeleteVolume, tc.code, 1)
			if _, err := e.srv.DeleteVolume(ctx, req); csi.Classify(err) != tc.class {
				t.Fatalf("delete = %v (%s), want a %s error", err, csi.Classify(err), tc.class)
			}
			v, err := e.store.Volume("default", "db")
			must(t, err)
			if v.Deleting != tc.keepsMark {
				t.Fatalf("after the failed delete Deleting = %v, want %v", v.Deleting, tc.keepsMark)
			}
			if _, ok := e.ctl.Volume("ext-db"); !ok {
				t.Fatal("the plugin lost the volume on a failed delete")
			}

			srv, err := rpcshim.NewServer(rpcshim.ServerConfig{Store: e.store, Applier: e.applier, Router: e.router, Clock: e.clock})
			must(t, err)
			must(t, srv.ResumeVolumeChanges(ctx))
			_, err = e.store.Volume("default", "db")
			_, inPlugin := e.ctl.Volume("ext-db")
			if tc.keepsMark {
				if !errors.Is(err, csi.ErrVolumeNotFound) || inPlugin {
					t.Fatalf("after the resume: store %v, in the plugin %v; want the delete completed", err, inPlugin)
				}
				return
			}
			if err != nil || !inPlugin {
				t.Fatalf("after the resume: store %v, in the plugin %v; want the volume kept (no intent to resume)", err, inPlugin)
			}
		})
	}
}

// TestServer_DeleteVolume_EarlierIntentStays: a delete that finds the
// intent of an earlier call whose outcome is unknown keeps it when its
// own call fails Retryable (the plugin unreachable now, as on a new
// leader whose controllers have not reported yet): the earlier call
// may have deleted the volume, so it must not become claimable again.
// The next attempt completes the delete.
func TestServer_DeleteVolume_EarlierIntentStays(t *testing.T) {
	e := newSnapEnv(t, snapCaps, csitest.Config{})
	e.register("db", "ext-db", snwFS)
	ctx := context.Background()
	req := &rpcshim.VolumeDeleteRequest{Namespace: "default", VolumeID: "db"}
	e.ctl.FailNext(csitest.MethodDeleteVolume, codes.DeadlineExceeded, 1)
	if _, err := e.srv.DeleteVolume(ctx, req); csi.Classify(err) != csi.ClassUncertain {
		t.Fatalf("first delete = %v, want an Uncertain error", err)
	}
	e.ctl.FailNext(csitest.MethodDeleteVolume, codes.Unavailable, 1)
	if _, err := e.srv.DeleteVolume(ctx, req); csi.Classify(err) != csi.ClassRetryable {
		t.Fatalf("second delete = %v, want a Retryable error", err)
	}
	v, err := e.store.Volume("default", "db")
	must(t, err)
	if !v.Deleting {
		t.Fatal("a Retryable failure withdrew the delete intent an Uncertain call had left")
	}
	if _, err := e.srv.DeleteVolume(ctx, req); err != nil {
		t.Fatalf("third delete: %v", err)
	}
	if _, err := e.store.Volume("default", "db"); !errors.Is(err, csi.ErrVolumeNotFound) {
		t.Fatalf("after the third delete: %v, want the volume gone", err)
	}
}
