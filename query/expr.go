package query

import (
	"container/list"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // now.getHours("Europe/Paris") on hosts without a zoneinfo database
	"unicode"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
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

// Values are one manager's resources as expressions see them. Each field
// is one variable of the schema (see the package documentation). A
// Values is only read by Match and Score, so one Values may be evaluated
// by several goroutines at once as long as nobody writes it meanwhile.
type Values struct {
	Name     string  // manager name → name
	Hostname string  // → hostname
	OS, Arch string  // runtime.GOOS / runtime.GOARCH style → os, arch
	CPUs     int64   // → cpus
	CPUsFree int64   // → cpus_free
	CPUUtil  float64 // 0..1 smoothed; < 0 (or NaN) means unknown → cpu_util
	Mem      int64   // bytes → mem
	MemFree  int64   // bytes → mem_free
	NetMbps  float64 // link speed; 0 (or less, or NaN) means unknown → net_mbps
	// Attrs are free-form attributes → attrs, a map(string, dyn).
	// Values may be string, bool, int64 (or any Go integer), float64
	// (or float32) and []any of those. Values of other types make the
	// expressions that read them undefined. See Prepare.
	Attrs map[string]any
	// Tokens are the free counts, net of reservations, of the counted
	// tokens the manager declares ("gpus", "licenses.matlab") → tokens, a
	// map(string, int). A token not in the map is missing, so reading it
	// is undefined. Set it with SetTokens, which converts it for CEL once;
	// assigning the field works too, only slower (see Prepare).
	Tokens map[string]int64
	// Apps are the application instances here by application name →
	// apps, a map(string, map(string, int)): apps.ticker.instances,
	// apps.ticker.running. An application with no instance is missing.
	Apps map[string]AppCount

	// Now is the manager's time → now, a timestamp (now.getHours("UTC"),
	// now.getDayOfWeek("Europe/Paris")); zero makes it undefined.
	Now time.Time
	// GoOS and GoArch are Go's names of the system → go_os, go_arch
	// (os and arch may be overridden by the owner).
	GoOS, GoArch string
	// Load1, Load5 and Load15 are the load averages → load1, load5,
	// load15; UptimeS the seconds since boot → uptime_s; DiskFree the
	// bytes free on the data dir's filesystem → disk_free; IdleS the
	// seconds since console or keyboard input → idle_s. A negative value
	// means unknown: the variable is undefined then.
	Load1, Load5, Load15 float64
	UptimeS, DiskFree    int64
	IdleS                float64
	// Disks are the bytes free on the filesystems the owner names
	// ([disks]) → disks, a map(string, int); a disk not read is missing.
	Disks map[string]int64
	// OwnerRank is the owner's rank of the request being matched →
	// owner_rank, defined only if OwnerRanked. It depends on the request:
	// the caller computes it (with the owner's rank program, on a Values
	// without it) and sets it on a copy for that request, before
	// evaluating the requirement, policy and rank.
	OwnerRank   float64
	OwnerRanked bool

	prep preparedAttrs  // set by Prepare
	tok  preparedTokens // set by SetTokens and Prepare
}

// preparedTokens is Tokens converted to a CEL map once.
type preparedTokens struct {
	of  map[string]int64 // the Tokens map it was made from
	n   int              // len(Tokens) then
	val ref.Val          // Tokens as a CEL map whose values are types.Int
}

// preparedAttrs is Attrs converted to CEL values once.
type preparedAttrs struct {
	of   map[string]any // the Attrs map it was made from
	n    int            // len(Attrs) then
	vals map[string]any // Attrs with every value a ref.Val
}

// Prepare converts Attrs to CEL values once, so that evaluations do not
// convert them on every access. It is optional: without it (or after
// Attrs is replaced by another map) evaluations give the same results,
// only slower. Call it after the last change to Attrs and before the
// Values is shared between goroutines, and again after changing Attrs in
// place: a change that keeps the number of keys goes unseen until then.
//
// Prepare converts Tokens too; to change only Tokens (after every
// reservation, say), SetTokens is enough.
func (v *Values) Prepare() {
	v.SetTokens(v.Tokens)
	if v.Attrs == nil {
		v.prep = preparedAttrs{}
		return
	}
	vals := make(map[string]any, len(v.Attrs))
	for k, x := range v.Attrs {
		vals[k] = attrVal(x)
	}
	v.prep = preparedAttrs{of: v.Attrs, n: len(v.Attrs), vals: vals}
}

// SetTokens sets Tokens to m and converts it to a CEL map at once, so
// that evaluations read it without converting it; it is cheap (one small
// map per call) and leaves Attrs and their preparation alone, so a caller
// whose token counts change more often than the rest (after each
// reservation) calls SetTokens for them rather than Prepare. The Values
// keeps m: the caller must not change it afterwards, or must call
// SetTokens again after a change (a change in place that keeps the
// number of keys goes unseen until then). Like any other write, it must
// not race with evaluations of v.
func (v *Values) SetTokens(m map[string]int64) {
	v.Tokens = m
	if m == nil {
		v.tok = preparedTokens{}
		return
	}
	vals := make(map[string]any, len(m))
	for k, n := range m {
		vals[k] = types.Int(n)
	}
	v.tok = preparedTokens{of: m, n: len(m), val: types.NewStringInterfaceMap(types.DefaultTypeAdapter, vals)}
}

// attrs returns attrs as CEL sees it.
func (v *Values) attrs() any {
	if v.Attrs == nil {
		return emptyAttrs
	}
	if v.prep.vals != nil && v.prep.n == len(v.Attrs) && sameMap(v.prep.of, v.Attrs) {
		return v.prep.vals
	}
	return v.Attrs
}

// tokens returns tokens as CEL sees it: the map SetTokens converted if
// Tokens is still that map, else Tokens itself (which CEL adapts on each
// access).
func (v *Values) tokens() any {
	if v.Tokens == nil {
		return emptyTokens
	}
	if v.tok.val != nil && v.tok.n == len(v.Tokens) && sameMap(v.tok.of, v.Tokens) {
		return v.tok.val
	}
	return v.Tokens
}

// sameMap reports whether a and b are the same map (not just equal).
func sameMap[V any](a, b map[string]V) bool {
	return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer()
}

// attrVal converts one attribute value to a CEL value; values of other
// types are left to CEL's adapter (which reports an error value for
// what it cannot represent).
func attrVal(x any) ref.Val {
	switch x := x.(type) {
	case ref.Val:
		return x
	case string:
		return types.String(x)
	case bool:
		return types.Bool(x)
	case int64:
		return types.Int(x)
	case int:
		return types.Int(x)
	case int32:
		return types.Int(x)
	case float64:
		return types.Double(x)
	case float32:
		return types.Double(x)
	case []any:
		return attrList(x)
	case []string:
		return attrList(x)
	case []int64:
		return attrList(x)
	case []float64:
		return attrList(x)
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = attrVal(e)
		}
		return types.NewStringInterfaceMap(types.DefaultTypeAdapter, m)
	}
	return types.DefaultTypeAdapter.NativeToValue(x)
}

func attrList[T any](xs []T) ref.Val {
	out := make([]ref.Val, len(xs))
	for i, e := range xs {
		out[i] = attrVal(e)
	}
	return types.NewRefValList(types.DefaultTypeAdapter, out)
}

// Request describes who asks and what they intend to claim; expressions
// see it as `request`.
type Request struct {
	User  string            // → request.user
	CPUs  int64             // → request.cpus
	Mem   int64             // → request.mem (bytes)
	Attrs map[string]string // → request.attrs: the job's own attributes (--attr KEY=VALUE)
}

// requestTypeName is the CEL type name of `request`.
const requestTypeName = "gridmgr.Request"

var unitConsts = []struct {
	name string
	val  int64
}{{"KiB", KiB}, {"MiB", MiB}, {"GiB", GiB}, {"TiB", TiB}}

// requestFields are the fields of `request`, for suggestions.
var requestFields = []string{"attrs", "cpus", "mem", "user"}

// Names returns the identifiers that expressions may use: the variables
// of the schema and the unit constants, sorted.
func Identifiers() []string {
	out := make([]string, 0, len(vars)+len(unitConsts))
	for _, v := range vars {
		if !v.Request {
			out = append(out, v.Name)
		}
	}
	out = append(out, "request")
	for _, c := range unitConsts {
		out = append(out, c.name)
	}
	slices.Sort(out)
	return out
}

var (
	envOnce sync.Once
	envVal  *cel.Env
	envErr  error
)

// noEstimates leaves every size and call cost to CEL's defaults, which
// take the sizes of strings, lists and maps read from variables as
// unbounded.
type noEstimates struct{}

func (noEstimates) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

func (noEstimates) EstimateSize(cost.AstNode) *cost.SizeEstimate { return nil }

// celEnv returns the process-wide CEL environment, built on first use.
// A *cel.Env is safe for concurrent use.
func celEnv() (*cel.Env, error) {
	envOnce.Do(func() {
		opts := []cel.EnvOption{
			cel.Types(cel.NativeTypeFor[Request](
				cel.NativeTypeAlias(requestTypeName),
				types.ParseStructField(func(f reflect.StructField) string {
					return strings.ToLower(f.Name)
				}),
			)),
			cel.OptionalTypes(),
			cel.CrossTypeNumericComparisons(true),
			cel.ParserRecursionLimit(MaxNesting),
			cel.ParserExpressionSizeLimit(MaxExprLen),
			cel.ParserErrorRecoveryLimit(16),
			cel.ExpressionNodeLimit(4 * MaxExprLen),
		}
		for _, v := range vars {
			if !v.Request {
				opts = append(opts, cel.Variable(v.Name, v.cel))
			}
		}
		opts = append(opts, cel.Variable("request", cel.ObjectType(requestTypeName)))
		for _, c := range unitConsts {
			opts = append(opts, cel.Constant(c.name, cel.IntType, types.Int(c.val)))
		}
		envVal, envErr = cel.NewEnv(opts...)
	})
	return envVal, envErr
}

// Program is one compiled expression. It is immutable: Match, Score and
// the accessors may be called from several goroutines at once.
type Program struct {
	kind Kind
	src  string
	refs []string
	prg  cel.Program
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

// Issue is one problem CEL found in an expression.
type Issue struct {
	Line, Col int // 1-based; Col counts characters (runes)
	Msg       string
}

// ExprError is a compile error of an expression.
type ExprError struct {
	Kind      Kind
	Src       string
	Line, Col int    // 1-based position of the first issue; Col counts characters
	Msg       string // the first issue
	// Issues holds every issue CEL reported, the first one included.
	Issues []Issue
}

// Error renders the first issue on one line, then the source line it is
// on and a caret under its column, e.g.
//
//	requirement: 1:19: undeclared reference to 'cpu' (did you mean 'cpus'?)
//	  cpus_free >= 4 && cpu > 2
//	                    ^
func (e *ExprError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d:%d: %s", e.Kind, e.Line, e.Col, e.Msg)
	if line, caret, ok := srcSnippet(e.Src, e.Line, e.Col); ok {
		b.WriteString("\n  ")
		b.WriteString(line)
		b.WriteString("\n  ")
		b.WriteString(caret)
	}
	return b.String()
}

// Unwrap returns ErrExpr.
func (e *ExprError) Unwrap() error { return ErrExpr }

// snippetWidth is the most characters of a source line Error shows.
const snippetWidth = 100

// srcSnippet returns source line `line` (tabs and other control characters
// shown as spaces, cut to a window of snippetWidth characters around col)
// and a caret line pointing at col.
func srcSnippet(src string, line, col int) (string, string, bool) {
	if line < 1 {
		return "", "", false
	}
	lines := strings.Split(src, "\n")
	if line > len(lines) {
		return "", "", false
	}
	rs := []rune(strings.TrimSuffix(lines[line-1], "\r"))
	for i, r := range rs {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Zs, r) {
			rs[i] = ' '
		}
	}
	c := max(col-1, 0) // 0-based caret position in rs
	start, end, pre, post := 0, len(rs), "", ""
	if len(rs) > snippetWidth {
		start = max(0, min(c-snippetWidth/2, len(rs)-snippetWidth))
		end = start + snippetWidth
		if start > 0 {
			pre = "..."
		}
		if end < len(rs) {
			post = "..."
		}
	}
	text := pre + string(rs[start:end]) + post
	caret := strings.Repeat(" ", len(pre)+c-start) + "^"
	return text, caret, true
}

// exprErr builds an *ExprError with one issue.
func exprErr(kind Kind, src string, line, col int, msg string) *ExprError {
	return &ExprError{Kind: kind, Src: src, Line: line, Col: col, Msg: msg,
		Issues: []Issue{{Line: line, Col: col, Msg: msg}}}
}

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
	refs := exprRefs(ast.NativeRep())
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
	return &Program{kind: kind, src: src, refs: refs, prg: prg, tracked: tracked, estMax: est.Max, logic: logic}, nil
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

// issuesErr converts CEL's issues into an *ExprError.
func issuesErr(kind Kind, src string, iss *cel.Issues) *ExprError {
	e := &ExprError{Kind: kind, Src: src}
	for _, ce := range iss.Errors() {
		line, col := ce.Location.Line(), ce.Location.Column()+1
		if line < 1 {
			line, col = srcStart(src)
		}
		col = max(col, 1)
		e.Issues = append(e.Issues, Issue{Line: line, Col: col, Msg: oneLine(improveMsg(ce.Message))})
	}
	if len(e.Issues) == 0 {
		e.Issues = []Issue{{Line: 1, Col: 1, Msg: oneLine(strings.TrimSpace(iss.String()))}}
	}
	first := e.Issues[0]
	e.Line, e.Col, e.Msg = first.Line, first.Col, first.Msg
	if e.Msg == "" {
		e.Msg = "invalid expression"
		e.Issues[0].Msg = e.Msg
	}
	return e
}

// oneLine escapes the control characters (newlines, tabs) that CEL may
// quote from the source into a message, so the message stays one line.
func oneLine(msg string) string {
	if !strings.ContainsFunc(msg, unicode.IsControl) {
		return msg
	}
	var b strings.Builder
	for _, r := range msg {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// improveMsg rewrites some of CEL's messages: it shortens syntax errors,
// drops the empty container and adds a suggestion to undeclared
// references and undefined fields.
func improveMsg(msg string) string {
	if rest, ok := strings.CutPrefix(msg, "Syntax error: "); ok {
		return "syntax error: " + improveSyntax(rest)
	}
	msg = strings.Replace(msg, " (in container '')", "", 1)
	if strings.HasPrefix(msg, "found no matching overload for '_==_'") ||
		strings.HasPrefix(msg, "found no matching overload for '_!=_'") {
		if strings.Contains(msg, "(int, double)") || strings.Contains(msg, "(double, int)") {
			msg += " (== does not mix int and double: write 2.0 for a double, or convert with double())"
		}
		return msg
	}
	if strings.Contains(msg, "did you mean") {
		return msg
	}
	for _, c := range []struct {
		prefix  string
		options []string
	}{
		{"undeclared reference to '", Identifiers()},
		{"undefined field '", requestFields},
	} {
		rest, ok := strings.CutPrefix(msg, c.prefix)
		if !ok {
			continue
		}
		name, _, ok := strings.Cut(rest, "'")
		if !ok {
			continue
		}
		if s := suggest(name, c.options); s != "" {
			msg += " (did you mean '" + s + "'?)"
		}
	}
	return msg
}

// improveSyntax shortens ANTLR's messages: "mismatched input '<EOF>'
// expecting {a dozen tokens}" becomes "unexpected end of expression".
func improveSyntax(msg string) string {
	for _, p := range []string{"mismatched input ", "extraneous input "} {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			tok, expect, _ := strings.Cut(rest, " expecting ")
			msg = "unexpected " + tok
			// A short expectation helps ("expecting ')'"); a set of
			// every token that may start an expression does not.
			if expect != "" && !strings.HasPrefix(expect, "{") {
				msg += ", expecting " + expect
			}
			break
		}
	}
	msg = strings.ReplaceAll(msg, "'<EOF>'", "end of expression")
	return strings.ReplaceAll(msg, "<EOF>", "end of expression")
}

// suggest returns the option nearest to word within a small edit
// distance, or "".
func suggest(word string, options []string) string {
	d := 2
	if len(word) <= 3 {
		d = 1
	}
	if s := text.Closest(word, options, d); s != "" {
		return s
	}
	// A different case only (CPUS, Mem) is always worth suggesting.
	for _, o := range options {
		if strings.EqualFold(o, word) {
			return o
		}
	}
	return ""
}

// srcPosition returns the 1-based line and character column of byte offset
// off in src.
func srcPosition(src string, off int) (line, col int) {
	line, col = 1, 1
	for _, r := range src[:off] {
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// srcStart returns the position of the first non-space character of
// src (1:1 if there is none).
func srcStart(src string) (line, col int) {
	i := strings.IndexFunc(src, func(r rune) bool { return !unicode.IsSpace(r) })
	if i < 0 {
		return 1, 1
	}
	return srcPosition(src, i)
}

// exprRefs returns the schema attributes that a checked expression reads.
func exprRefs(a *celast.AST) []string {
	set := map[string]struct{}{}
	walkRefs(a.Expr(), nil, set)
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
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

// evalVars presents a Values and a Request to CEL without building a
// map: variables are resolved by a switch on the name.
type evalVars struct {
	v *Values
	r *Request
}

var (
	emptyAttrs  = types.NewStringInterfaceMap(types.DefaultTypeAdapter, map[string]any{})
	emptyTokens = types.NewStringInterfaceMap(types.DefaultTypeAdapter, map[string]any{})
)

// ResolveName implements interpreter.Activation. Unknown values
// (negative or NaN cpu_util, non-positive or NaN net_mbps) are absent, so
// reading them is an error.
func (a *evalVars) ResolveName(name string) (any, bool) {
	if name == "request" {
		if a.r == nil {
			return nil, false
		}
		return a.r, true
	}
	v := a.v
	if v == nil {
		return nil, false
	}
	switch name {
	case "name":
		return types.String(v.Name), true
	case "hostname":
		return types.String(v.Hostname), true
	case "os":
		return types.String(v.OS), true
	case "arch":
		return types.String(v.Arch), true
	case "cpus":
		return types.Int(v.CPUs), true
	case "cpus_free":
		return types.Int(v.CPUsFree), true
	case "cpu_util":
		if v.CPUUtil < 0 || math.IsNaN(v.CPUUtil) {
			return nil, false
		}
		return types.Double(v.CPUUtil), true
	case "mem":
		return types.Int(v.Mem), true
	case "mem_free":
		return types.Int(v.MemFree), true
	case "net_mbps":
		if !(v.NetMbps > 0) {
			return nil, false
		}
		return types.Double(v.NetMbps), true
	case "attrs":
		return v.attrs(), true
	case "tokens":
		return v.tokens(), true
	case "apps":
		return v.apps(), true
	case "now":
		if v.Now.IsZero() {
			return nil, false
		}
		return types.Timestamp{Time: v.Now}, true
	case "go_os":
		return types.String(v.GoOS), true
	case "go_arch":
		return types.String(v.GoArch), true
	case "load1":
		return known(v.Load1)
	case "load5":
		return known(v.Load5)
	case "load15":
		return known(v.Load15)
	case "idle_s":
		return known(v.IdleS)
	case "uptime_s":
		if v.UptimeS < 0 {
			return nil, false
		}
		return types.Int(v.UptimeS), true
	case "disk_free":
		if v.DiskFree < 0 {
			return nil, false
		}
		return types.Int(v.DiskFree), true
	case "disks":
		if v.Disks == nil {
			return emptyTokens, true
		}
		return v.Disks, true
	case OwnerRankVar:
		if !v.OwnerRanked || math.IsNaN(v.OwnerRank) {
			return nil, false
		}
		return types.Double(v.OwnerRank), true
	}
	return nil, false
}

// known is a measured double, absent when negative or NaN (unknown).
func known(f float64) (any, bool) {
	if f < 0 || math.IsNaN(f) {
		return nil, false
	}
	return types.Double(f), true
}

// Parent implements interpreter.Activation.
func (a *evalVars) Parent() interpreter.Activation { return nil }

// eval runs p on v and r; errors and cancellations come back as err.
func (p *Program) eval(v *Values, r *Request) (ref.Val, error) {
	if p.logic != nil {
		return p.logic.evalLogic(v, r)
	}
	out, _, err := p.prg.Eval(&evalVars{v: v, r: r})
	return out, err
}

// Match evaluates a requirement or policy: it is true only if the
// expression evaluates to the bool true. Any evaluation error (an unknown
// or missing attribute, no such key, division by zero, overflow, the cost
// limit) makes it false, like ClassAd's "undefined". v or r may be nil:
// their variables are then absent. Match on a Rank program is
// false unless the rank evaluates to bool true (which type checking
// prevents), so it is always false in practice.
func (p *Program) Match(v *Values, r *Request) bool {
	out, err := p.eval(v, r)
	return err == nil && out == types.True
}

// Score evaluates a rank: an int, uint or double result as float64. ok is
// false when the evaluation errs, when the result is not a number, or
// when it is NaN; callers rank such offers last.
func (p *Program) Score(v *Values, r *Request) (score float64, ok bool) {
	out, err := p.eval(v, r)
	if err != nil {
		return 0, false
	}
	switch x := out.(type) {
	case types.Int:
		return float64(x), true
	case types.Uint:
		return float64(x), true
	case types.Double:
		if math.IsNaN(float64(x)) {
			return 0, false
		}
		return float64(x), true
	}
	return 0, false
}

// Cache compiles each distinct (kind, src) once and keeps the n most
// recently used results, errors included. It is not safe for concurrent
// use: one goroutine owns it. The Programs it returns are safe to share.
type Cache struct {
	n     int
	order *list.List // of *cacheEntry, most recent first
	byKey map[cacheKey]*list.Element
}

type cacheKey struct {
	kind Kind
	src  string
}

type cacheEntry struct {
	key cacheKey
	prg *Program
	err error
}

// NewCache returns a cache of at most n compiled expressions; n < 1 is
// taken as 1.
func NewCache(n int) *Cache {
	n = max(n, 1)
	// The map grows as it is used: a manager that never sees a query
	// (most of a large simulated grid) pays for an empty map only.
	return &Cache{n: n, order: list.New(), byKey: make(map[cacheKey]*list.Element)}
}

// Get returns Compile(kind, src), compiling only on a miss.
func (c *Cache) Get(kind Kind, src string) (*Program, error) {
	k := cacheKey{kind, src}
	if el, ok := c.byKey[k]; ok {
		c.order.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		return e.prg, e.err
	}
	prg, err := Compile(kind, src)
	c.byKey[k] = c.order.PushFront(&cacheEntry{key: k, prg: prg, err: err})
	for c.order.Len() > c.n {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*cacheEntry).key)
	}
	return prg, err
}

// Len returns the number of cached results.
func (c *Cache) Len() int { return c.order.Len() }

// AppCount is how many instances of one application a manager has, and
// how many of them run.
type AppCount struct {
	Instances int64
	Running   int64
}

// apps returns apps as CEL sees it.
func (v *Values) apps() any {
	m := make(map[string]any, len(v.Apps))
	for name, c := range v.Apps {
		m[name] = types.NewStringInterfaceMap(types.DefaultTypeAdapter, map[string]any{
			"instances": types.Int(c.Instances), "running": types.Int(c.Running)})
	}
	return types.NewStringInterfaceMap(types.DefaultTypeAdapter, m)
}
