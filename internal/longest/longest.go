package main

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// span is one measured piece of code: a function or a file.
type span struct {
	Name  string // "pkg/dir/file.go:12 Type.Method" or "pkg/dir/file.go"
	Lines int
}

// report is what measure finds in a tree.
type report struct {
	Funcs        []span   // non-test functions, longest first
	Files        []span   // non-test files, longest first
	CtxFields    []string // context.Context struct fields in non-test files
	CtxTestField []string // the same in _test.go files
}

// measure parses every Go file under fsys (paths are relative to it) and
// measures it. A file that does not parse is an error: a figure taken
// over part of the tree would mislead.
func measure(fsys fs.FS) (report, error) {
	var r report
	fset := token.NewFileSet()
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && skipDir(d.Name()) {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		src, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parse %s: %w", p, err)
		}
		r.add(fset, p, f)
		return nil
	})
	if err != nil {
		return report{}, err
	}
	r.sort()
	return r, nil
}

// merge adds o, measured in directory dir, to r.
func (r *report) merge(o report, dir string) {
	name := func(n string) string { return path.Join(dir, n) }
	for _, s := range o.Funcs {
		r.Funcs = append(r.Funcs, span{Name: name(s.Name), Lines: s.Lines})
	}
	for _, s := range o.Files {
		r.Files = append(r.Files, span{Name: name(s.Name), Lines: s.Lines})
	}
	for _, p := range o.CtxFields {
		r.CtxFields = append(r.CtxFields, name(p))
	}
	for _, p := range o.CtxTestField {
		r.CtxTestField = append(r.CtxTestField, name(p))
	}
	r.sort()
}

func (r *report) sort() {
	longestFirst := func(a, b span) int {
		return cmp.Or(cmp.Compare(b.Lines, a.Lines), strings.Compare(a.Name, b.Name))
	}
	slices.SortFunc(r.Funcs, longestFirst)
	slices.SortFunc(r.Files, longestFirst)
	slices.Sort(r.CtxFields)
	slices.Sort(r.CtxTestField)
}

// skipDir reports whether the go tool ignores a directory of this name.
func skipDir(name string) bool {
	return name == "testdata" || name == "vendor" ||
		strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// add measures one parsed file.
func (r *report) add(fset *token.FileSet, p string, f *ast.File) {
	test := strings.HasSuffix(p, "_test.go")
	line := func(pos token.Pos) int { return fset.Position(pos).Line }
	if !test {
		r.Files = append(r.Files, span{Name: p, Lines: fset.File(f.Pos()).LineCount()})
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			name := fmt.Sprintf("%s:%d %s", p, line(fn.Pos()), funcName(fn))
			r.Funcs = append(r.Funcs, span{Name: name, Lines: line(fn.End()) - line(fn.Pos()) + 1})
		}
	}
	ctxName := importName(f, "context")
	if ctxName == "" {
		return
	}
	ast.Inspect(f, func(n ast.Node) bool {
		st, ok := n.(*ast.StructType)
		if !ok {
			return true
		}
		for _, field := range st.Fields.List {
			if !isSelector(field.Type, ctxName, "Context") {
				continue
			}
			names := max(len(field.Names), 1) // an embedded field has no name
			for range names {
				place := fmt.Sprintf("%s:%d", p, line(field.Pos()))
				if test {
					r.CtxTestField = append(r.CtxTestField, place)
				} else {
					r.CtxFields = append(r.CtxFields, place)
				}
			}
		}
		return true
	})
}

// funcName is "Name" for a function and "Type.Name" for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr: // generic receiver T[P]
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// importName is the name a file uses for an import path, or "" when the
// file does not import it (or imports it as _ or .).
func importName(f *ast.File, importPath string) string {
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil || p != importPath {
			continue
		}
		if imp.Name == nil {
			return path.Base(p)
		}
		if imp.Name.Name == "_" || imp.Name.Name == "." {
			return ""
		}
		return imp.Name.Name
	}
	return ""
}

// isSelector reports whether e is pkg.name.
func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

// print writes the report with at most n rows per table.
func (r report) print(w io.Writer, n int) {
	table := func(title string, rows []span) {
		fmt.Fprintf(w, "%s (%d of %d)\n", title, min(n, len(rows)), len(rows))
		for _, s := range rows[:min(n, len(rows))] {
			fmt.Fprintf(w, "  %5d  %s\n", s.Lines, s.Name)
		}
	}
	table("longest non-test functions", r.Funcs)
	table("longest non-test files", r.Files)
	list := func(title string, places []string) {
		fmt.Fprintf(w, "%s: %d\n", title, len(places))
		for _, p := range places {
			fmt.Fprintf(w, "  %s\n", p)
		}
	}
	list("context.Context struct fields, non-test", r.CtxFields)
	list("context.Context struct fields, test", r.CtxTestField)
}
