package plugintest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/plugintest"
)

// Config.CallSecrets reach the snapshot calls, which csikit sends with a
// set of their own, while every volume call keeps Config.Secrets.
func TestCheck_CallSecrets(t *testing.T) {
	p := csitest.Start(t, everyCapability())
	var mu sync.Mutex
	got := map[string][]string{}
	type secreted interface{ GetSecrets() map[string]string }
	for _, m := range []string{csitest.MethodCreateVolume, csitest.MethodNodeStageVolume, csitest.MethodCreateSnapshot, csitest.MethodDeleteSnapshot, csitest.MethodListSnapshots} {
		p.SetHook(m, func(_ context.Context, _ string, req any) error {
			mu.Lock()
			defer mu.Unlock()
			got[m] = append(got[m], req.(secreted).GetSecrets()["token"])
			return nil
		})
	}
	r := check(t, plugintest.Config{Endpoint: p.Endpoint(), DataCheck: plugintest.DataWriterOnly,
		Secrets: csi.Secrets{"token": "vol"},
		CallSecrets: map[string]csi.Secrets{
			"CreateSnapshot": {"token": "create-snap"}, "DeleteSnapshot": {"token": "delete-snap"}, "ListSnapshots": {"token": "list-snap"},
		}})
	if r.Failed() {
		t.Fatalf("failures: %v", failuresOf(r))
	}
	mu.Lock()
	defer mu.Unlock()
	for m, want := range map[string]string{
		csitest.MethodCreateVolume: "vol", csitest.MethodNodeStageVolume: "vol", csitest.MethodCreateSnapshot: "create-snap",
		csitest.MethodDeleteSnapshot: "delete-snap", csitest.MethodListSnapshots: "list-snap",
	} {
		// Some coverage rows send no secrets at all; none sends the
		// wrong set.
		if !slices.Contains(got[m], want) {
			t.Errorf("no %s call with token %q: got %q", m, want, got[m])
		}
		for _, s := range got[m] {
			// The csikit Server deletes a snapshot with the secrets
			// it was created with (the snapshot keeps them), so the
			// volume-operations step's DeleteSnapshot carries those.
			if m == csitest.MethodDeleteSnapshot && s == "create-snap" {
				continue
			}
			if s != want && s != "" {
				t.Errorf("%s got token %q, want %q", m, s, want)
			}
		}
	}
}

// A CallSecrets key for a volume call, which csikit sends with the
// volume's one set, is refused before any call, naming the setting.
func TestCheck_CallSecretsVolumeCallRefused(t *testing.T) {
	err := plugintest.Check(t.Context(), plugintest.Config{Endpoint: "/nonexistent.sock",
		CallSecrets: map[string]csi.Secrets{"NodeStageVolume": {"token": "x"}}}, &plugintest.Recorder{})
	if !errors.Is(err, csi.ErrInvalidRequest) || !strings.Contains(err.Error(), "Config.CallSecrets") || strings.Contains(err.Error(), `"x"`) {
		t.Errorf("Check = %v, want ErrInvalidRequest naming Config.CallSecrets", err)
	}
}
