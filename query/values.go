// Values and Request: what expressions see of one manager and of the
// asker, and their conversion to CEL values (Prepare, SetTokens).

package query

import (
	"reflect"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

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

var (
	emptyAttrs  = types.NewStringInterfaceMap(types.DefaultTypeAdapter, map[string]any{})
	emptyTokens = types.NewStringInterfaceMap(types.DefaultTypeAdapter, map[string]any{})
)

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
