package query

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// A requirement or policy whose cost CEL cannot bound is not evaluated as
// one CEL program: CEL cancels the whole evaluation when the cost limit
// is reached, so "E || true" (E evaluated first, over the limit) would be
// undefined while "true || E" is true. Instead the && / || / ! operators
// at its top are evaluated here, in Kleene's three-valued logic, over
// operands that are each a CEL program of their own with a budget of
// MaxCost: an operand over its budget is undefined and the others still
// decide, whatever the order they are written in. So that many operands
// do not multiply the work, an evaluation starts no operand once its
// operands have spent MaxTotalCost; they are taken in an order that
// depends only on what they are (cheapest estimate first, then their
// structure), never on where they are written.

// tri is a three-valued truth: false, true or undefined.
type tri uint8

const (
	triFalse tri = iota
	triTrue
	triUndef
)

// logicNode is one node of the operator tree: an operator over kids, or
// an operand (a leaf) with its own program.
type logicNode struct {
	op   string // operators.LogicalAnd, LogicalOr, LogicalNot; "" for a leaf
	kids []*logicNode

	prg     cel.Program // leaf: its program, cost-tracked
	estMin  uint64      // static cost estimate, for the evaluation order
	estMax  uint64
	key     string // the operand's text, to order equal estimates
	tracked bool   // leaf: its cost is not bounded statically
}

// isLogic reports whether e is a call of &&, || or !.
func isLogic(e celast.Expr) (string, []celast.Expr, bool) {
	if e.Kind() != celast.CallKind {
		return "", nil, false
	}
	c := e.AsCall()
	switch fn := c.FunctionName(); fn {
	case operators.LogicalAnd, operators.LogicalOr, operators.LogicalNot:
		return fn, c.Args(), true
	}
	return "", nil, false
}

// buildLogic returns the operator tree of a checked AST whose root is a
// logical operator, with a program for each operand; nil if the root is
// not one.
func buildLogic(env *cel.Env, checked *celast.AST, popts []cel.ProgramOption) (*logicNode, error) {
	if _, _, ok := isLogic(checked.Expr()); !ok {
		return nil, nil
	}
	var build func(e celast.Expr) (*logicNode, error)
	build = func(e celast.Expr) (*logicNode, error) {
		op, args, ok := isLogic(e)
		if !ok {
			return buildLeaf(env, checked, e, popts)
		}
		n := &logicNode{op: op}
		// Flatten a chain of one operator (CEL balances a || b || c
		// into a tree), so that regrouping does not change the order.
		var add func(args []celast.Expr) error
		add = func(args []celast.Expr) error {
			for _, a := range args {
				if aop, aargs, ok := isLogic(a); ok && aop == op && op != operators.LogicalNot {
					if err := add(aargs); err != nil {
						return err
					}
					continue
				}
				k, err := build(a)
				if err != nil {
					return err
				}
				n.kids = append(n.kids, k)
			}
			return nil
		}
		if err := add(args); err != nil {
			return nil, err
		}
		slices.SortStableFunc(n.kids, func(a, b *logicNode) int {
			return cmp.Or(cmp.Compare(a.estMax, b.estMax), cmp.Compare(a.estMin, b.estMin), cmp.Compare(a.key, b.key))
		})
		for _, k := range n.kids {
			n.estMin = satAdd(n.estMin, k.estMin)
			n.estMax = satAdd(n.estMax, k.estMax)
			n.key += "(" + k.key + ")" + op
		}
		return n, nil
	}
	return build(checked.Expr())
}

// buildLeaf compiles the operand e of checked as a program of its own.
func buildLeaf(env *cel.Env, checked *celast.AST, e celast.Expr, popts []cel.ProgramOption) (*logicNode, error) {
	sub := celast.NewCheckedAST(celast.NewAST(e, checked.SourceInfo()), checked.TypeMap(), checked.ReferenceMap())
	pb, err := celast.ToProto(sub)
	if err != nil {
		return nil, err
	}
	a := cel.CheckedExprToAst(pb)
	n := &logicNode{estMax: ^uint64(0), tracked: true}
	if est, err := env.EstimateCost(a, noEstimates{}); err == nil {
		n.estMin, n.estMax, n.tracked = est.Min, est.Max, est.Max > MaxCost
	}
	n.key = exprKey(e)
	opts := append(slices.Clip(popts), cel.EvalOptions(cel.OptTrackCost), cel.CostLimit(MaxCost))
	if n.prg, err = env.Program(a, opts...); err != nil {
		return nil, err
	}
	return n, nil
}

// exprKey writes e in a form that depends only on its structure (not on
// the ids the parser gave its nodes), to order operands of equal cost.
func exprKey(e celast.Expr) string {
	var b strings.Builder
	var w func(e celast.Expr)
	list := func(es []celast.Expr) {
		for i, x := range es {
			if i > 0 {
				b.WriteByte(',')
			}
			w(x)
		}
	}
	w = func(e celast.Expr) {
		switch e.Kind() {
		case celast.LiteralKind:
			fmt.Fprintf(&b, "%T:%q", e.AsLiteral(), fmt.Sprint(e.AsLiteral().Value()))
		case celast.IdentKind:
			b.WriteString(e.AsIdent())
		case celast.SelectKind:
			s := e.AsSelect()
			w(s.Operand())
			if s.IsTestOnly() {
				b.WriteString(".?has")
			}
			b.WriteString("." + s.FieldName())
		case celast.CallKind:
			c := e.AsCall()
			if c.IsMemberFunction() {
				w(c.Target())
				b.WriteByte('.')
			}
			b.WriteString(c.FunctionName() + "(")
			list(c.Args())
			b.WriteByte(')')
		case celast.ListKind:
			b.WriteByte('[')
			list(e.AsList().Elements())
			fmt.Fprintf(&b, "]%v", e.AsList().OptionalIndices())
		case celast.MapKind:
			b.WriteByte('{')
			for _, en := range e.AsMap().Entries() {
				m := en.AsMapEntry()
				w(m.Key())
				fmt.Fprintf(&b, ":%v:", m.IsOptional())
				w(m.Value())
				b.WriteByte(',')
			}
			b.WriteByte('}')
		case celast.StructKind:
			s := e.AsStruct()
			b.WriteString(s.TypeName() + "{")
			for _, f := range s.Fields() {
				sf := f.AsStructField()
				fmt.Fprintf(&b, "%s:%v:", sf.Name(), sf.IsOptional())
				w(sf.Value())
				b.WriteByte(',')
			}
			b.WriteByte('}')
		case celast.ComprehensionKind:
			c := e.AsComprehension()
			fmt.Fprintf(&b, "for(%s,%s,%s;", c.IterVar(), c.IterVar2(), c.AccuVar())
			list([]celast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()})
			b.WriteByte(')')
		default:
			b.WriteByte('?')
		}
	}
	w(e)
	return b.String()
}

func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

// errUndefined is the error of an operator tree that evaluates to
// undefined.
var errUndefined = errors.New("query: undefined")

// evalLogic evaluates the tree on v and r.
func (n *logicNode) evalLogic(v *Values, r *Request) (ref.Val, error) {
	var spent uint64
	switch n.eval(&evalVars{v: v, r: r}, &spent) {
	case triTrue:
		return types.True, nil
	case triFalse:
		return types.False, nil
	}
	return nil, errUndefined
}

// eval evaluates n, adding what its operands cost to *spent. An operand
// over MaxCost is undefined; one not started because *spent reached
// MaxTotalCost is undefined too.
func (n *logicNode) eval(vars *evalVars, spent *uint64) tri {
	switch n.op {
	case "":
		if *spent >= MaxTotalCost {
			return triUndef
		}
		out, det, err := n.prg.Eval(vars)
		cost := uint64(MaxCost)
		if det != nil && det.ActualCost() != nil {
			cost = *det.ActualCost()
		}
		*spent = satAdd(*spent, cost)
		switch {
		case err != nil:
			return triUndef
		case out == types.True:
			return triTrue
		case out == types.False:
			return triFalse
		}
		return triUndef // not a bool (an attribute of type dyn)
	case operators.LogicalNot:
		switch n.kids[0].eval(vars, spent) {
		case triTrue:
			return triFalse
		case triFalse:
			return triTrue
		}
		return triUndef
	}
	// && and ||: the value that decides (false for &&, true for ||) wins
	// over undefined; else undefined wins over the other value.
	decides := triTrue
	if n.op == operators.LogicalAnd {
		decides = triFalse
	}
	out := triFalse + triTrue - decides
	for _, k := range n.kids {
		switch k.eval(vars, spent) {
		case decides:
			return decides
		case triUndef:
			out = triUndef
		}
	}
	return out
}
