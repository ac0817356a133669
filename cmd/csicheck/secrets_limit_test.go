package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// csikit keeps one set of secrets per volume, so a per-call secrets file
// whose sets give one key two values is refused as a setup error that
// says why and names the key, never a value; sets that agree, or that
// give different keys, are merged.
func TestRun_SecretsFilePerCallLimit(t *testing.T) {
	p := fake(t)
	dir := t.TempDir()
	differ := filepath.Join(dir, "differ.yaml")
	if err := os.WriteFile(differ, []byte("CreateVolumeSecret:\n  token: value-one\nNodeStageVolumeSecret:\n  token: value-two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := csicheck(t, append(dirs(t), "--endpoint", p.Endpoint(), "--secrets-file", differ)...)
	if code != exitUsage {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, exitUsage, out, errOut)
	}
	if !strings.Contains(errOut, `"token" differs between calls`) || !strings.Contains(errOut, "one set of secrets") {
		t.Errorf("refusal does not say why:\n%s", errOut)
	}
	if strings.Contains(out+errOut, "value-one") || strings.Contains(out+errOut, "value-two") {
		t.Errorf("a secret reached the output:\n%s\n%s", out, errOut)
	}

	merge := filepath.Join(dir, "merge.yaml")
	if err := os.WriteFile(merge, []byte("CreateVolumeSecret:\n  token: same\nNodeStageVolumeSecret:\n  token: same\n  key: other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, _, err := parse([]string{"--endpoint", p.Endpoint(), "--secrets-file", merge}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Secrets) != 2 || f.Secrets["token"] != "same" || f.Secrets["key"] != "other" {
		t.Errorf("merged secrets have %d keys, want token and key", len(f.Secrets))
	}
}

// The snapshot calls' sets, which csikit carries apart from the
// volume's, may differ: they become the Config's CallSecrets.
func TestParse_SnapshotCallSecrets(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := os.WriteFile(file, []byte("CreateVolumeSecret:\n  token: vol\nCreateSnapshotSecret:\n  token: snap\nListSnapshotsSecret:\n  token: list\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := parse([]string{"--endpoint", "/x.sock", "--secrets-file", file}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Secrets["token"] != "vol" || len(cfg.Secrets) != 1 {
		t.Errorf("volume secrets have %d keys, want the volume's token", len(cfg.Secrets))
	}
	if len(cfg.CallSecrets) != 2 || cfg.CallSecrets["CreateSnapshot"]["token"] != "snap" || cfg.CallSecrets["ListSnapshots"]["token"] != "list" {
		t.Errorf("call secrets for %d calls, want CreateSnapshot and ListSnapshots with their own token", len(cfg.CallSecrets))
	}
}
