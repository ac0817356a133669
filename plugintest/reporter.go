package plugintest

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/csikit/csikit/csi"
)

// Reporter receives the results of a lifecycle run. The lifecycle calls
// it from one goroutine at a time: Step when a check starts, then Fail
// for every way it failed or Skip when it could not run; a step with
// neither passed. Step names are unique within a run (for example
// "publish (idempotent repeat)"); Fail and Skip name the step they are
// about. Logf carries progress notes.
//
// TestReporter adapts a testing.TB; Recorder keeps everything for later
// assertions or a table. The strings never hold a secret.
type Reporter interface {
	Step(name string)
	Fail(f Failure)
	Skip(step, reason string)
	Logf(format string, args ...any)
}

// Failure is one way a step failed.
type Failure struct {
	// Step is the step's name.
	Step string
	// Call is the CSI method whose answer failed the check, or "" when
	// the failure is not one call's answer (a file that could not be
	// read, a plugin that never became healthy).
	Call string
	// Code is the gRPC code Call returned (csi.CodeOK when the call
	// succeeded but its result was wrong).
	Code csi.Code
	// Got describes a wrong result of a successful call, for example
	// `with volume_id "vol-2"`; empty otherwise.
	Got string
	// Expect is what the spec (or, where it says so, the harness)
	// requires instead.
	Expect string
	// Detail is the plugin's message or the error's text, if any.
	Detail string
	// Fatal reports that the steps depending on this one were skipped.
	Fatal bool
}

// String is the failure as one line:
//
//	step "publish (idempotent repeat)": NodePublishVolume returned AlreadyExists; the spec requires OK when …
func (f Failure) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %q: ", f.Step)
	switch {
	case f.Call != "":
		fmt.Fprintf(&b, "%s returned %s", f.Call, f.Code)
		if f.Got != "" {
			b.WriteString(" " + f.Got)
		}
		b.WriteString("; ")
	case f.Got != "":
		b.WriteString(f.Got + "; ")
	}
	b.WriteString(f.Expect)
	if f.Detail != "" {
		fmt.Fprintf(&b, " (%s)", f.Detail)
	}
	return b.String()
}

// Status is the outcome of a step.
type Status string

// Step outcomes.
const (
	StatusPass Status = "pass"
	StatusFail Status = "fail"
	StatusSkip Status = "skip"
)

// StepResult is one step as a Recorder saw it.
type StepResult struct {
	Name     string
	Status   Status
	Failures []Failure `json:",omitempty"`
	// Reason says why a skipped step did not run.
	Reason string `json:",omitempty"`
}

// Recorder is a Reporter that keeps every step, failure and note, for
// tests that expect failures (a misbehaving plugin) and for tools that
// print a table. The zero value is ready to use; it is safe for
// concurrent use.
type Recorder struct {
	mu    sync.Mutex
	steps []StepResult
	index map[string]int
	notes []string
}

var _ Reporter = (*Recorder)(nil)

// step returns the result of name, adding it when new; r.mu is held.
func (r *Recorder) stepLocked(name string) *StepResult {
	if i, ok := r.index[name]; ok {
		return &r.steps[i]
	}
	if r.index == nil {
		r.index = make(map[string]int)
	}
	r.index[name] = len(r.steps)
	r.steps = append(r.steps, StepResult{Name: name, Status: StatusPass})
	return &r.steps[len(r.steps)-1]
}

// Step implements Reporter.
func (r *Recorder) Step(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stepLocked(name)
}

// Fail implements Reporter.
func (r *Recorder) Fail(f Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stepLocked(f.Step)
	s.Status = StatusFail
	s.Failures = append(s.Failures, f)
}

// Skip implements Reporter. A step that already failed stays failed.
func (r *Recorder) Skip(step, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stepLocked(step)
	if s.Status != StatusFail {
		s.Status, s.Reason = StatusSkip, reason
	}
}

// Logf implements Reporter.
func (r *Recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// Steps returns a copy of the steps in the order they started.
func (r *Recorder) Steps() []StepResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]StepResult, len(r.steps))
	for i, s := range r.steps {
		s.Failures = append([]Failure(nil), s.Failures...)
		out[i] = s
	}
	return out
}

// Failures returns every failure in the order reported.
func (r *Recorder) Failures() []Failure {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Failure
	for _, s := range r.steps {
		out = append(out, s.Failures...)
	}
	return out
}

// Failed reports whether any step failed.
func (r *Recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.steps {
		if s.Status == StatusFail {
			return true
		}
	}
	return false
}

// Notes returns the Logf lines.
func (r *Recorder) Notes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.notes...)
}

// TestReporter adapts t: each failure is a t.Errorf, so one run reports
// every failure; skipped steps and notes are t.Logf lines.
func TestReporter(t testing.TB) Reporter { return tbReporter{t} }

type tbReporter struct{ t testing.TB }

func (r tbReporter) Step(name string) {
	r.t.Helper()
	r.t.Logf("plugintest: step %q", name)
}

func (r tbReporter) Fail(f Failure) {
	r.t.Helper()
	r.t.Errorf("plugintest: %s", f)
}

func (r tbReporter) Skip(step, reason string) {
	r.t.Helper()
	r.t.Logf("plugintest: step %q skipped: %s", step, reason)
}

func (r tbReporter) Logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("plugintest: "+format, args...)
}
