package rpcshimtest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"go.uber.org/goleak"

	"github.com/csikit/csikit/rpcshim"
	"github.com/csikit/csikit/rpcshim/rpcshimtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newInmem(*testing.T) *rpcshimtest.Harness {
	tr := rpcshim.NewInmemTransport()
	return &rpcshimtest.Harness{
		Transport: tr,
		Serve:     func(_ testing.TB, nodeID string, h rpcshim.Handler) { tr.Register(nodeID, h) },
		Down:      func(_ testing.TB, nodeID string) { tr.SetDown(nodeID, true) },
	}
}

func TestRun_InmemTransport(t *testing.T) { rpcshimtest.Run(t, newInmem) }

// flatErrors is a Transport that breaks the contract the way a host's
// first attempt might: it hands back the node's error as bare text,
// losing its sentinel and class.
type flatErrors struct{ rpcshim.Transport }

func (f flatErrors) Call(ctx context.Context, nodeID, method string, req, resp any) error {
	if err := f.Transport.Call(ctx, nodeID, method, req, resp); err != nil {
		return errors.New(err.Error())
	}
	return nil
}

// brokenEnv makes TestRun_BrokenChild run the suite against flatErrors.
const brokenEnv = "RPCSHIMTEST_BROKEN_CHILD"

// TestRun_BrokenChild is the child process of TestRun_BrokenTransport;
// it does nothing in a normal run.
func TestRun_BrokenChild(t *testing.T) {
	if os.Getenv(brokenEnv) == "" {
		t.Skip("runs only as TestRun_BrokenTransport's child")
	}
	rpcshimtest.Run(t, func(t *testing.T) *rpcshimtest.Harness {
		h := newInmem(t)
		h.Transport = flatErrors{h.Transport}
		return h
	})
}

// TestRun_BrokenTransport checks that the suite fails a transport that
// drops error identity, in every case that depends on it and in no
// other, so one run reports every broken rule. The suite runs in a
// child process, since a failing *testing.T would fail this test.
func TestRun_BrokenTransport(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestRun_BrokenChild$", "-test.v")
	cmd.Env = append(os.Environ(), brokenEnv+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("child: %v, want a failing exit; output:\n%s", err, out)
	}
	results := map[string]string{}
	for _, m := range regexp.MustCompile(`--- (PASS|FAIL): TestRun_BrokenChild/(\S+)`).FindAllSubmatch(out, -1) {
		results[string(m[2])] = string(m[1])
	}
	want := map[string]string{
		"typed_round_trip_through_a_Mux":              "PASS",
		"concurrent_calls_to_several_nodes":           "PASS",
		"unknown_method_is_not_supported":             "FAIL",
		"sentinel_keeps_identity_and_class":           "FAIL",
		"plugin_NotFound_keeps_its_code_for_teardown": "FAIL",
		"unknown_node_is_not_ready":                   "FAIL",
		"deadline_reaches_the_handler":                "FAIL",
	}
	for name, w := range want {
		if got := results[name]; got != w {
			t.Errorf("case %s: %q, want %s", name, got, w)
		}
	}
	if t.Failed() {
		t.Logf("child output:\n%s", out)
	}
}
