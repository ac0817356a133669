package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/csikit/csikit/csi"
)

// secretKeys are the keys of csi-sanity's per-call secrets file
// ("CreateVolumeSecret: {…}"), which csicheck also reads.
var secretKeys = []string{
	"CreateVolumeSecret", "DeleteVolumeSecret", "ControllerPublishVolumeSecret",
	"ControllerUnpublishVolumeSecret", "ControllerValidateVolumeCapabilitiesSecret",
	"NodeStageVolumeSecret", "NodePublishVolumeSecret", "CreateSnapshotSecret",
	"DeleteSnapshotSecret", "ControllerExpandVolumeSecret", "NodeExpandVolumeSecret",
	"ListSnapshotsSecret", "ControllerModifyVolumeSecret",
}

// snapshotSecretKeys are the per-call keys whose calls csikit sends
// with a set of their own (plugintest.Config.CallSecrets), by RPC.
var snapshotSecretKeys = map[string]string{
	"CreateSnapshotSecret": "CreateSnapshot", "DeleteSnapshotSecret": "DeleteSnapshot", "ListSnapshotsSecret": "ListSnapshots",
}

// readSecretsFile reads a YAML or JSON file of secrets: one object of
// strings, passed to every call that takes secrets, or csi-sanity's
// per-call form (an object of such objects under keys like
// CreateVolumeSecret). The snapshot calls' sets become per-call secrets;
// csikit keeps one set of secrets per volume for the other calls, so
// their sets are merged and must agree: each key may take one value.
// Its errors name the file, never its content.
func readSecretsFile(path string) (csi.Secrets, map[string]csi.Secrets, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--secrets-file: %w", err)
	}
	var flat map[string]string
	if yaml.Unmarshal(b, &flat) == nil {
		return csi.Secrets(flat), nil, nil
	}
	var perCall map[string]map[string]string
	// The decoder's message may quote the content: leave it out.
	if yaml.Unmarshal(b, &perCall) != nil {
		return nil, nil, fmt.Errorf("%w: --secrets-file %s is not a YAML or JSON object of strings, nor csi-sanity's per-call form; fix the file (its content is not shown)", csi.ErrInvalidRequest, path)
	}
	out := csi.Secrets{}
	var calls map[string]csi.Secrets
	for call, set := range perCall {
		if rpc, ok := snapshotSecretKeys[call]; ok {
			if calls == nil {
				calls = map[string]csi.Secrets{}
			}
			calls[rpc] = csi.Secrets(set)
			continue
		}
		if !isSecretKey(call) {
			return nil, nil, fmt.Errorf("%w: --secrets-file %s: unknown key %q; use one object of strings, or the keys %s", csi.ErrInvalidRequest, path, call, strings.Join(secretKeys, ", "))
		}
		for k, v := range set {
			if old, ok := out[k]; ok && old != v {
				return nil, nil, fmt.Errorf("%w: --secrets-file %s: secret %q differs between calls; csikit passes one set of secrets to every call of a volume (only CreateSnapshotSecret, DeleteSnapshotSecret and ListSnapshotsSecret may differ)", csi.ErrInvalidRequest, path, k)
			}
			out[k] = v
		}
	}
	return out, calls, nil
}

func isSecretKey(k string) bool {
	for _, s := range secretKeys {
		if s == k {
			return true
		}
	}
	return false
}

// readParametersFile reads --test-volume-parameters: a YAML or JSON
// object of strings, CreateVolume's parameters.
func readParametersFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--test-volume-parameters: %w", err)
	}
	var p map[string]string
	if err := yaml.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%w: --test-volume-parameters %s is not a YAML or JSON object of strings: %v", csi.ErrInvalidRequest, path, err)
	}
	return p, nil
}

// parseSize reads a size in bytes with an optional suffix: K, M, G, T
// (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024).
func parseSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size: give bytes, or a number with K, M, G, T, Ki, Mi, Gi or Ti", s)
	}
	return n * mult, nil
}
