package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/csikit/csikit/plugintest"
)

// table is csicheck's Reporter: it records every step (through the
// embedded Recorder), shows each as it starts with --verbose, and prints
// a pass/fail table or JSON at the end.
type table struct {
	*plugintest.Recorder
	progress io.Writer
}

var _ plugintest.Reporter = (*table)(nil)

// Step implements plugintest.Reporter.
func (t *table) Step(name string) {
	if t.progress != nil {
		fmt.Fprintf(t.progress, "csicheck: %s\n", name)
	}
	t.Recorder.Step(name)
}

// detail is a failure without its "step …: " prefix, for a table row.
func detail(f plugintest.Failure) string {
	return strings.TrimPrefix(f.String(), fmt.Sprintf("step %q: ", f.Step))
}

func (t *table) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tRESULT\tDETAIL")
	var pass, fail, skip int
	for _, s := range t.Steps() {
		switch s.Status {
		case plugintest.StatusPass:
			pass++
			fmt.Fprintf(tw, "%s\tpass\t\n", s.Name)
		case plugintest.StatusSkip:
			skip++
			fmt.Fprintf(tw, "%s\tskip\t%s\n", s.Name, s.Reason)
		default:
			fail++
			for i, f := range s.Failures {
				name := s.Name
				if i > 0 {
					name = ""
				}
				fmt.Fprintf(tw, "%s\tFAIL\t%s\n", name, detail(f))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range t.Notes() {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	_, err := fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", pass, fail, skip)
	return err
}

// jsonReport is the --json output.
type jsonReport struct {
	Passed bool       `json:"passed"`
	Steps  []jsonStep `json:"steps"`
	Notes  []string   `json:"notes,omitempty"`
}

type jsonStep struct {
	Step     string        `json:"step"`
	Result   string        `json:"result"`
	Reason   string        `json:"reason,omitempty"`
	Failures []jsonFailure `json:"failures,omitempty"`
}

type jsonFailure struct {
	Call   string `json:"call,omitempty"`
	Code   string `json:"code,omitempty"`
	Got    string `json:"got,omitempty"`
	Expect string `json:"expect"`
	Detail string `json:"detail,omitempty"`
	Fatal  bool   `json:"fatal,omitempty"`
	// Text is the whole failure as one line.
	Text string `json:"text"`
}

func (t *table) writeJSON(w io.Writer) error {
	out := jsonReport{Passed: !t.Failed(), Steps: []jsonStep{}, Notes: t.Notes()}
	for _, s := range t.Steps() {
		js := jsonStep{Step: s.Name, Result: string(s.Status), Reason: s.Reason}
		for _, f := range s.Failures {
			jf := jsonFailure{Call: f.Call, Got: f.Got, Expect: f.Expect, Detail: f.Detail, Fatal: f.Fatal, Text: f.String()}
			if f.Call != "" {
				jf.Code = f.Code.String()
			}
			js.Failures = append(js.Failures, jf)
		}
		out.Steps = append(out.Steps, js)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
