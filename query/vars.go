package query

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"cel.dev/cel-go/cel"

	"github.com/gridmgr/gridmgr/wire"
)

// Var is one variable that requirements, ranks and policies may read.
// Variables lists them all: it is the one list the CEL environment, Refs,
// Values.Show and Values.Listing, the package documentation, `gridmgr
// query -h` and `gridmgr resources` follow (tests hold the documentation
// and the README to it).
type Var struct {
	Name string // as expressions write it: "cpu_util", "request.user"
	Type string // its CEL type: "double", "map(string, int)"
	Unit string // "bytes", "s", "CPUs", "fraction", "Mbit/s", … or ""
	Doc  string // what it is, in a sentence
	// Request marks the fields of request: what the asker states, not a
	// value of the manager.
	Request bool
	// Live marks the values the runtime measures on the host; the owner
	// may declare any of them instead in the properties' [resources]
	// (package config knows the keys).
	Live bool
	// Map marks the variables of map type whose keys Refs, Show and
	// Listing name one by one (attrs.zone, tokens.gpus, disks.scratch,
	// apps.ticker).
	Map bool

	cel *cel.Type
}

// OwnerRankVar is the variable of the owner's rank of the request: an
// owner's rank may not read it (it is what that rank computes).
const OwnerRankVar = "owner_rank"

// vars are the variables, in the order of the documentation.
var vars = []Var{
	{Name: "name", Type: "string", Doc: "manager name", cel: cel.StringType},
	{Name: "hostname", Type: "string", Doc: "host name of the manager", cel: cel.StringType},
	{Name: "os", Type: "string", Doc: `operating system, as Go's GOOS ("linux") unless the owner renames it (os in the properties)`, cel: cel.StringType},
	{Name: "arch", Type: "string", Doc: `architecture, as Go's GOARCH ("amd64") unless the owner renames it (arch in the properties)`, cel: cel.StringType},
	{Name: "cpus", Type: "int", Unit: "CPUs", Doc: "logical CPUs", Live: true, cel: cel.IntType},
	{Name: "cpus_free", Type: "int", Unit: "CPUs", Doc: "CPUs not reserved", cel: cel.IntType},
	{Name: "cpu_util", Type: "double", Unit: "fraction", Doc: "smoothed CPU utilisation, 0..1 (undefined when unknown)", Live: true, cel: cel.DoubleType},
	{Name: "mem", Type: "int", Unit: "bytes", Doc: "memory", Live: true, cel: cel.IntType},
	{Name: "mem_free", Type: "int", Unit: "bytes", Doc: "memory not reserved, at most what the host has available", Live: true, cel: cel.IntType},
	{Name: "net_mbps", Type: "double", Unit: "Mbit/s", Doc: "link speed (undefined when unknown)", Live: true, cel: cel.DoubleType},
	{Name: "attrs", Type: "map(string, dyn)", Doc: `free-form attributes set by the owner ([attributes]): strings, int, double, bool or lists of those: attrs.zone == "eu-1", attrs["rack"] > 3, "ssd" in attrs.tags`,
		Map: true, cel: cel.MapType(cel.StringType, cel.DynType)},
	{Name: "tokens", Type: "map(string, int)", Unit: "tokens", Doc: `free count of each counted token the manager declares ([tokens]), net of what is reserved: tokens.gpus >= 1, tokens["licenses.matlab"] >= 2`,
		Map: true, cel: cel.MapType(cel.StringType, cel.IntType)},
	{Name: "apps", Type: "map(string, map(string, int))", Unit: "instances", Doc: `the application instances here, by application: apps.ticker.instances, apps.ticker.running (an application with none is missing)`,
		Map: true, cel: cel.MapType(cel.StringType, cel.MapType(cel.StringType, cel.IntType))},
	{Name: "now", Type: "timestamp", Doc: `the manager's time: now.getHours("UTC"), now.getDayOfWeek("Europe/Paris") (0 is Sunday)`, cel: cel.TimestampType},
	{Name: "go_os", Type: "string", Doc: `Go's name of the system ("linux"), whatever os says`, cel: cel.StringType},
	{Name: "go_arch", Type: "string", Doc: `Go's name of the architecture ("amd64"), whatever arch says`, cel: cel.StringType},
	{Name: "load1", Type: "double", Doc: "load average over 1 minute (undefined when unknown)", Live: true, cel: cel.DoubleType},
	{Name: "load5", Type: "double", Doc: "load average over 5 minutes (undefined when unknown)", Live: true, cel: cel.DoubleType},
	{Name: "load15", Type: "double", Doc: "load average over 15 minutes (undefined when unknown)", Live: true, cel: cel.DoubleType},
	{Name: "uptime_s", Type: "int", Unit: "s", Doc: "seconds since the host booted", Live: true, cel: cel.IntType},
	{Name: "disk_free", Type: "int", Unit: "bytes", Doc: "free space of the data dir's filesystem", Live: true, cel: cel.IntType},
	{Name: "disks", Type: "map(string, int)", Unit: "bytes", Doc: "free space of the filesystems the owner names in [disks]: disks.scratch (a disk not read, or not named, is missing)",
		Live: true, Map: true, cel: cel.MapType(cel.StringType, cel.IntType)},
	{Name: "idle_s", Type: "double", Unit: "s", Doc: "seconds since console or keyboard input (undefined on hosts with none)", Live: true, cel: cel.DoubleType},
	{Name: OwnerRankVar, Type: "double", Doc: "the owner's rank of this request (rank in the properties), computed before the policy: owner_rank >= 10 || load1 < 0.3 (undefined where the owner has no rank; the owner's rank cannot read it)", cel: cel.DoubleType},
	{Name: "request.user", Type: "string", Doc: "the asking user, as the owner recognises it ([users])", Request: true},
	{Name: "request.cpus", Type: "int", Unit: "CPUs", Doc: "CPUs the asker means to claim (--cpus)", Request: true},
	{Name: "request.mem", Type: "int", Unit: "bytes", Doc: "memory the asker means to claim (--mem)", Request: true},
	{Name: "request.attrs", Type: "map(string, string)", Doc: "the job's own attributes (--attr KEY=VALUE), strings: int(request.attrs.disk_mb) <= 500", Request: true},
}

// Variables returns every variable expressions may read, in the order of
// the documentation: first the manager's values, then the fields of
// request. The unit constants (KiB … TiB) are not variables; Units lists
// them.
func Variables() []Var { return slices.Clone(vars) }

// Units returns the names of the unit constants, smallest first, and
// their values.
func Units() (names []string, values []int64) {
	for _, c := range unitConsts {
		names = append(names, c.name)
		values = append(values, c.val)
	}
	return names, values
}

// lookupVar returns the manager's variable called name.
func lookupVar(name string) (Var, bool) {
	i := slices.IndexFunc(vars, func(v Var) bool { return v.Name == name && !v.Request })
	if i < 0 {
		return Var{}, false
	}
	return vars[i], true
}

// VarOf returns the variable that ref (as Refs and Listing name them:
// "cpu_util", "attrs.zone", tokens["licenses.matlab"], "request.user")
// is or is a key of.
func VarOf(ref string) (Var, bool) {
	if i := slices.IndexFunc(vars, func(v Var) bool { return v.Name == ref }); i >= 0 {
		return vars[i], true
	}
	name := ref
	if i := strings.IndexAny(ref, ".["); i > 0 {
		name = ref[:i]
	}
	v, ok := lookupVar(name)
	if !ok || !v.Map {
		return Var{}, false
	}
	return v, true
}

// Show renders the value of a variable of the manager or of one key of a
// map variable, named as Refs names it ("cpu_util", "attrs.zone",
// tokens["licenses.matlab"], "apps.ticker"), for a person: numbers in
// full (mem in bytes), "unknown" where the variable is undefined,
// "missing" for a key that is not in its map, "" for a name that is not
// a variable.
func (v *Values) Show(ref string) string {
	if x, ok := v.show(ref); ok {
		return x
	}
	if _, ok := lookupVar(ref); ok {
		return "unknown"
	}
	if m, k, ok := mapKey(ref); ok {
		var in bool
		var x string
		switch m {
		case "attrs":
			var a any
			if a, in = v.Attrs[k]; in {
				x = fmt.Sprint(a)
			}
		case "tokens":
			var n int64
			if n, in = v.Tokens[k]; in {
				x = strconv.FormatInt(n, 10)
			}
		case "disks":
			var n int64
			if n, in = v.Disks[k]; in {
				x = strconv.FormatInt(n, 10)
			}
		case "apps":
			var c AppCount
			if c, in = v.Apps[k]; in {
				x = fmt.Sprintf("instances=%d running=%d", c.Instances, c.Running)
			}
		}
		if in {
			return x
		}
		return "missing"
	}
	return ""
}

// show renders a variable of the manager that is not a map; ok is false
// when it is undefined or not such a variable.
func (v *Values) show(name string) (string, bool) {
	a := evalVars{v: v}
	switch name {
	case "attrs", "tokens", "apps", "disks", "request":
		return "", false
	case "cpu_util":
		if v.CPUUtil < 0 || math.IsNaN(v.CPUUtil) {
			return "", false
		}
		return strconv.FormatFloat(v.CPUUtil, 'f', 3, 64), true
	case "now":
		if v.Now.IsZero() {
			return "", false
		}
		return v.Now.UTC().Format(time.RFC3339), true
	}
	x, ok := a.ResolveName(name)
	if !ok {
		return "", false
	}
	switch x := x.(type) {
	case interface{ Value() any }:
		switch y := x.Value().(type) {
		case string:
			return y, true
		case int64:
			return strconv.FormatInt(y, 10), true
		case float64:
			return strconv.FormatFloat(y, 'f', -1, 64), true
		}
	}
	return "", false
}

// mapKey splits a ref to one key of a map variable, as Refs renders it
// (m.KEY, or m["KEY"] Go-quoted for other keys).
func mapKey(ref string) (m, key string, ok bool) {
	for _, v := range vars {
		if !v.Map {
			continue
		}
		rest, found := strings.CutPrefix(ref, v.Name)
		if !found {
			continue
		}
		if k, found := strings.CutPrefix(rest, "."); found && k != "" {
			return v.Name, k, true
		}
		if q, found := strings.CutPrefix(rest, "["); found {
			if q, found := strings.CutSuffix(q, "]"); found {
				if k, err := strconv.Unquote(q); err == nil {
					return v.Name, k, true
				}
			}
		}
	}
	return "", "", false
}

// Listing is every variable of the manager that an expression may read
// (not request), in the order of Variables, with its value as Show
// renders it: a map variable key by key (attrs.zone, tokens.gpus,
// disks.scratch, apps.ticker; keys sorted), or, when it has none, by its
// name with the value "none".
func (v *Values) Listing() []*wire.Attr {
	var out []*wire.Attr
	for _, x := range vars {
		if x.Request {
			continue
		}
		if !x.Map {
			out = append(out, &wire.Attr{Key: x.Name, Value: v.Show(x.Name)})
			continue
		}
		var keys []string
		switch x.Name {
		case "attrs":
			keys = sortedKeys(v.Attrs)
		case "tokens":
			keys = sortedKeys(v.Tokens)
		case "disks":
			keys = sortedKeys(v.Disks)
		case "apps":
			keys = sortedKeys(v.Apps)
		}
		if len(keys) == 0 {
			out = append(out, &wire.Attr{Key: x.Name, Value: "none"})
		}
		for _, k := range keys {
			ref := keyRef(x.Name, k)
			out = append(out, &wire.Attr{Key: ref, Value: v.Show(ref)})
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
