package plugintest

import (
	"errors"
	"regexp"
)

// configField matches a Config field named in a message.
var configField = regexp.MustCompile(`Config\.([A-Z][A-Za-z]*)`)

// setting is how the caller calls the Config field: its entry in
// Config.SettingNames (csicheck's "--volume-id"), or "Config.VolumeID".
func (c Config) setting(field string) string {
	if n, ok := c.SettingNames[field]; ok {
		return n
	}
	return "Config." + field
}

// rename rewrites every "Config.Field" in s with c.setting, so that a
// message tells a csicheck user the flag to change.
func (c Config) rename(s string) string {
	if len(c.SettingNames) == 0 {
		return s
	}
	return configField.ReplaceAllStringFunc(s, func(m string) string {
		return c.setting(m[len("Config."):])
	})
}

// renamedError is an error whose text names the caller's settings; it
// unwraps to the original, so errors.Is still sees the sentinels.
type renamedError struct {
	text string
	err  error
}

func (e *renamedError) Error() string { return e.text }
func (e *renamedError) Unwrap() error { return e.err }

// renameErr applies rename to err's text.
func (c Config) renameErr(err error) error {
	if err == nil || len(c.SettingNames) == 0 {
		return err
	}
	var r *renamedError
	if errors.As(err, &r) {
		return err
	}
	return &renamedError{text: c.rename(err.Error()), err: err}
}
