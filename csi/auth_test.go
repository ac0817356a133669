package csi_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/csikit/csikit/csi"
)

func TestPrincipal_Context(t *testing.T) {
	if _, ok := csi.PrincipalFrom(context.Background()); ok {
		t.Fatal("a bare ctx carries a principal")
	}
	want := csi.Principal{Kind: "token", ID: "acc-1"}
	got, ok := csi.PrincipalFrom(csi.WithPrincipal(context.Background(), want))
	if !ok || got != want {
		t.Fatalf("PrincipalFrom = %v, %v; want %v", got, ok, want)
	}
	if got.String() != "token:acc-1" {
		t.Fatalf("String = %q", got.String())
	}
}

func TestParsePermission(t *testing.T) {
	for _, p := range csi.Permissions() {
		got, err := csi.ParsePermission(string(p))
		if err != nil || got != p {
			t.Fatalf("ParsePermission(%q) = %q, %v", p, got, err)
		}
	}
	if _, err := csi.ParsePermission("volume-everything"); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("unknown permission: %v, want ErrInvalidRequest", err)
	}
}

func TestErrPermissionDenied_Sentinel(t *testing.T) {
	err := fmt.Errorf("read volume: %w", csi.ErrPermissionDenied)
	if csi.SentinelOf(err) != csi.ErrPermissionDenied {
		t.Fatalf("SentinelOf = %v", csi.SentinelOf(err))
	}
	if csi.SentinelByCode("permission_denied") != csi.ErrPermissionDenied {
		t.Fatal("SentinelByCode does not know permission_denied")
	}
	if csi.Classify(err) != csi.ClassFinal {
		t.Fatalf("class = %s, want final", csi.Classify(err))
	}
}
