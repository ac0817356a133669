package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/examples/refserver/api"
	"github.com/csikit/csikit/examples/refserver/cli"
)

// refusingServer answers the release endpoint with err (as the server
// would) for the first refusals requests, then with success.
func refusingServer(t *testing.T, refusals int64, err error) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/allocations/web-1/release" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if calls.Add(1) <= refusals {
			w.WriteHeader(api.StatusOf(err))
			_ = json.NewEncoder(w).Encode(api.ErrorBody(err))
			return
		}
		_ = json.NewEncoder(w).Encode(api.ReleaseResponse{Allocation: &csi.Allocation{ID: "web-1"}})
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// TestCLI_Retry_Retryable: a call the server refuses as retryable (no
// leader, leader unreachable: 503) is retried within -timeout, and the
// retry is said once on stderr however many there are.
func TestCLI_Retry_Retryable(t *testing.T) {
	srv, calls := refusingServer(t, 3, fmt.Errorf("%w: forwarded to leader s1: connection refused", csi.ErrUnavailable))
	out, errOut, code := runCLI(t, "release", "web-1", "-address", srv.URL, "-timeout", "30s")
	if code != cli.ExitOK || !strings.Contains(out, "Allocation web-1 stopped") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("%d calls, want 4 (3 refused, then the one that went through)", n)
	}
	if n := strings.Count(errOut, "retrying"); n != 1 || !strings.Contains(errOut, "connection refused; retrying until -timeout (30s) ends") {
		t.Errorf("stderr should say the retry once (said %d times):\n%s", n, errOut)
	}
}

// TestCLI_Retry_GivesUpAtTimeout: retries end with -timeout, and the
// error says so.
func TestCLI_Retry_GivesUpAtTimeout(t *testing.T) {
	srv, calls := refusingServer(t, 1<<30, fmt.Errorf("%w: no leader known", csi.ErrUnavailable))
	_, errOut, code := runCLI(t, "release", "web-1", "-address", srv.URL, "-timeout", "300ms")
	if code != cli.ExitError || !strings.Contains(errOut, "no leader known (gave up after") || !strings.Contains(errOut, "-timeout 300ms passed") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
	if calls.Load() < 2 {
		t.Errorf("%d calls: it did not retry", calls.Load())
	}
}

// TestCLI_Retry_NotRetryable: a final refusal is not retried, nor a
// node that is not ready (a person must start its agent).
func TestCLI_Retry_NotRetryable(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("%w: allocation web-1", csi.ErrAllocationNotFound),
		fmt.Errorf("%w: node node-2 is down", csi.ErrNodeNotReady),
	} {
		t.Run(err.Error(), func(t *testing.T) {
			srv, calls := refusingServer(t, 1<<30, err)
			_, errOut, code := runCLI(t, "release", "web-1", "-address", srv.URL, "-timeout", "30s")
			if code != cli.ExitError || calls.Load() != 1 || strings.Contains(errOut, "retrying") {
				t.Errorf("exit %d after %d calls, stderr:\n%s", code, calls.Load(), errOut)
			}
		})
	}
}
