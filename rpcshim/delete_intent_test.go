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
