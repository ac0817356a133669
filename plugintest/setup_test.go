package plugintest_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csikit/csikit/plugintest"
)

// A missing socket is a setup error, named in the caller's words, before
// any step runs.
func TestCheck_CannotConnect(t *testing.T) {
	sock := filepath.Join(shortDir(t), "none.sock")
	r := &plugintest.Recorder{}
	err := plugintest.Check(t.Context(), plugintest.Config{Endpoint: sock, SettingNames: map[string]string{"Endpoint": "--endpoint"}}, r)
	if !errors.Is(err, plugintest.ErrCannotConnect) || !strings.Contains(err.Error(), "cannot connect to "+sock+" (--endpoint): no such file or directory") {
		t.Fatalf("Check = %v", err)
	}
	if len(r.Steps()) != 0 {
		t.Errorf("steps ran: %v", r.Steps())
	}
	err = plugintest.Check(t.Context(), plugintest.Config{Endpoint: sock}, r)
	if !strings.Contains(err.Error(), "(Config.Endpoint)") {
		t.Errorf("without SettingNames the error names the field: %v", err)
	}
}
