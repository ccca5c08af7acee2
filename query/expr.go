// Expressions: their kinds and limits, Program, and Compile (with the
// folding of constant calls it plans programs with).

package query

import (
	"errors"
	"fmt"
	"strconv"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"

	"github.com/gridmgr/gridmgr/internal/text"
)

// Limits on expressions.
const (
	// MaxExprLen is the longest accepted expression source, in bytes.
	// Longer sources are an *ExprError at 1:1.
	MaxExprLen = 4096
	// MaxCost is the CEL runtime cost limit of one evaluation. An
	// evaluation that exceeds it is cancelled: Match reports false and
	// Score reports !ok.
	MaxCost = 100000
	// MaxTotalCost bounds the work of one evaluation of a requirement or
	// policy whose && / || operands each have a budget of MaxCost (see
	// the package documentation): once its operands have spent this much,
	// the rest are not started and are undefined.
	MaxTotalCost = 8 * MaxCost
	// MaxNesting is the deepest nesting of parentheses, brackets, calls
	// and operators that the parser accepts; a chain of one operator
	// (a + b + c) nests one level per operator.
	MaxNesting = 128
)

// Unit constants, as CEL sees them (KiB, MiB, GiB, TiB).
const (
	KiB int64 = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
)

// ErrExpr is the sentinel that every *ExprError wraps.
var ErrExpr = errors.New("query: bad expression")

// Kind says what an expression is for, which fixes its result type.
type Kind uint8

// The kinds of expression.
const (
	// Requirement selects the offers a query accepts; its result is bool.
	Requirement Kind = iota + 1
	// Rank orders accepted offers, higher first; its result is int, uint or double.
	Rank
	// Policy is a manager owner's rule on which requests it serves; its result is bool.
	Policy
)

// String returns "requirement", "rank" or "policy".
func (k Kind) String() string {
	switch k {
	case Requirement:
		return "requirement"
	case Rank:
		return "rank"
	case Policy:
		return "policy"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Program is one compiled expression. It is immutable: Match, Score and
// the accessors may be called from several goroutines at once.
type Program struct {
	kind Kind
	src  string
	refs []string
	// reqRefs are the fields of request it reads, for Explain's details.
	reqRefs []string
	prg     cel.Program
	// tracked says whether evaluations track their cost; they do unless
	// the static estimate proves the cost is at most estMax <= MaxCost.
	tracked bool
	estMax  uint64
	// logic, for a tracked requirement or policy whose top is && / || /
	// !, evaluates those operators over operands with programs of their
	// own, so that one over the cost limit does not decide for the others
	// (see logic.go).
	logic *logicNode
}

// Source returns the expression as given to Compile.
func (p *Program) Source() string { return p.src }

// Kind returns the kind the expression was compiled as.
func (p *Program) Kind() Kind { return p.kind }

// Refs lists the attributes of the offer that the expression reads,
// sorted and without duplicates, as written in the schema: "cpu_util",
// "attrs.zone" (for attrs.zone and attrs["zone"]), attrs["rack-id"] for
// keys that are not identifiers, and "attrs" when the map is used as a
// whole or with a computed key; tokens likewise ("tokens.gpus",
// tokens["licenses.matlab"], "tokens"). request.* and the unit constants
// are not listed. The caller must not modify the slice.
func (p *Program) Refs() []string { return p.refs }

// Compile parses and type-checks src as an expression of the given kind.
// Every failure is an *ExprError (which wraps ErrExpr), with the position
// of the first issue.
func Compile(kind Kind, src string) (*Program, error) {
	if kind < Requirement || kind > Policy {
		return nil, exprErr(kind, src, 1, 1, "unknown expression kind "+strconv.Itoa(int(kind)))
	}
	if len(src) > MaxExprLen {
		return nil, exprErr(kind, src, 1, 1, fmt.Sprintf(
			"expression is %d bytes long; the limit is %d", len(src), MaxExprLen))
	}
	if off := text.FirstInvalidUTF8(src); off >= 0 {
		line, col := srcPosition(src, off)
		return nil, exprErr(kind, src, line, col, "expression is not valid UTF-8")
	}
	env, err := celEnv()
	if err != nil {
		return nil, exprErr(kind, src, 1, 1, "expression environment: "+err.Error())
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, issuesErr(kind, src, iss)
	}
	if msg := checkResultType(kind, ast.OutputType()); msg != "" {
		line, col := srcStart(src)
		return nil, exprErr(kind, src, line, col, msg)
	}
	refs, reqRefs := exprRefs(ast.NativeRep())
	popts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize), cel.CustomDecoratorV2(foldConstCalls)}
	est, err := env.EstimateCost(ast, noEstimates{})
	if err == nil && est.Min > MaxCost {
		// Every evaluation would exceed the limit: say so now rather than
		// let it be false everywhere.
		line, col := srcStart(src)
		return nil, exprErr(kind, src, line, col, fmt.Sprintf(
			"expression costs at least %d to evaluate; the limit is %d", est.Min, MaxCost))
	}
	tracked := err != nil || est.Max > MaxCost
	if tracked {
		popts = append(popts, cel.CostLimit(MaxCost))
	}
	prg, err := env.Program(ast, popts...)
	if err != nil {
		line, col := srcStart(src)
		return nil, exprErr(kind, src, line, col, err.Error())
	}
	var logic *logicNode
	if tracked && kind != Rank {
		if logic, err = buildLogic(env, ast.NativeRep(), popts[:2]); err != nil {
			line, col := srcStart(src)
			return nil, exprErr(kind, src, line, col, err.Error())
		}
	}
	return &Program{kind: kind, src: src, refs: refs, reqRefs: reqRefs, prg: prg, tracked: tracked, estMax: est.Max, logic: logic}, nil
}

// checkResultType returns why t is not a valid result type for kind, or "".
func checkResultType(kind Kind, t *cel.Type) string {
	switch t.Kind() {
	case types.DynKind:
		return ""
	case types.BoolKind:
		if kind != Rank {
			return ""
		}
	case types.IntKind, types.UintKind, types.DoubleKind:
		if kind == Rank {
			return ""
		}
	}
	want := "bool"
	if kind == Rank {
		want = "a number (int, uint or double)"
	}
	return fmt.Sprintf("a %s must be %s, got %s", kind, want, t)
}

// foldConstCalls replaces a function call whose arguments are all
// constants (literals, unit constants, folded calls) by its value, so
// that 8 * GiB is computed once, when the program is planned. Calls that
// fail are left to fail at evaluation.
func foldConstCalls(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
	call, ok := i.(interpreter.InterpretableCall)
	if !ok {
		return i, nil
	}
	for _, a := range call.Args() {
		if _, ok := a.(interpreter.InterpretableConst); !ok {
			return i, nil
		}
	}
	v := call.Eval(interpreter.EmptyActivation())
	if types.IsError(v) || types.IsUnknown(v) {
		return i, nil
	}
	return interpreter.NewConstValue(call.ID(), v), nil
}
