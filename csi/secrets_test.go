package csi_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/csikit/csikit/csi"
)

func TestSecrets_NeverPrinted(t *testing.T) {
	const secret = "hunter2-s3cr3t"
	s := csi.Secrets{"password": secret, "user": "admin"}
	v := &csi.Volume{ID: "vol", Secrets: s}
	outputs := map[string]string{}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		outputs["secrets "+verb] = fmt.Sprintf(verb, s)
		outputs["volume "+verb] = fmt.Sprintf(verb, v)
		outputs["volume value "+verb] = fmt.Sprintf(verb, *v)
	}
	outputs["String"] = s.String()
	outputs["GoString"] = s.GoString()
	outputs["error"] = fmt.Errorf("%w: publishing with %v", csi.ErrInvalidRequest, s).Error()
	outputs["wrapped error"] = errors.Join(fmt.Errorf("volume %+v", v)).Error()
	for name, out := range outputs {
		if strings.Contains(out, secret) || strings.Contains(out, fmt.Sprintf("%x", secret)) {
			t.Errorf("%s leaks the secret: %s", name, out)
		}
	}
	if !strings.Contains(outputs["secrets %v"], "redacted") {
		t.Errorf("%%v output %q does not say it is redacted", outputs["secrets %v"])
	}
	if s["password"] != secret {
		t.Fatal("redaction must not change the map")
	}
}

func TestSecrets_Copy(t *testing.T) {
	s := csi.Secrets{"k": "v"}
	c := s.Copy()
	c["k"] = "changed"
	if s["k"] != "v" {
		t.Fatal("Copy shares storage with the original")
	}
	if csi.Secrets(nil).Copy() != nil {
		t.Fatal("Copy of nil is not nil")
	}
	if got := fmt.Sprint(csi.Secrets{}); got != "Secrets{}" {
		t.Fatalf("empty secrets print %q", got)
	}
}
