package fingerprint_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// checker holds the few assertions these tests use. must stops the test
// at the first failure, check reports it and goes on. (testify is in
// go.mod, but its yaml dependency is missing from go.sum, and go.sum is
// shared with engineers working at the same time.)
type checker struct{ fatal bool }

var (
	must  = checker{fatal: true}
	check = checker{}
)

func (c checker) fail(t testing.TB, what string, msg []any) bool {
	t.Helper()
	if len(msg) > 0 {
		if f, ok := msg[0].(string); ok {
			what += ": " + fmt.Sprintf(f, msg[1:]...)
		}
	}
	if c.fatal {
		t.Fatal(what)
	}
	t.Error(what)
	return false
}

func (c checker) True(t testing.TB, ok bool, msg ...any) bool {
	t.Helper()
	if !ok {
		return c.fail(t, "want true", msg)
	}
	return true
}

func (c checker) False(t testing.TB, ok bool, msg ...any) bool {
	t.Helper()
	if ok {
		return c.fail(t, "want false", msg)
	}
	return true
}

func (c checker) NoError(t testing.TB, err error, msg ...any) bool {
	t.Helper()
	if err != nil {
		return c.fail(t, fmt.Sprintf("unexpected error: %v", err), msg)
	}
	return true
}

func (c checker) Error(t testing.TB, err error, msg ...any) bool {
	t.Helper()
	if err == nil {
		return c.fail(t, "want an error, got nil", msg)
	}
	return true
}

func (c checker) ErrorIs(t testing.TB, err, target error, msg ...any) bool {
	t.Helper()
	if !errors.Is(err, target) {
		return c.fail(t, fmt.Sprintf("error %v is not %v", err, target), msg)
	}
	return true
}

func (c checker) Equal(t testing.TB, want, got any, msg ...any) bool {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		return c.fail(t, fmt.Sprintf("want %#v, got %#v", want, got), msg)
	}
	return true
}

func (c checker) Contains(t testing.TB, s, sub string, msg ...any) bool {
	t.Helper()
	if !strings.Contains(s, sub) {
		return c.fail(t, fmt.Sprintf("%q does not contain %q", s, sub), msg)
	}
	return true
}

func (c checker) Nil(t testing.TB, v any, msg ...any) bool {
	t.Helper()
	if !isNil(v) {
		return c.fail(t, fmt.Sprintf("want nil, got %#v", v), msg)
	}
	return true
}

func (c checker) NotNil(t testing.TB, v any, msg ...any) bool {
	t.Helper()
	if isNil(v) {
		return c.fail(t, "want non-nil", msg)
	}
	return true
}

func (c checker) Zero(t testing.TB, v any, msg ...any) bool {
	t.Helper()
	if v != nil && !reflect.ValueOf(v).IsZero() {
		return c.fail(t, fmt.Sprintf("want zero, got %#v", v), msg)
	}
	return true
}

func (c checker) Len(t testing.TB, v any, n int, msg ...any) bool {
	t.Helper()
	if l := reflect.ValueOf(v).Len(); l != n {
		return c.fail(t, fmt.Sprintf("want length %d, got %d", n, l), msg)
	}
	return true
}

func (c checker) Empty(t testing.TB, v any, msg ...any) bool {
	t.Helper()
	if v != nil && reflect.ValueOf(v).Len() != 0 {
		return c.fail(t, fmt.Sprintf("want empty, got %#v", v), msg)
	}
	return true
}

// ElementsMatch compares two string lists ignoring order.
func (c checker) ElementsMatch(t testing.TB, want, got []string, msg ...any) bool {
	t.Helper()
	w, g := slices.Clone(want), slices.Clone(got)
	slices.Sort(w)
	slices.Sort(g)
	if !slices.Equal(w, g) {
		return c.fail(t, fmt.Sprintf("want %v (any order), got %v", want, got), msg)
	}
	return true
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return r.IsNil()
	}
	return false
}
