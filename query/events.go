package query

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

// Filter is the Kind of an event filter (CompileEventFilter). Compile
// does not take it: event filters see `event`, not the schema of offers.
const Filter Kind = Policy + 1

// filterName is how errors name an event filter. Kind.String does not
// know Filter, so the errors of CompileEventFilter render it themselves
// (see filterError).
const filterName = "filter"

// eventVar is the one variable an event filter sees.
const eventVar = "event"

// eventKeys are the keys EventMap gives an event, and the keys of each
// body, by the body's key. A filter that selects another key of event or
// of a body is a compile error: it could never match.
var eventKeys = map[string][]string{
	"": {"version", "kind", "type", "manager", "peer", "time", "seq", "trace_id",
		"relation", "reservation", "app", "admin", "utilization"},
	"relation":    {"peer", "name", "role", "from", "to", "cause"},
	"reservation": {"id", "holder_peer", "user", "amounts", "expires", "group", "reason"},
	"app": {"instance", "app", "reservation", "state", "cpu_seconds", "mem_bytes",
		"cpu_limit", "mem_limit", "detail"},
	"admin": {"author", "command", "ok", "detail"},
	"utilization": {"cpu_util", "free", "usage", "reservations", "instances", "running",
		"subtree_managers", "subtree_free", "superior"},
}

// EventFilter is a compiled event filter. It is immutable: Match and
// Source may be called from several goroutines at once.
type EventFilter struct {
	src string
	prg cel.Program
}

// Source returns the expression as given to CompileEventFilter.
func (f *EventFilter) Source() string { return f.src }

// filterError is the error of CompileEventFilter: an *ExprError (of Kind
// Filter) that renders as "filter: LINE:COL: ..." with the source line
// and caret. errors.As(err, &ee) with ee an *ExprError finds it, and
// errors.Is(err, ErrExpr) holds.
type filterError struct{ e *ExprError }

func (f *filterError) Error() string {
	return filterName + strings.TrimPrefix(f.e.Error(), f.e.Kind.String())
}

func (f *filterError) Unwrap() error { return f.e }

// filterErr builds the error of a filter with one issue.
func filterErr(src string, line, col int, msg string) error {
	return &filterError{exprErr(Filter, src, line, col, msg)}
}

var (
	eventEnvOnce sync.Once
	eventEnvVal  *cel.Env
	eventEnvErr  error
)

// eventEnv returns the CEL environment of event filters: the one
// variable `event`, a map(string, dyn), with the parser limits and
// options of the other expressions.
func eventEnv() (*cel.Env, error) {
	eventEnvOnce.Do(func() {
		eventEnvVal, eventEnvErr = cel.NewEnv(
			cel.OptionalTypes(),
			cel.CrossTypeNumericComparisons(true),
			cel.ParserRecursionLimit(MaxNesting),
			cel.ParserExpressionSizeLimit(MaxExprLen),
			cel.ParserErrorRecoveryLimit(16),
			cel.ExpressionNodeLimit(4*MaxExprLen),
			cel.Variable(eventVar, cel.MapType(cel.StringType, cel.DynType)),
		)
	})
	return eventEnvVal, eventEnvErr
}

// CompileEventFilter compiles src, a CEL expression of type bool over the
// variable `event` (the map EventMap returns; see the package
// documentation). Every failure is an error that errors.As turns into an
// *ExprError of Kind Filter (and that wraps ErrExpr), rendered as
// "filter: LINE:COL: message" with the source line and a caret. An empty
// (or all-space) source is an error: callers that have no filter skip
// it rather than compile one.
func CompileEventFilter(src string) (*EventFilter, error) {
	if strings.TrimSpace(src) == "" {
		return nil, filterErr(src, 1, 1, "empty filter")
	}
	if len(src) > MaxExprLen {
		return nil, filterErr(src, 1, 1, fmt.Sprintf(
			"expression is %d bytes long; the limit is %d", len(src), MaxExprLen))
	}
	if off := text.FirstInvalidUTF8(src); off >= 0 {
		line, col := srcPosition(src, off)
		return nil, filterErr(src, line, col, "expression is not valid UTF-8")
	}
	env, err := eventEnv()
	if err != nil {
		return nil, filterErr(src, 1, 1, "expression environment: "+err.Error())
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		e := issuesErr(Filter, src, iss)
		for i := range e.Issues {
			e.Issues[i].Msg = filterSuggest(e.Issues[i].Msg)
		}
		e.Msg = e.Issues[0].Msg
		return nil, &filterError{e}
	}
	if k := ast.OutputType().Kind(); k != types.BoolKind && k != types.DynKind {
		line, col := srcStart(src)
		return nil, filterErr(src, line, col, fmt.Sprintf("a filter must be bool, got %s", ast.OutputType()))
	}
	if id, key, msg := checkEventKeys(ast.NativeRep()); msg != "" {
		line, col := exprPosition(src, ast.NativeRep().SourceInfo(), id, key)
		return nil, filterErr(src, line, col, msg)
	}
	popts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize), cel.CustomDecoratorV2(foldConstCalls)}
	est, err := env.EstimateCost(ast, noEstimates{})
	if err == nil && est.Min > MaxCost {
		line, col := srcStart(src)
		return nil, filterErr(src, line, col, fmt.Sprintf(
			"expression costs at least %d to evaluate; the limit is %d", est.Min, MaxCost))
	}
	if err != nil || est.Max > MaxCost {
		popts = append(popts, cel.CostLimit(MaxCost))
	}
	prg, err := env.Program(ast, popts...)
	if err != nil {
		line, col := srcStart(src)
		return nil, filterErr(src, line, col, err.Error())
	}
	return &EventFilter{src: src, prg: prg}, nil
}

// filterSuggest replaces the suggestion issuesErr made for an undeclared
// reference (taken from the offer schema) by one for event filters.
func filterSuggest(msg string) string {
	rest, ok := strings.CutPrefix(msg, "undeclared reference to '")
	if !ok {
		return msg
	}
	name, _, ok := strings.Cut(rest, "'")
	if !ok {
		return msg
	}
	msg = "undeclared reference to '" + name + "'"
	switch {
	case slices.Contains(eventKeys[""], name):
		msg += " (did you mean 'event." + name + "'?)"
	case suggest(name, []string{eventVar}) != "":
		msg += " (did you mean 'event'?)"
	}
	return msg
}

// checkEventKeys looks for a constant key of `event`, or of one of its
// bodies, that EventMap never sets (event.knd, event["app"].instanc):
// it returns the id of the first such expression, the key and a
// message, or "".
func checkEventKeys(a *celast.AST) (int64, string, string) {
	var (
		id       int64
		bad, msg string
	)
	// keyOf returns the map key that e selects on its operand, if e is
	// a select or an index with a constant string.
	keyOf := func(e celast.Expr) (celast.Expr, string, bool) {
		switch e.Kind() {
		case celast.SelectKind:
			s := e.AsSelect()
			return s.Operand(), s.FieldName(), true
		case celast.CallKind:
			c := e.AsCall()
			args := c.Args()
			fn := c.FunctionName()
			if (fn == "_[_]" || fn == "_[?_]" || fn == "_?._") && len(args) == 2 && args[1].Kind() == celast.LiteralKind {
				if k, ok := args[1].AsLiteral().(types.String); ok {
					return args[0], string(k), true
				}
			}
		}
		return nil, "", false
	}
	isEvent := func(e celast.Expr, local []string) bool {
		return e.Kind() == celast.IdentKind && e.AsIdent() == eventVar && !slices.Contains(local, eventVar)
	}
	check := func(e celast.Expr, local []string) {
		operand, key, ok := keyOf(e)
		if !ok || msg != "" {
			return
		}
		where, keys := "event", eventKeys[""]
		if !isEvent(operand, local) {
			inner, body, ok := keyOf(operand)
			if !ok || !isEvent(inner, local) || eventKeys[body] == nil || body == "" {
				return
			}
			where, keys = "event."+body, eventKeys[body]
		}
		if slices.Contains(keys, key) {
			return
		}
		id, bad, msg = e.ID(), key, fmt.Sprintf("%s has no key %q", where, key)
		if s := suggest(key, keys); s != "" {
			msg += " (did you mean '" + s + "'?)"
		}
	}
	var walk func(e celast.Expr, local []string)
	walk = func(e celast.Expr, local []string) {
		if msg != "" {
			return
		}
		check(e, local)
		switch e.Kind() {
		case celast.SelectKind:
			walk(e.AsSelect().Operand(), local)
		case celast.CallKind:
			c := e.AsCall()
			if c.IsMemberFunction() {
				walk(c.Target(), local)
			}
			for _, x := range c.Args() {
				walk(x, local)
			}
		case celast.ListKind:
			for _, x := range e.AsList().Elements() {
				walk(x, local)
			}
		case celast.MapKind:
			for _, en := range e.AsMap().Entries() {
				if en.Kind() == celast.MapEntryKind {
					walk(en.AsMapEntry().Key(), local)
					walk(en.AsMapEntry().Value(), local)
				}
			}
		case celast.StructKind:
			for _, f := range e.AsStruct().Fields() {
				if f.Kind() == celast.StructFieldKind {
					walk(f.AsStructField().Value(), local)
				}
			}
		case celast.ComprehensionKind:
			c := e.AsComprehension()
			walk(c.IterRange(), local)
			walk(c.AccuInit(), local)
			inner := append(slices.Clip(local), c.AccuVar(), c.IterVar())
			if c.HasIterVar2() {
				inner = append(inner, c.IterVar2())
			}
			walk(c.LoopCondition(), inner)
			walk(c.LoopStep(), inner)
			walk(c.Result(), slices.Concat(local, []string{c.AccuVar()}))
		}
	}
	walk(a.Expr(), nil)
	return id, bad, msg
}

// exprPosition returns the 1-based line and character column of the
// expression id in src, moved on to the first occurrence of key at or
// after it (the field name after the dot of a select, the key of an
// index); the start of src if CEL did not record the expression.
func exprPosition(src string, si *celast.SourceInfo, id int64, key string) (line, col int) {
	loc := si.GetStartLocation(id)
	if loc.Line() < 1 {
		return srcStart(src)
	}
	line, col = loc.Line(), max(loc.Column()+1, 1)
	// Byte offset of line:col, then of key from there.
	off := 0
	for range line - 1 {
		i := strings.IndexByte(src[off:], '\n')
		if i < 0 {
			return line, col
		}
		off += i + 1
	}
	for n := 1; n < col && off < len(src) && src[off] != '\n'; n++ {
		_, size := utf8.DecodeRuneInString(src[off:])
		off += size
	}
	if i := strings.Index(src[off:], key); i >= 0 && key != "" {
		return srcPosition(src, off+i)
	}
	return line, col
}

// errNotBool is returned by Match when a filter of type dyn evaluates to
// something other than a bool.
var errNotBool = errors.New("filter result is not a bool")

// Match evaluates the filter on ev: true only if it evaluates to the bool
// true. It returns an error when the evaluation fails (a key ev does not
// have, such as event.app.state on a reservation event; division by zero;
// the cost limit MaxCost) or gives something other than a bool; callers
// treat that as no match. A nil ev is an event with every field zero.
func (f *EventFilter) Match(ev *wire.Event) (bool, error) {
	m := types.NewStringInterfaceMap(types.DefaultTypeAdapter, EventMap(ev))
	out, _, err := f.prg.Eval(map[string]any{eventVar: m})
	if err != nil {
		return false, fmt.Errorf("%s: %w", filterName, err)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("%s: %w (got %s)", filterName, errNotBool, out.Type().TypeName())
	}
	return bool(b), nil
}

// enumWord returns the lower-case word of an enum value's name after
// prefix: EVENT_KIND_RELATION → "relation"; a value the generated code
// does not know is its number.
func enumWord(name, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}

// amountMap returns amounts as a map from kind to n (the last one wins
// if a kind repeats).
func amountMap(as []*wire.Amount) map[string]any {
	m := make(map[string]any, len(as))
	for _, a := range as {
		m[a.GetKind()] = a.GetN()
	}
	return m
}

// clampInt converts a uint64 to an int64, saturating.
func clampInt(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

// EventMap returns ev as event filters see it (`watch --json` prints the
// wire message instead, docs/cli-json.md): a map whose values are string, bool, int64, float64, time.Time
// (UTC) and nested map[string]any, with the keys listed in the package
// documentation. Only the key of ev's body (relation, reservation, app,
// admin or utilization) is set, and none when ev has no body. A nil ev
// gives the map of an event with every field zero. The map is new on
// every call; the caller may keep or change it.
func EventMap(ev *wire.Event) map[string]any {
	m := map[string]any{
		"version":  int64(ev.GetVersion()),
		"kind":     enumWord(ev.GetKind().String(), "EVENT_KIND_"),
		"type":     ev.GetType(),
		"manager":  ev.GetManager(),
		"peer":     ev.GetPeer(),
		"time":     time.UnixMilli(ev.GetTimeUnixMs()).UTC(),
		"seq":      clampInt(ev.GetSeq()),
		"trace_id": ev.GetTraceId(),
	}
	switch b := ev.GetBody().(type) {
	case *wire.Event_Relation:
		r := b.Relation
		m["relation"] = map[string]any{
			"peer":  r.GetPeer(),
			"name":  r.GetName(),
			"role":  enumWord(r.GetRole().String(), "ROLE_"),
			"from":  enumWord(r.GetFrom().String(), "RELATION_STATE_"),
			"to":    enumWord(r.GetTo().String(), "RELATION_STATE_"),
			"cause": r.GetCause(),
		}
	case *wire.Event_Reservation:
		r := b.Reservation
		rm := map[string]any{
			"id":          r.GetId(),
			"holder_peer": r.GetHolderPeer(),
			"user":        r.GetUser(),
			"amounts":     amountMap(r.GetAmounts()),
			"group":       r.GetGroup(),
			"reason":      r.GetReason(),
		}
		if ms := r.GetExpiresUnixMs(); ms != 0 {
			rm["expires"] = time.UnixMilli(ms).UTC()
		}
		m["reservation"] = rm
	case *wire.Event_App:
		a := b.App
		m["app"] = map[string]any{
			"instance":    a.GetInstance(),
			"app":         a.GetApp(),
			"reservation": a.GetReservation(),
			"state":       a.GetState(),
			"cpu_seconds": a.GetCpuSeconds(),
			"mem_bytes":   a.GetMemBytes(),
			"cpu_limit":   a.GetCpuLimit(),
			"mem_limit":   a.GetMemLimit(),
			"detail":      a.GetDetail(),
		}
	case *wire.Event_Admin:
		a := b.Admin
		m["admin"] = map[string]any{
			"author":  a.GetAuthor(),
			"command": a.GetCommand(),
			"ok":      a.GetOk(),
			"detail":  a.GetDetail(),
		}
	case *wire.Event_Utilization:
		u := b.Utilization
		usage := make(map[string]any, len(u.GetUsage()))
		for _, x := range u.GetUsage() {
			usage[x.GetKind()] = map[string]any{"capacity": x.GetCapacity(), "used": x.GetUsed()}
		}
		m["utilization"] = map[string]any{
			"cpu_util":         u.GetCpuUtil(),
			"free":             amountMap(u.GetFree()),
			"usage":            usage,
			"reservations":     int64(u.GetReservations()),
			"instances":        int64(u.GetInstances()),
			"running":          int64(u.GetRunning()),
			"subtree_managers": int64(u.GetSubtreeManagers()),
			"subtree_free":     amountMap(u.GetSubtreeFree()),
			"superior":         u.GetSuperior(),
		}
	}
	return m
}
