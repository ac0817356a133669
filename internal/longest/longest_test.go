package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

func TestMeasure_Tree(t *testing.T) {
	fsys := fstest.MapFS{
		"a/a.go": {Data: []byte(`package a

import stdctx "context"

type holder struct {
	ctx, other stdctx.Context
	stdctx.Context
	n int
}

func short() {}

func (h *holder) long() {
	_ = 1
	_ = 2
}

type box[T any] struct{ v T }

func (b box[T]) get() T {
	return b.v
}
`)},
		"a/a_test.go": {Data: []byte(`package a

import "context"

type fixture struct{ ctx context.Context }

func veryLongTestHelper() {
	_ = 1
	_ = 2
	_ = 3
	_ = 4
}
`)},
		"b/b.go": {Data: []byte(`package b

// Context here is not the context package's.
type Context struct{}

type s struct{ c Context }

func f() {
	var x struct {
		c context.Context
	}
	_ = x
}
`)},
		"a/testdata/skip.go": {Data: []byte("not go at all")},
		".hidden/skip.go":    {Data: []byte("not go at all")},
		"a/notes.txt":        {Data: []byte("ignored")},
	}
	r, err := measure(fsys)
	if err != nil {
		t.Fatal(err)
	}

	// Every non-test function, longest first, with test files left out.
	wantFuncs := []span{
		{Name: "b/b.go:8 f", Lines: 6},
		{Name: "a/a.go:13 holder.long", Lines: 4},
		{Name: "a/a.go:20 box.get", Lines: 3},
		{Name: "a/a.go:11 short", Lines: 1},
	}
	if !slices.Equal(r.Funcs, wantFuncs) {
		t.Errorf("funcs = %v, want %v", r.Funcs, wantFuncs)
	}
	wantFiles := []span{{Name: "a/a.go", Lines: 22}, {Name: "b/b.go", Lines: 13}}
	if !slices.Equal(r.Files, wantFiles) {
		t.Errorf("files = %v, want %v", r.Files, wantFiles)
	}
	// Two named fields and one embedded, under an import alias; b.go
	// does not import context, so its Context is another type.
	wantCtx := []string{"a/a.go:6", "a/a.go:6", "a/a.go:7"}
	if !slices.Equal(r.CtxFields, wantCtx) {
		t.Errorf("ctx fields = %v, want %v", r.CtxFields, wantCtx)
	}
	if want := []string{"a/a_test.go:5"}; !slices.Equal(r.CtxTestField, want) {
		t.Errorf("ctx test fields = %v, want %v", r.CtxTestField, want)
	}
}

func TestMeasure_ParseError(t *testing.T) {
	_, err := measure(fstest.MapFS{"x.go": {Data: []byte("package x\nfunc {")}})
	if err == nil || !strings.Contains(err.Error(), "parse x.go") {
		t.Fatalf("err = %v, want a parse error naming x.go", err)
	}
}

func TestReport_Print_Limit(t *testing.T) {
	r := report{
		Funcs:     []span{{"f1", 9}, {"f2", 8}, {"f3", 7}},
		Files:     []span{{"a.go", 100}},
		CtxFields: []string{"a.go:3"},
	}
	var buf bytes.Buffer
	r.print(&buf, 2)
	want := `longest non-test functions (2 of 3)
      9  f1
      8  f2
longest non-test files (1 of 1)
    100  a.go
context.Context struct fields, non-test: 1
  a.go:3
context.Context struct fields, test: 0
`
	if got := buf.String(); got != want {
		t.Errorf("print:\n%s\nwant:\n%s", got, want)
	}
}

func TestReport_Merge_Prefixes(t *testing.T) {
	var all report
	all.merge(report{Funcs: []span{{"a.go:1 f", 3}}, Files: []span{{"a.go", 10}}, CtxFields: []string{"a.go:2"}}, "x")
	all.merge(report{Funcs: []span{{"b.go:1 g", 5}}, Files: []span{{"b.go", 5}}, CtxTestField: []string{"b_test.go:2"}}, "y/z")
	if want := []span{{"y/z/b.go:1 g", 5}, {"x/a.go:1 f", 3}}; !slices.Equal(all.Funcs, want) {
		t.Errorf("funcs = %v, want %v", all.Funcs, want)
	}
	if want := []span{{"x/a.go", 10}, {"y/z/b.go", 5}}; !slices.Equal(all.Files, want) {
		t.Errorf("files = %v, want %v", all.Files, want)
	}
	if !slices.Equal(all.CtxFields, []string{"x/a.go:2"}) || !slices.Equal(all.CtxTestField, []string{"y/z/b_test.go:2"}) {
		t.Errorf("ctx = %v / %v", all.CtxFields, all.CtxTestField)
	}
}
