// The CEL environment every expression is compiled in: the variables of
// the schema, `request`, the unit constants, and the identifiers offered
// as suggestions.

package query

import (
	"reflect"
	"slices"
	"strings"
	"sync"
	_ "time/tzdata" // now.getHours("Europe/Paris") on hosts without a zoneinfo database

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
)

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
