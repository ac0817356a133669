package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/csitest"
)

// What a CI passes: check selection, JUnit output, the test volume's
// size and parameters, and csi-sanity's per-call secrets in YAML.
func TestRun_CIOptions(t *testing.T) {
	p := csitest.Start(t, csitest.Config{
		Controller: csi.ControllerCapabilities{CreateDeleteVolume: true, PublishUnpublishVolume: true, ListVolumes: true, CreateDeleteSnapshot: true, ListSnapshots: true},
		Node:       csi.NodeCapabilities{StageUnstageVolume: true},
	})
	dir := t.TempDir()
	params := filepath.Join(dir, "params.yaml")
	secrets := filepath.Join(dir, "secrets.yaml")
	junit := filepath.Join(dir, "junit.xml")
	write := func(path, content string) {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(params, "pool: fast\nzone: a\n")
	write(secrets, "CreateVolumeSecret:\n  token: s3cr3t\nNodeStageVolumeSecret:\n  token: s3cr3t\n")

	code, out, errOut := csicheck(t, append(dirs(t), "--endpoint", p.Endpoint(), "--data-check", "writer-only",
		"--run", "^List", "--skip", "paging", "--junit", junit, "--test-volume-size", "2Mi",
		"--test-volume-parameters", params, "--parameter", "zone=b", "--secrets-file", secrets)...)
	if code != exitPass {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "ListVolumes (invalid starting token)") || strings.Contains(out, "ListVolumes (paging)") || strings.Contains(out, "GetCapacity") {
		t.Errorf("--run/--skip did not select the rows:\n%s", out)
	}
	creates := p.CallsTo(csitest.MethodCreateVolume)
	if len(creates) == 0 {
		t.Fatal("no CreateVolume")
	}
	req := creates[0].Request.(*csipb.CreateVolumeRequest)
	if req.GetCapacityRange().GetRequiredBytes() != 2<<20 || req.GetParameters()["pool"] != "fast" || req.GetParameters()["zone"] != "b" {
		t.Errorf("CreateVolume got capacity %v, parameters %v", req.GetCapacityRange(), req.GetParameters())
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var suite junitSuite
	if err := xml.Unmarshal(b, &suite); err != nil {
		t.Fatalf("--junit wrote no JUnit XML: %v\n%s", err, b)
	}
	if suite.Tests == 0 || suite.Tests != len(suite.Cases) || suite.Failures != 0 || suite.Cases[0].Name != "fingerprint" {
		t.Errorf("JUnit suite %+v", suite)
	}
	if strings.Contains(string(b)+out+errOut, "s3cr3t") {
		t.Error("a secret reached the output")
	}
}

func TestRun_JUnitFailures(t *testing.T) {
	p := fake(t)
	p.FailAlways(csitest.MethodControllerPublishVolume, 5) // NotFound
	junit := filepath.Join(t.TempDir(), "junit.xml")
	code, out, _ := csicheck(t, append(dirs(t), "--endpoint", p.Endpoint(), "--junit", junit)...)
	if code != exitFail {
		t.Fatalf("exit %d\n%s", code, out)
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var suite junitSuite
	if err := xml.Unmarshal(b, &suite); err != nil {
		t.Fatal(err)
	}
	if suite.Failures == 0 || suite.Skipped == 0 || !strings.Contains(string(b), "ControllerPublishVolume returned NotFound") {
		t.Errorf("JUnit lacks the failure and the skipped steps:\n%s", b)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "512": 512, "1Ki": 1024, "2Mi": 2 << 20, "1G": 1e9, "3Gi": 3 << 30} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1", "1.5G", "99999999999Ti"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) took it", bad)
		}
	}
}

// --faults and --restart-cmd: the command runs once, and a plugin that
// keeps its state passes.
func TestRun_FaultsAndRestartCmd(t *testing.T) {
	p := fake(t)
	marker := filepath.Join(t.TempDir(), "restarted")
	code, out, errOut := csicheck(t, append(dirs(t), "--endpoint", p.Endpoint(), "--data-check", "writer-only", "--faults",
		"--restart-cmd", "echo restarting; touch "+marker)...)
	if code != exitPass {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"restart the plugin", "restart the node agent (after the first mount)", "cancelled call retried (NodePublishVolume)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(marker); err != nil || !strings.Contains(errOut, "restarting") {
		t.Errorf("--restart-cmd did not run: %v\n%s", err, errOut)
	}
	code, out, _ = csicheck(t, append(dirs(t), "--endpoint", p.Endpoint(), "--data-check", "writer-only", "--restart-cmd", "exit 3")...)
	if code != exitFail || !strings.Contains(out, "--restart-cmd \"exit 3\"") {
		t.Errorf("a failing --restart-cmd: exit %d\n%s", code, out)
	}
}
