package bmc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestEveryCallHasAnOperation reads the package's source for the words
// each BMC call is made with (the op given to do, run, call, readTask and
// reset, or assigned to op) and checks that every one falls in an
// operation class: a call added with new words must not be counted as
// "other" unnoticed.
func TestEveryCallHasAnOperation(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	ops := map[string]string{} // op's leading words → where
	// lead is the literal words an op expression starts with: a string,
	// "words " + variable, or fmt.Sprintf("words %s", …).
	var lead func(e ast.Expr) (string, bool)
	lead = func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				s, err := strconv.Unquote(e.Value)
				return s, err == nil
			}
		case *ast.BinaryExpr:
			return lead(e.X)
		case *ast.CallExpr:
			if sel, ok := e.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sprintf" && len(e.Args) > 0 {
				s, ok := lead(e.Args[0])
				s, _, _ = strings.Cut(s, "%")
				return s, ok
			}
		}
		return "", false
	}
	callers := map[string]bool{"do": true, "run": true, "call": true, "readTask": true, "reset": true}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && callers[sel.Sel.Name] && len(n.Args) > 1 {
					if s, ok := lead(n.Args[1]); ok {
						ops[s] = fset.Position(n.Pos()).String()
					}
				}
			case *ast.AssignStmt:
				for i, l := range n.Lhs {
					if id, ok := l.(*ast.Ident); ok && id.Name == "op" && i < len(n.Rhs) {
						if s, ok := lead(n.Rhs[i]); ok {
							ops[s] = fset.Position(n.Pos()).String()
						}
					}
				}
			}
			return true
		})
	}
	if len(ops) < 30 {
		t.Fatalf("found only %d ops: %v", len(ops), ops)
	}
	for op, where := range ops {
		if opClass(op) == "other" {
			t.Errorf("%s: BMC call %q has no operation class (opClasses)", where, op)
		}
	}
	for op, want := range map[string]string{"setting power soft power off": "power_set", "reading power state": "power_get",
		"inserting virtual media cdrom": "vmedia_insert", "deleting RAID volume 0:1": "raid_delete", "something new": "other"} {
		if got := opClass(op); got != want {
			t.Errorf("opClass(%q) = %s, want %s", op, got, want)
		}
	}
}
