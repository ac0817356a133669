package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fake starts a monolith fake with the capabilities the lifecycle uses.
func fake(t *testing.T) *csitest.Plugin {
	return csitest.Start(t, csitest.Config{
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true},
		Node:       csi.NodeCapabilities{StageUnstageVolume: true},
	})
}

// csicheck runs the command and returns its exit code, stdout and
// stderr.
func csicheck(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// dirs gives the run a mount root and state directory in the test's
// temporary directory.
func dirs(t *testing.T) []string {
	d := t.TempDir()
	return []string{"--mount-root", filepath.Join(d, "mnt"), "--state-dir", filepath.Join(d, "state")}
}

func TestRun_Pass(t *testing.T) {
	p := fake(t)
	code, out, errOut := csicheck(t, append(dirs(t), "--endpoint", "unix://"+p.Endpoint(), "--data-check", "writer-only", "--verbose")...)
	if code != exitPass {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"STEP", "RESULT", "fingerprint", "publish (idempotent repeat)", "nothing left behind", "37 passed, 0 failed, 18 skipped"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FAIL") {
		t.Errorf("a failure in a passing run:\n%s", out)
	}
	if !strings.Contains(errOut, "csicheck: mount (allocation 1)\n") {
		t.Errorf("--verbose printed no progress:\n%s", errOut)
	}
	p.RequireNoViolations(t)
	if v := p.Volumes(); len(v) != 0 {
		t.Errorf("volumes left: %v", v)
	}
}

// A fake whose second identical NodePublishVolume answers AlreadyExists:
// the table shows the failure and csicheck exits 1.
func TestRun_Fail(t *testing.T) {
	p := fake(t)
	var mu sync.Mutex
	seen := map[string]bool{}
	p.SetHook(csitest.MethodNodePublishVolume, func(_ context.Context, _ string, req any) error {
		target := req.(*csipb.NodePublishVolumeRequest).GetTargetPath()
		mu.Lock()
		defer mu.Unlock()
		if seen[target] {
			return status.Error(codes.AlreadyExists, "already published")
		}
		seen[target] = true
		return nil
	})

	code, out, errOut := csicheck(t, append(dirs(t), "--endpoint", p.Endpoint(), "--data-check", "writer-only")...)

	if code != exitFail {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, exitFail, out, errOut)
	}
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "publish (idempotent repeat)") {
			line = l
		}
	}
	for _, want := range []string{"FAIL", "NodePublishVolume returned AlreadyExists; the spec requires OK when the volume is already published at target_path with identical arguments"} {
		if !strings.Contains(line, want) {
			t.Errorf("the failed step's row %q lacks %q:\n%s", line, want, out)
		}
	}
	if !strings.Contains(out, "36 passed, 1 failed, 18 skipped") {
		t.Errorf("summary:\n%s", out)
	}
}

func TestRun_JSON(t *testing.T) {
	p := fake(t)
	p.FailAlways(csitest.MethodControllerPublishVolume, codes.NotFound)

	code, out, errOut := csicheck(t, append(dirs(t), "--endpoint", p.Endpoint(), "--json")...)

	if code != exitFail {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var r jsonReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if r.Passed {
		t.Error("passed is true")
	}
	var claim *jsonStep
	skipped := 0
	for i, s := range r.Steps {
		if s.Step == "claim (allocation 1)" {
			claim = &r.Steps[i]
		}
		if s.Result == "skip" {
			skipped++
		}
	}
	if claim == nil || claim.Result != "fail" || len(claim.Failures) != 1 {
		t.Fatalf("claim step: %+v", claim)
	}
	f := claim.Failures[0]
	if f.Call != "ControllerPublishVolume" || f.Code != "NotFound" || !f.Fatal || !strings.Contains(f.Expect, "reserves NotFound") {
		t.Errorf("failure %+v", f)
	}
	if skipped == 0 {
		t.Error("no step was skipped after a fatal failure")
	}
}

// Secrets come from a file and reach the plugin, never the output.
func TestRun_SecretsFile(t *testing.T) {
	p := fake(t)
	var mu sync.Mutex
	var got []string
	p.SetHook(csitest.MethodNodeStageVolume, func(_ context.Context, _ string, req any) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, req.(*csipb.NodeStageVolumeRequest).GetSecrets()["token"])
		return status.Error(codes.PermissionDenied, "token s3cr3t-value is not valid")
	})
	file := filepath.Join(t.TempDir(), "secrets.json")
	if err := os.WriteFile(file, []byte(`{"token": "s3cr3t-value"}`), 0o600); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := csicheck(t, append(dirs(t), "--endpoint", p.Endpoint(), "--secrets-file", file, "--json", "--log-level", "trace")...)

	if code != exitFail {
		t.Fatalf("exit %d\n%s", code, out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || got[0] != "s3cr3t-value" {
		t.Errorf("the plugin got secrets %q", got)
	}
	if strings.Contains(out+errOut, "s3cr3t-value") {
		t.Errorf("a secret reached the output:\n%s\n%s", out, errOut)
	}
}

func TestRun_Usage(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`["hunter2", {"x": 1}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no endpoint", nil, "no endpoint"},
		{"unknown flag", []string{"--endpoint", "/a.sock", "--frobnicate"}, "flag provided but not defined"},
		{"stray argument", []string{"--endpoint", "/a.sock", "extra"}, "unexpected arguments"},
		{"bad access mode", []string{"--endpoint", "/a.sock", "--access-mode", "everyone"}, "--access-mode"},
		{"bad parameter", []string{"--endpoint", "/a.sock", "--parameter", "novalue"}, "not key=value"},
		{"bad data check", []string{"--endpoint", "/a.sock", "--data-check", "maybe"}, "--data-check"},
		{"bad log level", []string{"--endpoint", "/a.sock", "--log-level", "loud"}, "--log-level"},
		{"bad size", []string{"--endpoint", "/a.sock", "--test-volume-size", "big"}, "--test-volume-size"},
		{"bad --run", []string{"--endpoint", "/a.sock", "--run", "("}, "--run"},
		{"missing parameters file", []string{"--endpoint", "/a.sock", "--test-volume-parameters", "/nonexistent/p.yaml"}, "--test-volume-parameters"},
		{"missing secrets file", []string{"--endpoint", "/a.sock", "--secrets-file", "/nonexistent/s.json"}, "--secrets-file"},
		{"malformed secrets file", []string{"--endpoint", "/a.sock", "--secrets-file", bad}, "not a YAML or JSON object of strings"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := csicheck(t, c.args...)
			if code != exitUsage || !strings.Contains(errOut, c.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, exitUsage, c.want)
			}
			if out != "" {
				t.Errorf("stdout %q", out)
			}
			if strings.Contains(errOut, "hunter2") {
				t.Errorf("the secrets file's content reached stderr: %s", errOut)
			}
		})
	}
}

func TestRun_Help(t *testing.T) {
	code, _, errOut := csicheck(t, "--help")
	if code != exitPass || !strings.Contains(errOut, "usage: csicheck") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
