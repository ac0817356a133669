package cli

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestNewLogger_JSON(t *testing.T) {
	var b bytes.Buffer
	l, err := newLogger("refserver", "info", true, &b)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("health: volume missing on the backend", "volume", "v1", "node", "n1")
	var line map[string]any
	if err := json.Unmarshal(b.Bytes(), &line); err != nil {
		t.Fatalf("-log-json wrote %q, not a JSON line: %v", b.String(), err)
	}
	if line["@message"] != "health: volume missing on the backend" || line["volume"] != "v1" || line["@level"] != "info" {
		t.Errorf("JSON line = %v", line)
	}
}
