package plugintest_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
	"github.com/csikit/csikit/examples/hostpathplugin/hostpath"
	"github.com/csikit/csikit/plugintest"
)

// Config.Secrets reach every call that takes secrets, and nothing the
// harness reports or logs, even when the plugin echoes them in an error.
func TestCheck_SecretsStayOut(t *testing.T) {
	const secret = "s3cr3t-token-value"
	p := full(t)
	methods := []string{csitest.MethodCreateVolume, csitest.MethodControllerPublishVolume, csitest.MethodNodeStageVolume,
		csitest.MethodNodePublishVolume, csitest.MethodControllerUnpublishVolume, csitest.MethodDeleteVolume}
	var mu sync.Mutex
	got := map[string]string{}     // secret received, by method
	published := map[string]bool{} // target paths
	for _, m := range methods {
		p.SetHook(m, func(_ context.Context, method string, req any) error {
			token := req.(interface{ GetSecrets() map[string]string }).GetSecrets()["token"]
			mu.Lock()
			defer mu.Unlock()
			if token != "" {
				got[method] = token
			}
			// Refuse the repeated publish, echoing the secret.
			if r, ok := req.(*csipb.NodePublishVolumeRequest); ok {
				if published[r.GetTargetPath()] {
					return status.Errorf(codes.AlreadyExists, "token %s: already published", token)
				}
				published[r.GetTargetPath()] = true
			}
			return nil
		})
	}
	var logs bytes.Buffer
	cfg := fakeConfig(p)
	cfg.Secrets = csi.Secrets{"token": secret}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &logs})

	r := check(t, cfg)

	mu.Lock()
	defer mu.Unlock()
	for _, m := range methods {
		if got[m] != secret {
			t.Errorf("%s got secret %q", m, got[m])
		}
	}
	f := requireOneFailure(t, r, `step "publish (idempotent repeat)": NodePublishVolume returned AlreadyExists`)
	var all strings.Builder
	for _, s := range r.Steps() {
		all.WriteString(s.Name + s.Reason)
	}
	all.WriteString(strings.Join(r.Notes(), "\n"))
	all.WriteString(f.String())
	all.WriteString(logs.String())
	if strings.Contains(all.String(), secret) {
		t.Errorf("the secret reached the report or the logs")
	}
	if !strings.Contains(f.Detail, "[redacted]") {
		t.Errorf("the plugin's echo of the secret was not redacted: %s", f.Detail)
	}
}

// Runs in parallel against one plugin each get their own volume, paths
// and stack, and all pass.
func TestRun_ParallelOnOnePlugin(t *testing.T) {
	hp := startHostpath(t, hostpath.Config{ControllerPublish: true, Staging: true})
	fk := csitest.Start(t, csitest.Config{
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true},
		Node:       csi.NodeCapabilities{StageUnstageVolume: true},
	})
	for range 4 {
		t.Run("hostpath", func(t *testing.T) {
			t.Parallel()
			plugintest.Run(t, plugintest.Config{Endpoint: hp})
		})
		t.Run("fake", func(t *testing.T) {
			t.Parallel()
			plugintest.Run(t, plugintest.Config{Endpoint: fk.Endpoint(), DataCheck: plugintest.DataWriterOnly})
		})
	}
	t.Cleanup(func() {
		fk.RequireNoViolations(t)
		if v := fk.Volumes(); len(v) != 0 {
			t.Errorf("volumes left: %d", len(v))
		}
	})
}
