package main

import (
	"encoding/xml"
	"fmt"
	"os"

	"github.com/csikit/csikit/plugintest"
)

// The JUnit XML a CI reads: one testsuite, one testcase per step.
type junitSuite struct {
	XMLName  xml.Name    `xml:"testsuite"`
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Failures  []junitResult `xml:"failure,omitempty"`
	Skipped   *junitResult  `xml:"skipped,omitempty"`
}

type junitResult struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// writeJUnit writes the steps as JUnit XML to path.
func (t *table) writeJUnit(path string) error {
	s := junitSuite{Name: "csicheck"}
	for _, st := range t.Steps() {
		c := junitCase{Name: st.Name, ClassName: "csicheck"}
		switch st.Status {
		case plugintest.StatusFail:
			s.Failures++
			for _, f := range st.Failures {
				c.Failures = append(c.Failures, junitResult{Message: detail(f), Type: f.Call, Text: f.String()})
			}
		case plugintest.StatusSkip:
			s.Skipped++
			c.Skipped = &junitResult{Message: st.Reason}
		}
		s.Cases = append(s.Cases, c)
	}
	s.Tests = len(s.Cases)
	b, err := xml.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append([]byte(xml.Header), append(b, '\n')...), 0o644); err != nil {
		return fmt.Errorf("--junit: %w", err)
	}
	return nil
}
