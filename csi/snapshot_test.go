package csi_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
)

func TestSnapshotSentinels_CrossByCode(t *testing.T) {
	for _, s := range []*csi.Sentinel{csi.ErrSnapshotNotFound, csi.ErrSnapshotExists, csi.ErrSnapshotNotReady} {
		if got := csi.SentinelByCode(s.Code()); got != s {
			t.Errorf("SentinelByCode(%q) = %v, want %v: the sentinel would not cross a transport", s.Code(), got, s)
		}
		if got := csi.SentinelOf(fmt.Errorf("x: %w", s)); got != s {
			t.Errorf("SentinelOf(wrapped %v) = %v", s, got)
		}
	}
	if !csi.IsRetryable(csi.ErrSnapshotNotReady) || csi.IsRetryable(csi.ErrSnapshotNotFound) {
		t.Error("not-ready must be retryable and not-found final")
	}
}

func TestSnapshotName_Deterministic(t *testing.T) {
	a := csi.SnapshotName("default", "snap1")
	if a != csi.SnapshotName("default", "snap1") {
		t.Fatal("the same snapshot got two names: a retry would make a second snapshot")
	}
	for _, other := range []string{csi.SnapshotName("other", "snap1"), csi.SnapshotName("default", "snap2"), csi.SnapshotName("default/snap1", "")} {
		if other == a {
			t.Errorf("two snapshots share the name %q", a)
		}
	}
	if !strings.HasPrefix(a, "csikit-") || len(a) > 128 {
		t.Errorf("name %q: want a csikit- prefix and at most 128 bytes", a)
	}
}

func TestSnapshot_Copy(t *testing.T) {
	s := &csi.Snapshot{ID: "s", Parameters: map[string]string{"a": "1"}, Secrets: csi.Secrets{"k": "v"}}
	c := s.Copy()
	c.Parameters["a"] = "2"
	c.Secrets["k"] = "w"
	if s.Parameters["a"] != "1" || s.Secrets["k"] != "v" {
		t.Error("Copy shares maps with the original")
	}
	if (*csi.Snapshot)(nil).Copy() != nil {
		t.Error("nil copy is not nil")
	}
	if err := csi.ValidateSnapshotID("../x"); !errors.Is(err, csi.ErrInvalidID) {
		t.Errorf("ValidateSnapshotID(../x) = %v", err)
	}
}
