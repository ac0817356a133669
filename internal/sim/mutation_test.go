package sim

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A mutation disables one guard of csikit by replacing one snippet of
// one source file. TestMutation builds the simulation against the
// mutated file through `go test -overlay`, so the tree is never edited,
// and reports which seeds catch it. TestMutations_Apply checks in every
// run that each snippet is still found exactly once, so a mutation
// cannot silently stop applying when its code changes.
//
//	CSIKIT_SIM_MUTATE=volumelock go test ./internal/sim -run 'TestMutation$' -v -timeout 0
//	CSIKIT_SIM_MUTATE=all go test ./internal/sim -run 'TestMutation$' -v -timeout 0
//
// CSIKIT_SIM_SEEDS and -steps apply to the mutated runs as to TestSim.
type mutation struct {
	name  string
	guard string
	file  string // from the module root
	old   string
	new   string
}

var mutations = []mutation{
	{
		name:  "attachcheck",
		guard: "the claim transaction refuses a claim on a node the volume is being detached from (csi.detachingFrom)",
		file:  "csi/claims.go",
		old:   "\tif err := detachingFrom(v, c); err != nil {\n",
		new:   "\tif err := detachingFrom(v, c); err != nil && c == nil {\n",
	},
	{
		name:  "volumelock",
		guard: "rpcshim.Server.lockVolume serializes the operations of one volume",
		file:  "rpcshim/server.go",
		old:   "\tunlock, err := s.vols.lock(ctx, volKey{namespace, id})\n",
		new:   "\tunlock, err := func() {}, ctx.Err()\n",
	},
	{
		name:  "nodedetached",
		guard: "claimgc checkpoints a claim NodeDetached only after its node step succeeded",
		file:  "claimgc/release.go",
		old:   "\t\tif r.nodeStep(ctx, v, c) {\n",
		new:   "\t\tif r.nodeStep(ctx, v, c) || c != nil {\n",
	},
	{
		name:  "intent",
		guard: "the mounter saves its intent durably before NodeStageVolume and NodePublishVolume",
		file:  "mounter/mount.go",
		old:   "\tif err := m.store.save(v.key, next); err != nil {\n\t\treturn err\n\t}\n\tv.rec = next\n\treturn nil\n",
		new:   "\tv.rec = next\n\treturn nil\n",
	},
}

const moduleRoot = "../.."

func TestMutations_Apply(t *testing.T) {
	for _, m := range mutations {
		src, err := os.ReadFile(filepath.Join(moduleRoot, m.file))
		if err != nil {
			t.Errorf("mutation %s: %v", m.name, err)
			continue
		}
		if n := strings.Count(string(src), m.old); n != 1 {
			t.Errorf("mutation %s: its snippet occurs %d times in %s, want once; update the mutation to the guard's code", m.name, n, m.file)
		}
	}
}

var failedSeed = regexp.MustCompile(`--- FAIL: TestSim/seed=(\d+)`)

// TestMutation runs the simulation once against each mutation named by
// CSIKIT_SIM_MUTATE (a name, a comma-separated list, or all) and fails
// for a mutation that no seed catches.
func TestMutation(t *testing.T) {
	want := os.Getenv("CSIKIT_SIM_MUTATE")
	if want == "" {
		t.Skip("set CSIKIT_SIM_MUTATE to a mutation name (attachcheck, volumelock, nodedetached, intent) or all")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	for _, m := range mutations {
		if want != "all" && !slices.Contains(strings.Split(want, ","), m.name) {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			overlay := writeOverlay(t, m)
			args := []string{"test", "-overlay", overlay, "-count=1", "-timeout=0", ".", "-run", "TestSim$", "-v", "-rerun", "1"}
			if *flagSteps > 0 {
				args = append(args, "-steps", strconv.Itoa(*flagSteps))
			}
			cmd := exec.Command(goTool, args...)
			cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CSIKIT_SIM_MUTATE=") })
			out, _ := cmd.CombinedOutput()
			var seeds []string
			for _, sm := range failedSeed.FindAllStringSubmatch(string(out), -1) {
				seeds = append(seeds, sm[1])
			}
			if len(seeds) == 0 {
				t.Errorf("mutation %s (%s): no seed caught it", m.name, m.guard)
				return
			}
			t.Logf("mutation %s (%s) caught by %d seeds: %s", m.name, m.guard, len(seeds), strings.Join(seeds, " "))
		})
	}
}

// writeOverlay writes m's mutated file and the overlay that swaps it in.
func writeOverlay(t *testing.T, m mutation) string {
	t.Helper()
	orig, err := filepath.Abs(filepath.Join(moduleRoot, m.file))
	must(t, err)
	src, err := os.ReadFile(orig)
	must(t, err)
	if strings.Count(string(src), m.old) != 1 {
		t.Fatalf("mutation %s no longer applies to %s", m.name, m.file)
	}
	dir := t.TempDir()
	mutated := filepath.Join(dir, filepath.Base(m.file))
	must(t, os.WriteFile(mutated, []byte(strings.Replace(string(src), m.old, m.new, 1)), 0o600))
	b, err := json.Marshal(map[string]map[string]string{"Replace": {orig: mutated}})
	must(t, err)
	overlay := filepath.Join(dir, "overlay.json")
	must(t, os.WriteFile(overlay, b, 0o600))
	return overlay
}
