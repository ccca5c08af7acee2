package node

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneRemoval keeps relation teardown single by structure: the Set's
// Remove is called in one place, Core.removeRelation, which also tells
// every module (relationEnded). A module that wants a relation gone calls
// removeRelation (failover's acts do).
func TestOneRemoval(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var found []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Remove" {
					return true
				}
				if x, ok := sel.X.(*ast.SelectorExpr); ok && x.Sel.Name == "set" {
					found = append(found, fset.Position(call.Pos()).String()+" in "+fn.Name.Name)
					if fn.Name.Name != "removeRelation" {
						t.Errorf("%s: set.Remove outside removeRelation (in %s): call c.removeRelation, which also tells the modules", fset.Position(call.Pos()), fn.Name.Name)
					}
				}
				return true
			})
		}
	}
	if len(found) != 1 {
		t.Errorf("set.Remove is called %d times (%v), want once, in removeRelation", len(found), found)
	}
}
