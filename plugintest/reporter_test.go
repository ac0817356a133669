package plugintest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
	"github.com/csikit/csikit/plugintest"
)

func TestFailure_String(t *testing.T) {
	for _, c := range []struct {
		name string
		f    plugintest.Failure
		want string
	}{
		{"call with a code", plugintest.Failure{Step: "publish", Call: "NodePublishVolume", Code: csi.CodeInternal, Expect: "the spec requires OK"},
			`step "publish": NodePublishVolume returned Internal; the spec requires OK`},
		{"wrong result", plugintest.Failure{Step: "create", Call: "CreateVolume", Code: csi.CodeOK, Got: `with volume_id "b"`, Expect: "the same volume", Detail: "x"},
			`step "create": CreateVolume returned OK with volume_id "b"; the same volume (x)`},
		{"no call", plugintest.Failure{Step: "data", Got: "the file is missing", Expect: "the same files"},
			`step "data": the file is missing; the same files`},
		{"only an expectation", plugintest.Failure{Step: "release", Expect: "the claims freed", Detail: "timeout"},
			`step "release": the claims freed (timeout)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.f.String(); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestRecorder_Steps(t *testing.T) {
	r := &plugintest.Recorder{}
	r.Step("a")
	r.Step("b")
	r.Fail(plugintest.Failure{Step: "b", Expect: "one"})
	r.Fail(plugintest.Failure{Step: "b", Expect: "two"})
	r.Skip("b", "ignored: b failed")
	r.Skip("c", "a reason")
	r.Logf("note %d", 1)

	steps := r.Steps()
	got := make([]string, len(steps))
	for i, s := range steps {
		got[i] = s.Name + ":" + string(s.Status) + ":" + s.Reason
	}
	if want := []string{"a:pass:", "b:fail:", "c:skip:a reason"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("steps %v, want %v", got, want)
	}
	if n := len(steps[1].Failures); n != 2 {
		t.Errorf("step b has %d failures, want 2", n)
	}
	if !r.Failed() || len(r.Failures()) != 2 {
		t.Errorf("Failed %t, %d failures", r.Failed(), len(r.Failures()))
	}
	if n := r.Notes(); len(n) != 1 || n[0] != "note 1" {
		t.Errorf("notes %v", n)
	}
	// Steps returns copies.
	steps[1].Failures[0].Expect = "changed"
	if r.Failures()[0].Expect != "one" {
		t.Error("Steps shares the recorder's failures")
	}
}

// fakeTB records what TestReporter makes of a report.
type fakeTB struct {
	testing.TB
	errors, logs []string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.errors = append(f.errors, sprintf(format, args...))
}
func (f *fakeTB) Logf(format string, args ...any) { f.logs = append(f.logs, sprintf(format, args...)) }

func TestTestReporter_ErrorsAndLogs(t *testing.T) {
	tb := &fakeTB{}
	r := plugintest.TestReporter(tb)
	r.Step("mount")
	r.Fail(plugintest.Failure{Step: "mount", Call: "NodeStageVolume", Code: csi.CodeAborted, Expect: "OK"})
	r.Skip("data", "mount failed")
	r.Logf("kept %s", "/tmp/x")
	if len(tb.errors) != 1 || tb.errors[0] != `plugintest: step "mount": NodeStageVolume returned Aborted; OK` {
		t.Errorf("errors %q", tb.errors)
	}
	if want := []string{`plugintest: step "mount"`, `plugintest: step "data" skipped: mount failed`, "plugintest: kept /tmp/x"}; strings.Join(tb.logs, "|") != strings.Join(want, "|") {
		t.Errorf("logs %q, want %q", tb.logs, want)
	}
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
