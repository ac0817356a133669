package csi_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/csikit/csikit/csi"
)

func TestClassOfCode(t *testing.T) {
	cases := map[csi.Code]csi.Class{
		csi.CodeUnavailable:        csi.ClassRetryable,
		csi.CodeResourceExhausted:  csi.ClassRetryable,
		csi.CodeAborted:            csi.ClassRetryable,
		csi.CodeDeadlineExceeded:   csi.ClassUncertain,
		csi.CodeCanceled:           csi.ClassUncertain,
		csi.CodeInvalidArgument:    csi.ClassFinal,
		csi.CodeNotFound:           csi.ClassFinal,
		csi.CodeAlreadyExists:      csi.ClassFinal,
		csi.CodeFailedPrecondition: csi.ClassFinal,
		csi.CodeOutOfRange:         csi.ClassFinal,
		csi.CodeUnimplemented:      csi.ClassFinal,
		csi.CodeInternal:           csi.ClassFinal,
		csi.CodePermissionDenied:   csi.ClassFinal,
		csi.CodeUnknown:            csi.ClassFinal,
	}
	for code, want := range cases {
		t.Run(code.String(), func(t *testing.T) {
			if got := csi.ClassOfCode(code); got != want {
				t.Fatalf("ClassOfCode(%s) = %s, want %s", code, got, want)
			}
			err := fmt.Errorf("node step: %w", &csi.RPCError{Method: "NodeUnpublishVolume", Code: code, Message: "m"})
			if got := csi.Classify(err); got != want {
				t.Fatalf("Classify(wrapped %s) = %s, want %s", code, got, want)
			}
			if csi.CodeOf(err) != code {
				t.Fatalf("CodeOf lost the code: %s", csi.CodeOf(err))
			}
			if csi.IsRetryable(err) != (want != csi.ClassFinal) {
				t.Fatalf("IsRetryable disagrees with class %s", want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want csi.Class
	}{
		{"plugin not found is retryable", fmt.Errorf("node n1: %w", csi.ErrPluginNotFound), csi.ClassRetryable},
		{"no controller is retryable", csi.ErrNoController, csi.ClassRetryable},
		{"volume not found is final", fmt.Errorf("x: %w", csi.ErrVolumeNotFound), csi.ClassFinal},
		{"deadline is uncertain", fmt.Errorf("x: %w", context.DeadlineExceeded), csi.ClassUncertain},
		{"canceled is uncertain", context.Canceled, csi.ClassUncertain},
		{"plain error is final", errors.New("boom"), csi.ClassFinal},
		{"first classed error wins", fmt.Errorf("%w", &csi.RPCError{Code: csi.CodeUnavailable, Err: csi.ErrInvalidRequest}), csi.ClassRetryable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := csi.Classify(tc.err); got != tc.want {
				t.Fatalf("Classify(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
	if csi.IsRetryable(nil) {
		t.Fatal("nil is not retryable")
	}
}

func TestSentinelByCode_RoundTrip(t *testing.T) {
	for _, s := range []*csi.Sentinel{csi.ErrPluginNotFound, csi.ErrNoController, csi.ErrMaxClaims, csi.ErrInvalidID, csi.ErrVolumeNotFound} {
		got := csi.SentinelByCode(s.Code())
		if got != s {
			t.Fatalf("SentinelByCode(%q) = %v", s.Code(), got)
		}
		wrapped := fmt.Errorf("ctx: %w", s)
		if csi.SentinelOf(wrapped) != s {
			t.Fatalf("SentinelOf(%v) = %v", wrapped, csi.SentinelOf(wrapped))
		}
	}
	if csi.SentinelByCode("nope") != nil {
		t.Fatal("unknown code found a sentinel")
	}
	if csi.SentinelOf(errors.New("x")) != nil {
		t.Fatal("plain error has a sentinel")
	}
}

func TestTeardownDone(t *testing.T) {
	if !csi.TeardownDone(nil) {
		t.Fatal("nil is done")
	}
	if !csi.TeardownDone(&csi.RPCError{Method: "NodeUnstageVolume", Code: csi.CodeNotFound}) {
		t.Fatal("NotFound during teardown means done")
	}
	if csi.TeardownDone(&csi.RPCError{Code: csi.CodeUnavailable}) {
		t.Fatal("Unavailable is not done")
	}
	if csi.TeardownDone(errors.New("x")) {
		t.Fatal("unknown error is not done")
	}
}

func TestClass_TextRoundTrip(t *testing.T) {
	for _, c := range []csi.Class{csi.ClassFinal, csi.ClassRetryable, csi.ClassUncertain} {
		b, err := c.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var got csi.Class
		if err := got.UnmarshalText(b); err != nil || got != c {
			t.Fatalf("round trip of %s: %v, %v", c, got, err)
		}
	}
	if _, err := csi.Class(9).MarshalText(); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("unknown class marshals: %v", err)
	}
	var c csi.Class
	if err := c.UnmarshalText([]byte("maybe")); !errors.Is(err, csi.ErrInvalidRequest) {
		t.Fatalf("unknown class name: %v", err)
	}
}
