package hostpath_test

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// must holds the few assertions these tests use; each stops the test at
// the first failure. (testify is in go.mod, but its yaml dependency is
// missing from the shared go.sum.)
var must asserts

type asserts struct{}

func fail(t testing.TB, what string, msg []any) {
	t.Helper()
	if len(msg) > 0 {
		if f, ok := msg[0].(string); ok {
			what += ": " + fmt.Sprintf(f, msg[1:]...)
		}
	}
	t.Fatal(what)
}

func (asserts) NoError(t testing.TB, err error, msg ...any) {
	t.Helper()
	if err != nil {
		fail(t, fmt.Sprintf("unexpected error: %v", err), msg)
	}
}

func (asserts) Error(t testing.TB, err error, msg ...any) {
	t.Helper()
	if err == nil {
		fail(t, "want an error, got nil", msg)
	}
}

func (asserts) ErrorIs(t testing.TB, err, target error, msg ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		fail(t, fmt.Sprintf("error %v is not %v", err, target), msg)
	}
}

func (asserts) ErrorContains(t testing.TB, err error, sub string, msg ...any) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), sub) {
		fail(t, fmt.Sprintf("error %v does not contain %q", err, sub), msg)
	}
}

func (asserts) Equal(t testing.TB, want, got any, msg ...any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		fail(t, fmt.Sprintf("want %#v, got %#v", want, got), msg)
	}
}

func (asserts) True(t testing.TB, ok bool, msg ...any) {
	t.Helper()
	if !ok {
		fail(t, "want true", msg)
	}
}

func (asserts) False(t testing.TB, ok bool, msg ...any) {
	t.Helper()
	if ok {
		fail(t, "want false", msg)
	}
}

func (asserts) Len(t testing.TB, v any, n int, msg ...any) {
	t.Helper()
	if l := reflect.ValueOf(v).Len(); l != n {
		fail(t, fmt.Sprintf("want length %d, got %d: %v", n, l, v), msg)
	}
}

func (asserts) Empty(t testing.TB, v any, msg ...any) {
	t.Helper()
	if v != nil && reflect.ValueOf(v).Len() != 0 {
		fail(t, fmt.Sprintf("want empty, got %v", v), msg)
	}
}

func (asserts) NotEmpty(t testing.TB, v any, msg ...any) {
	t.Helper()
	if v == nil || reflect.ValueOf(v).Len() == 0 {
		fail(t, "want something, got nothing", msg)
	}
}

func (asserts) Regexp(t testing.TB, re, s string, msg ...any) {
	t.Helper()
	if !regexp.MustCompile(re).MatchString(s) {
		fail(t, fmt.Sprintf("%q does not match %s", s, re), msg)
	}
}

func (asserts) DirExists(t testing.TB, path string, msg ...any) {
	t.Helper()
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		fail(t, fmt.Sprintf("want a directory at %s (%v)", path, err), msg)
	}
}

func (asserts) NoDirExists(t testing.TB, path string, msg ...any) {
	t.Helper()
	if _, err := os.Lstat(path); err == nil {
		fail(t, fmt.Sprintf("want nothing at %s", path), msg)
	}
}

func (asserts) FileExists(t testing.TB, path string, msg ...any) {
	t.Helper()
	if _, err := os.Lstat(path); err != nil {
		fail(t, fmt.Sprintf("want a file at %s: %v", path, err), msg)
	}
}
