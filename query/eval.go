// Evaluation: the variables of a Values and a Request as CEL resolves
// them, and Match and Score.

package query

import (
	"math"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"
)

// evalVars presents a Values and a Request to CEL without building a
// map: variables are resolved by a switch on the name.
type evalVars struct {
	v *Values
	r *Request
}

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
