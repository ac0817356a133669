package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestRun_RefusesBadSettings(t *testing.T) {
	data := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"UnknownFlag", []string{"-nope"}, "flag provided but not defined"},
		{"ExtraArgument", []string{"serve"}, "unexpected arguments"},
		{"BadMode", []string{"-data-dir", data, "-mode", "both"}, `mode "both"`},
		{"BadMount", []string{"-data-dir", data, "-mount", "nfs"}, `mount method "nfs"`},
		{"BadLogLevel", []string{"-data-dir", data, "-log-level", "loud"}, `-log-level "loud"`},
		{"TCPEndpoint", []string{"-data-dir", data, "-endpoint", "tcp://127.0.0.1:1"}, "only unix sockets"},
		{"SplitNodeInMonolith", []string{"-data-dir", data, "-split-node"}, "SplitNode is for mode node only"},
		{"TopologyWithoutValue", []string{"-data-dir", data, "-topology", "zone"}, `-topology: invalid hostpath plugin config: topology segment "zone" is not key=value`},
		{"TopologyEmptyValue", []string{"-data-dir", data, "-topology", "zone=a,rack="}, `topology key "rack" has an empty value`},
		{"TopologyRepeatedKey", []string{"-data-dir", data, "-topology", "zone=a,zone=b"}, `topology key "zone" appears twice`},
		{"NegativeCapacity", []string{"-data-dir", data, "-capacity", "-1"}, "Capacity is -1"},
		{"CapacityNotANumber", []string{"-data-dir", data, "-capacity", "10G"}, `invalid value "10G" for flag -capacity`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := run(tc.args, &out); code != 2 {
				t.Fatalf("exit code %d, want 2; output:\n%s", code, out.String())
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Fatalf("output does not mention %q:\n%s", tc.want, out.String())
			}
		})
	}
}

func TestRun_Help(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"-h"}, &out); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	for _, flag := range []string{"-endpoint", "-data-dir", "-node-id", "-max-volumes", "-mode", "-controller-publish", "-staging", "-mount", "-split-node", "-topology", "-capacity"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("usage does not list %s", flag)
		}
	}
}

func Example_invalidMode() {
	code := run([]string{"-data-dir", os.TempDir(), "-mode", "both"}, os.Stdout)
	fmt.Println("exit code", code)
	// Output:
	// hostpathplugin: invalid hostpath plugin config: mode "both" is not one of monolith, controller, node
	// exit code 2
}
