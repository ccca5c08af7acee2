package node_test

import (
	"go/ast"
	"go/types"
	"slices"
	"testing"

	"golang.org/x/tools/go/packages"
)

// TestOwnFieldsOnlyFromOwn tries to break NewCoreShared's promise that a
// Core reads a manager's own fields (name, host name, superiors,
// attributes) from its Own, never from the shared config, where they are
// another manager's: a simulated grid would then name every manager
// after the first. It type-checks this package and fails on any read of
// those fields of a config.Config outside OwnOf, Split and Own.Config.
func TestOwnFieldsOnlyFromOwn(t *testing.T) {
	pkgs, err := packages.Load(&packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
	}, "github.com/gridmgr/gridmgr/node")
	if err != nil {
		t.Fatal(err)
	}
	if packages.PrintErrors(pkgs) > 0 || len(pkgs) != 1 {
		t.Fatal("could not load package node")
	}
	p := pkgs[0]
	own := []string{"Name", "Hostname", "Superiors", "Attributes"}
	// The three that move them between a config and an Own.
	allowed := func(fd *ast.FuncDecl) bool {
		if fd.Recv == nil {
			return fd.Name.Name == "OwnOf" || fd.Name.Name == "Split"
		}
		return fd.Name.Name == "Config" && types.ExprString(fd.Recv.List[0].Type) == "*Own"
	}
	for _, f := range p.Syntax {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && allowed(fd) {
				continue
			}
			ast.Inspect(d, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok || !slices.Contains(own, sel.Sel.Name) {
					return true
				}
				s := p.TypesInfo.Selections[sel]
				if s == nil || s.Kind() != types.FieldVal {
					return true
				}
				recv := s.Recv()
				if ptr, ok := recv.(*types.Pointer); ok {
					recv = ptr.Elem()
				}
				if named, ok := recv.(*types.Named); ok && named.Obj().Pkg() != nil &&
					named.Obj().Pkg().Path() == "github.com/gridmgr/gridmgr/config" && named.Obj().Name() == "Config" {
					t.Errorf("%s: reads %s of a config.Config: a Core's own fields come from its Own (Core.own, env.name, env.ownFields)",
						p.Fset.Position(sel.Pos()), types.ExprString(sel))
				}
				return true
			})
		}
	}
	t.Logf("checked %d files", len(p.Syntax))
}
