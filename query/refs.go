// The walk of a checked expression that lists the attributes it reads
// (Program.Refs).

package query

import (
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
)

// exprRefs returns the schema attributes that a checked expression reads
// (refs) and, apart, the fields of request it reads (reqRefs:
// "request.user", "request.attrs.kind"), each sorted.
func exprRefs(a *celast.AST) (refs, reqRefs []string) {
	set := map[string]struct{}{}
	walkRefs(a.Expr(), nil, set)
	refs = make([]string, 0, len(set))
	for k := range set {
		if strings.HasPrefix(k, "request.") {
			reqRefs = append(reqRefs, k)
		} else {
			refs = append(refs, k)
		}
	}
	slices.Sort(refs)
	slices.Sort(reqRefs)
	return refs, reqRefs
}

// requestField returns the field of request that x selects
// (request.user: "user"), or "".
func requestField(x celast.Expr, local []string) string {
	if x.Kind() != celast.SelectKind || x.AsSelect().IsTestOnly() {
		return ""
	}
	s := x.AsSelect()
	if op := s.Operand(); op.Kind() == celast.IdentKind && op.AsIdent() == "request" && !slices.Contains(local, "request") {
		return s.FieldName()
	}
	return ""
}

// offerVar reports whether n is a variable Refs reports: one of the
// manager's (request is not).
func offerVar(n string) bool {
	_, ok := lookupVar(n)
	return ok
}

// isMapVar reports whether n is a variable of map type whose keys Refs
// reports one by one when they are constant.
func isMapVar(n string) bool {
	v, ok := lookupVar(n)
	return ok && v.Map
}

// walkRefs adds to set the attributes e reads; local holds the names
// bound by enclosing comprehensions, which shadow the schema.
func walkRefs(e celast.Expr, local []string, set map[string]struct{}) {
	// mapVar returns the name of the map variable x is, or "".
	mapVar := func(x celast.Expr) string {
		if x.Kind() != celast.IdentKind {
			return ""
		}
		if n := x.AsIdent(); isMapVar(n) && !slices.Contains(local, n) {
			return n
		}
		return ""
	}
	switch e.Kind() {
	case celast.IdentKind:
		if n := e.AsIdent(); offerVar(n) && !slices.Contains(local, n) {
			set[n] = struct{}{}
		}
	case celast.SelectKind:
		s := e.AsSelect()
		if m := mapVar(s.Operand()); m != "" {
			set[keyRef(m, s.FieldName())] = struct{}{}
			return
		}
		if f := requestField(s.Operand(), local); f == "attrs" {
			set[keyRef("request.attrs", s.FieldName())] = struct{}{} // request.attrs.kind
			return
		}
		if f := requestField(e, local); f != "" {
			set["request."+f] = struct{}{}
			return
		}
		walkRefs(s.Operand(), local, set)
	case celast.CallKind:
		c := e.AsCall()
		args := c.Args()
		fn := c.FunctionName()
		if (fn == "_[_]" || fn == "_[?_]" || fn == "_?._") && len(args) == 2 && args[1].Kind() == celast.LiteralKind {
			if m := mapVar(args[0]); m != "" {
				if k, ok := args[1].AsLiteral().(types.String); ok {
					set[keyRef(m, string(k))] = struct{}{}
					return
				}
			}
			if requestField(args[0], local) == "attrs" {
				if k, ok := args[1].AsLiteral().(types.String); ok {
					set[keyRef("request.attrs", string(k))] = struct{}{}
					return
				}
			}
		}
		if c.IsMemberFunction() {
			walkRefs(c.Target(), local, set)
		}
		for _, a := range args {
			walkRefs(a, local, set)
		}
	case celast.ListKind:
		for _, x := range e.AsList().Elements() {
			walkRefs(x, local, set)
		}
	case celast.MapKind:
		for _, en := range e.AsMap().Entries() {
			if en.Kind() == celast.MapEntryKind {
				walkRefs(en.AsMapEntry().Key(), local, set)
				walkRefs(en.AsMapEntry().Value(), local, set)
			}
		}
	case celast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			if f.Kind() == celast.StructFieldKind {
				walkRefs(f.AsStructField().Value(), local, set)
			}
		}
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		walkRefs(c.IterRange(), local, set)
		walkRefs(c.AccuInit(), local, set)
		inner := append(slices.Clip(local), c.AccuVar(), c.IterVar())
		if c.HasIterVar2() {
			inner = append(inner, c.IterVar2())
		}
		walkRefs(c.LoopCondition(), inner, set)
		walkRefs(c.LoopStep(), inner, set)
		walkRefs(c.Result(), slices.Concat(local, []string{c.AccuVar()}), set)
	}
}

// keyRef renders key of the map variable m (attrs, tokens) as Refs
// reports it.
func keyRef(m, key string) string {
	if isIdent(key) {
		return m + "." + key
	}
	return m + "[" + strconv.Quote(key) + "]"
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r == '_' || r < utf8.RuneSelf && unicode.IsLetter(r) || i > 0 && r < utf8.RuneSelf && unicode.IsDigit(r) {
			continue
		}
		return false
	}
	return true
}
