package rpcshimtest

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/rpcshim"
)

// assertRemote checks what every handler error must keep on the caller's
// side: its message, its class and its sentinel.
func assertRemote(t *testing.T, err error, msg string, class csi.Class, sentinel error) {
	t.Helper()
	mustErr(t, err)
	expectEqual(t, err.Error(), msg)
	expectClass(t, err, class)
	if sentinel != nil {
		expectIs(t, err, sentinel)
	}
	var re *rpcshim.RemoteError
	if !errors.As(err, &re) {
		t.Errorf("error %v holds no *RemoteError", err)
	}
}

// Small checks for the cases; expectUnreachable states the Transport
// contract's rule for a node it cannot reach.

// must stops the test if err is not nil.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// mustErr stops the test if err is nil.
func mustErr(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("got no error, want one")
	}
}

func expectIs(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("error %v does not match %v", err, target)
	}
}

func expectClass(t testing.TB, err error, want csi.Class) {
	t.Helper()
	if got := csi.Classify(err); got != want {
		t.Errorf("Classify(%v) = %v, want %v", err, got, want)
	}
}

// expectUnreachable checks the transport contract's error for a node it
// cannot reach: ErrNodeNotReady or ErrUnavailable, Retryable, naming it.
func expectUnreachable(t testing.TB, err error, nodeID string) {
	t.Helper()
	mustErr(t, err)
	if !errors.Is(err, csi.ErrNodeNotReady) && !errors.Is(err, csi.ErrUnavailable) {
		t.Errorf("error %v matches neither ErrNodeNotReady nor ErrUnavailable", err)
	}
	expectClass(t, err, csi.ClassRetryable)
	expectContains(t, err.Error(), nodeID)
}

func expectEqual[T any](t testing.TB, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, want %#v", got, want)
	}
}

func expectContains(t testing.TB, s, sub string) {
	t.Helper()
	if !strings.Contains(s, sub) {
		t.Errorf("%q does not contain %q", s, sub)
	}
}
