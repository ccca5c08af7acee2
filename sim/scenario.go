package sim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/internal/tomlpos"
)

// Limits of a scenario. They keep a typing slip (one zero too many) from
// asking for more than a machine can hold, and hostile files from costing
// much. MaxManagers is the size measured (a million managers: about 10 GiB
// of live heap, EstimateMemory); `gridmgr sim` also refuses what the
// machine's available memory cannot hold.
const (
	MaxManagers = 1_000_000
	MaxActions  = 1000
	maxFileSize = 1 << 20
	maxRate     = 1e6 // requests per second of one stream
)

// Scenario is one simulation: the grid, its hosts, its network and a
// timeline of actions. Parse reads it from TOML (sim/scenarios/README.md
// documents every key); Quick builds the common one from a few numbers.
type Scenario struct {
	Name    string   `toml:"name"`
	Seed    uint64   `toml:"seed"`
	Grid    Grid     `toml:"grid"`
	Hosts   Hosts    `toml:"hosts"`
	Network Network  `toml:"network"`
	Actions []Action `toml:"action"`
}

// Grid is the shape of the hierarchy.
type Grid struct {
	Managers int `toml:"managers"`
	// Shape is "balanced" (every manager has Fanout inferiors, filled
	// level by level) or "random" (each manager under a random earlier
	// one: a random recursive tree, depth about ln N).
	Shape  string `toml:"shape"`
	Fanout int    `toml:"fanout"`
	// SecondSuperior is the fraction of managers (below the first two
	// levels) that also name a second superior: a random manager of their
	// superior's level.
	SecondSuperior float64 `toml:"second_superior"`
	// Config sets properties-file keys on every manager, by the names
	// `gridmgr admin set` takes (heartbeat.interval, ...).
	Config map[string]string `toml:"config"`
}

// Hosts says what each manager's host has: each value is drawn uniformly
// from its list, per host.
type Hosts struct {
	CPUs  []int64             `toml:"cpus"`
	Mem   []string            `toml:"mem"`
	Attrs map[string][]string `toml:"attrs"`
}

// Network is the latency model. Managers are spread over Regions by
// subtree (the root's inferiors are dealt out to the regions in turn,
// and everything under one goes where it goes); within a region, racks
// of RackSize managers are filled in breadth-first order.
type Network struct {
	Regions    []string `toml:"regions"`
	RackSize   int      `toml:"rack_size"`
	SameRack   Duration `toml:"same_rack"`
	SameRegion Duration `toml:"same_region"`
	// CrossRegion is the one-way delay between regions not named in
	// Between.
	CrossRegion Duration `toml:"cross_region"`
	// Between gives one-way delays per pair of regions: "eu-us" = "80ms".
	Between map[string]Duration `toml:"between"`
	// Jitter varies each message's delay uniformly by ± this fraction.
	Jitter float64 `toml:"jitter"`
	// Loss is the fraction of mesh messages whose packet is lost. The
	// mesh runs over TCP, so a loss delays the message (and those behind
	// it on its stream) by a retransmission timeout: 200ms plus two
	// round trips of the link.
	Loss float64 `toml:"loss"`
	// Client is the one-way delay between a client and its manager.
	Client Duration `toml:"client"`
}

// Action is one step of the timeline. Do names it; the other keys are
// its parameters (which ones each takes: sim/scenarios/README.md).
type Action struct {
	Do    string   `toml:"do"`
	At    Duration `toml:"at"`
	Label string   `toml:"label"`

	// Queries and reservations.
	From        string   `toml:"from"`
	Requirement string   `toml:"requirement"`
	Rank        string   `toml:"rank"`
	Want        int      `toml:"want"`
	Up          int      `toml:"up"`
	Down        int      `toml:"down"`
	Limit       int      `toml:"limit"`
	Budget      Duration `toml:"budget"`
	Count       int      `toml:"count"`
	Rate        float64  `toml:"rate"`
	For         Duration `toml:"for"`
	CPUs        int64    `toml:"cpus"`
	Mem         string   `toml:"mem"`
	Managers    int      `toml:"managers"` // co-reservation: how many at once
	Lease       Duration `toml:"lease"`

	// Failures.
	Percent float64  `toml:"percent"`
	Name    string   `toml:"name"`
	Subtree string   `toml:"subtree"`
	Region  string   `toml:"region"`
	Within  Duration `toml:"within"`
	DownFor Duration `toml:"down_for"`

	// Admin and rewiring.
	Command  string `toml:"command"`
	All      bool   `toml:"all"`
	Superior string `toml:"superior"`

	line int
	set  []string // keys the file gives
	mem  int64
}

// Duration is a time.Duration written as "150ms" in TOML (0 to 24h).
type Duration = tomlpos.Duration

// Actions and what each does.
var actionDocs = []struct{ name, doc string }{
	{"settle", "wait until every manager is under its configured superiors (the build); figure: build time"},
	{"query", "send queries (count at once, or rate per second for a while); figures: latency, visited, offers, messages"},
	{"reserve", "find and reserve cpus/mem (managers > 1: all or nothing on that many); figures: success, conflicts, latency"},
	{"kill", "kill managers (name, subtree, region or percent) and wait until the tree has healed; figure: reconvergence"},
	{"restart", "restart killed managers (name, or all) and wait until the tree is settled"},
	{"partition", "cut a region off from the rest and wait until each side has healed"},
	{"heal", "end every partition and wait until the grid is one tree again"},
	{"churn", "kill percent of the managers per minute, each back after down_for, for a while"},
	{"admin", "run an admin command string on one manager (from), or on all with all = true; figures: reach time, missing"},
	{"rewire", "make manager name take superior as a superior (admin add-superior) and wait until settled"},
	{"rest", "do nothing for a while and measure what the grid costs at rest (heartbeats)"},
	{"wait", "let virtual time pass"},
}

// ActionNames lists what Action.Do may be.
func ActionNames() []string {
	var out []string
	for _, a := range actionDocs {
		out = append(out, a.name)
	}
	return out
}

// Error is a problem with a scenario file, at a line (0: the whole file).
type Error = tomlpos.Error

// Errors are all the problems found in one file, by line.
type Errors = tomlpos.Errors

// Parse reads a scenario file. It is strict: unknown keys, keys an action
// does not take, and values out of range are errors, all reported at once
// as FILE:LINE: KEY: what is wrong.
func Parse(file string, data []byte) (*Scenario, error) {
	var sc Scenario
	md, doc, errs := tomlpos.Decode(file, data, maxFileSize, &sc)
	if errs != nil {
		return nil, errs
	}
	p := &parser{file: file, doc: doc}
	for i, line := range p.doc.Array("action") {
		if i < len(sc.Actions) {
			sc.Actions[i].line = line
		}
	}
	// The keys each action gives, from the metadata: keys come in file
	// order, and each [[action]] header starts the next element.
	idx := -1
	for _, k := range md.Keys() {
		if len(k) == 1 && k[0] == "action" {
			idx++
		} else if len(k) == 2 && k[0] == "action" && idx >= 0 && idx < len(sc.Actions) {
			switch k[1] {
			case "do", "at", "label":
			default:
				sc.Actions[idx].set = append(sc.Actions[idx].set, k[1])
			}
		}
	}
	for _, k := range md.Undecoded() {
		key := k.String()
		if k[0] == "grid" && len(k) > 1 && k[1] == "config" || k[0] == "hosts" && len(k) > 1 && k[1] == "attrs" ||
			k[0] == "network" && len(k) > 1 && k[1] == "between" {
			continue // maps: their keys are checked below
		}
		p.add(p.doc.Of(k), key, "unknown key%s", text.DidYouMean(k[len(k)-1], knownKeys(k)))
	}
	if len(p.errs) == 0 {
		p.check(&sc)
	}
	if len(p.errs) > 0 {
		sort.SliceStable(p.errs, func(i, j int) bool { return p.errs[i].Line < p.errs[j].Line })
		return nil, p.errs
	}
	return &sc, nil
}

type parser struct {
	file string
	doc  *tomlpos.Doc
	errs Errors
}

func (p *parser) add(line int, key, format string, args ...any) {
	if len(p.errs) < 100 {
		p.errs = append(p.errs, &Error{File: p.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
	}
}

// knownKeys are the keys allowed where k was found.
func knownKeys(k toml.Key) []string {
	switch {
	case len(k) == 1:
		return []string{"name", "seed", "grid", "hosts", "network", "action"}
	case k[0] == "grid":
		return []string{"managers", "shape", "fanout", "second_superior", "config"}
	case k[0] == "hosts":
		return []string{"cpus", "mem", "attrs"}
	case k[0] == "network":
		return []string{"regions", "rack_size", "same_rack", "same_region", "cross_region", "between", "jitter", "loss", "client"}
	case k[0] == "action":
		return actionKeys
	}
	return nil
}

var actionKeys = []string{"do", "at", "label", "from", "requirement", "rank", "want", "up", "down", "limit", "budget",
	"count", "rate", "for", "cpus", "mem", "managers", "lease", "percent", "name", "subtree", "region", "within",
	"down_for", "command", "all", "superior"}

// takes says which keys (beyond do, at, label) each action takes.
var takes = map[string][]string{
	"settle":    {"within"},
	"query":     {"from", "requirement", "rank", "want", "up", "down", "limit", "budget", "count", "rate", "for"},
	"reserve":   {"from", "requirement", "cpus", "mem", "managers", "lease", "budget", "count", "rate", "for"},
	"kill":      {"name", "subtree", "region", "percent", "within"},
	"restart":   {"name", "within"},
	"partition": {"region", "within"},
	"heal":      {"within"},
	"churn":     {"percent", "for", "down_for"},
	"admin":     {"from", "command", "all", "budget"},
	"rewire":    {"name", "superior", "within"},
	"rest":      {"for"},
	"wait":      {"for"},
}

// Defaults fills what the file left out.
func (sc *Scenario) Defaults() {
	g := &sc.Grid
	if g.Shape == "" {
		g.Shape = "balanced"
	}
	if g.Fanout == 0 {
		g.Fanout = 16
	}
	h := &sc.Hosts
	if len(h.CPUs) == 0 {
		h.CPUs = []int64{4}
	}
	if len(h.Mem) == 0 {
		h.Mem = []string{"16GiB"}
	}
	n := &sc.Network
	if n.RackSize == 0 {
		n.RackSize = 40
	}
	if n.SameRack == 0 {
		n.SameRack = Duration(200 * time.Microsecond)
	}
	if n.SameRegion == 0 {
		n.SameRegion = Duration(2 * time.Millisecond)
	}
	if n.CrossRegion == 0 {
		n.CrossRegion = Duration(100 * time.Millisecond)
	}
	if n.Client == 0 {
		n.Client = Duration(200 * time.Microsecond)
	}
	for i := range sc.Actions {
		a := &sc.Actions[i]
		if a.Count == 0 && a.Rate == 0 {
			a.Count = 1
		}
		// As the CLI: search every level down and up unless told.
		if a.Up == 0 && !slices.Contains(a.set, "up") {
			a.Up = 255
		}
		if a.Down == 0 && !slices.Contains(a.set, "down") {
			a.Down = 255
		}
		if a.Within == 0 {
			a.Within = Duration(5 * time.Minute)
		}
		if a.Budget == 0 {
			a.Budget = Duration(30 * time.Second)
		}
		if a.From == "" {
			a.From = "random"
		}
		// As documented: every manager (a manager refuses a query
		// without a requirement).
		if a.Do == "query" && a.Requirement == "" {
			a.Requirement = "true"
		}
		if a.mem == 0 && a.Mem != "" {
			if v, err := text.ParseSize(a.Mem); err == nil {
				a.mem = int64(v)
			}
		}
		if a.Do == "reserve" && a.CPUs == 0 && a.Mem == "" {
			a.CPUs = 1
		}
		if a.Managers == 0 {
			a.Managers = 1
		}
		if a.DownFor == 0 {
			a.DownFor = Duration(10 * time.Second)
		}
	}
}

// check validates a decoded scenario and fills its defaults.
func (p *parser) check(sc *Scenario) {
	g := &sc.Grid
	gl := p.doc.Table("grid")
	if g.Managers < 1 || g.Managers > MaxManagers {
		p.add(p.doc.Key(gl, "managers"), "grid.managers", "must be between 1 and %d, got %d", MaxManagers, g.Managers)
	}
	if g.Shape != "" && g.Shape != "balanced" && g.Shape != "random" {
		p.add(p.doc.Key(gl, "shape"), "grid.shape", "must be \"balanced\" or \"random\", got %s", text.QuoteShort(g.Shape))
	}
	if g.Fanout < 0 || g.Fanout > 10000 {
		p.add(p.doc.Key(gl, "fanout"), "grid.fanout", "must be between 1 and 10000, got %d", g.Fanout)
	}
	if !(g.SecondSuperior >= 0 && g.SecondSuperior <= 1) {
		p.add(p.doc.Key(gl, "second_superior"), "grid.second_superior", "must be a fraction between 0 and 1, got %v", g.SecondSuperior)
	}
	if len(g.Config) > 0 {
		cfg := config.Default()
		cfg.Name = "check"
		for _, k := range slices.Sorted(maps.Keys(g.Config)) {
			if _, _, _, err := config.Set(cfg, k, g.Config[k]); err != nil {
				p.add(p.doc.Key(p.doc.Table("grid.config"), k), "grid.config."+k, "%s", text.Human(err))
			}
		}
	}
	hl := p.doc.Table("hosts")
	for _, c := range sc.Hosts.CPUs {
		if c < 1 || c > 1<<20 {
			p.add(p.doc.Key(hl, "cpus"), "hosts.cpus", "each must be between 1 and %d, got %d", 1<<20, c)
			break
		}
	}
	for _, m := range sc.Hosts.Mem {
		if v, err := text.ParseSize(m); err != nil || v == 0 || v > 1<<50 {
			p.add(p.doc.Key(hl, "mem"), "hosts.mem", "%s is not a size between 1B and 1PiB (write e.g. \"16GiB\")", text.QuoteShort(m))
			break
		}
	}
	for k, vs := range sc.Hosts.Attrs {
		if len(vs) == 0 {
			p.add(p.doc.Key(p.doc.Table("hosts.attrs"), k), "hosts.attrs."+k, "needs at least one value")
		}
	}
	nw := &sc.Network
	nl := p.doc.Table("network")
	if nw.RackSize < 0 {
		p.add(p.doc.Key(nl, "rack_size"), "network.rack_size", "must be at least 1, got %d", nw.RackSize)
	}
	if !(nw.Jitter >= 0 && nw.Jitter < 1) {
		p.add(p.doc.Key(nl, "jitter"), "network.jitter", "must be a fraction in [0, 1), got %v", nw.Jitter)
	}
	if !(nw.Loss >= 0 && nw.Loss < 1) {
		p.add(p.doc.Key(nl, "loss"), "network.loss", "must be a fraction in [0, 1), got %v", nw.Loss)
	}
	seen := map[string]bool{}
	for _, r := range nw.Regions {
		if r == "" || strings.ContainsAny(r, "- \t") || seen[r] {
			p.add(p.doc.Key(nl, "regions"), "network.regions", "%s: names must be distinct, non-empty, without '-' or spaces", text.QuoteShort(r))
		}
		seen[r] = true
	}
	for pair := range nw.Between {
		a, b, ok := strings.Cut(pair, "-")
		if !ok || !seen[a] || !seen[b] || a == b {
			p.add(p.doc.Key(p.doc.Table("network.between"), pair), "network.between."+pair,
				"must name two different regions of network.regions as \"A-B\"")
		}
	}
	if len(sc.Actions) > MaxActions {
		p.add(0, "action", "at most %d actions, got %d", MaxActions, len(sc.Actions))
		return
	}
	sc.Defaults()
	for i := range sc.Actions {
		p.checkAction(sc, i)
	}
}

func (p *parser) checkAction(sc *Scenario, i int) {
	a := &sc.Actions[i]
	line := a.line
	key := func(k string) string { return fmt.Sprintf("action[%d].%s", i+1, k) }
	at := func(k string) int { return p.doc.Key(line, k) }
	allowed, ok := takes[a.Do]
	if !ok {
		if a.Do == "" {
			p.add(line, key("do"), "missing: say what the action does (%s)", strings.Join(ActionNames(), ", "))
		} else {
			p.add(at("do"), key("do"), "unknown action %s%s; actions: %s", text.QuoteShort(a.Do),
				text.DidYouMean(a.Do, ActionNames()), strings.Join(ActionNames(), ", "))
		}
		return
	}
	// Keys the action does not take are errors, not silently ignored.
	set := a.set
	for _, k := range set {
		if !slices.Contains(allowed, k) {
			p.add(at(k), key(k), "%s does not take %s (it takes: %s)", a.Do, k, strings.Join(allowed, ", "))
		}
	}
	has := func(k string) bool { return slices.Contains(set, k) }
	if a.Rate < 0 || a.Rate > maxRate || math.IsNaN(a.Rate) {
		p.add(at("rate"), key("rate"), "must be between 0 and %g per second, got %v", maxRate, a.Rate)
	}
	if has("rate") != has("for") && (a.Do == "query" || a.Do == "reserve") {
		p.add(line, key("rate"), "rate and for go together: a stream of rate per second for a while")
	}
	if has("rate") && has("count") {
		p.add(at("count"), key("count"), "give count (requests at once) or rate and for, not both")
	}
	if a.Count < 0 || a.Count > 1_000_000 {
		p.add(at("count"), key("count"), "must be between 1 and 1000000, got %d", a.Count)
	}
	for _, v := range []struct {
		k string
		n int
	}{{"want", a.Want}, {"up", a.Up}, {"down", a.Down}, {"limit", a.Limit}, {"managers", a.Managers}} {
		if v.n < 0 || v.n > 1_000_000 {
			p.add(at(v.k), key(v.k), "must be between 0 and 1000000, got %d", v.n)
		}
	}
	if a.Managers > 1000 {
		p.add(at("managers"), key("managers"), "a co-reservation takes at most 1000 managers, got %d", a.Managers)
	}
	if a.CPUs < 0 {
		p.add(at("cpus"), key("cpus"), "must not be negative")
	}
	if a.Mem != "" {
		v, err := text.ParseSize(a.Mem)
		if err != nil || v > 1<<50 {
			p.add(at("mem"), key("mem"), "%s is not a size (write e.g. \"1GiB\")", text.QuoteShort(a.Mem))
		}
		a.mem = int64(v)
	}
	if !(a.Percent >= 0 && a.Percent <= 100) {
		p.add(at("percent"), key("percent"), "must be between 0 and 100, got %v", a.Percent)
	}
	switch a.Do {
	case "kill":
		n := 0
		for _, k := range []string{"name", "subtree", "region", "percent"} {
			if has(k) {
				n++
			}
		}
		if n != 1 {
			p.add(line, key("do"), "kill takes exactly one of name, subtree, region, percent")
		}
	case "partition":
		if a.Region == "" {
			p.add(line, key("region"), "partition needs the region to cut off")
		}
	case "churn":
		if a.For == 0 || a.Percent == 0 {
			p.add(line, key("do"), "churn needs percent (per minute) and for")
		}
	case "admin":
		if a.Command == "" {
			p.add(line, key("command"), "admin needs the command string to run")
		}
	case "rewire":
		if a.Name == "" || a.Superior == "" {
			p.add(line, key("do"), "rewire needs name (the manager) and superior (its new superior)")
		}
	case "rest", "wait":
		if a.For == 0 {
			p.add(line, key("for"), "%s needs for: how long", a.Do)
		}
	}
	if a.Region != "" && !slices.Contains(sc.Network.Regions, a.Region) {
		p.add(at("region"), key("region"), "no region %s in network.regions%s", text.QuoteShort(a.Region), text.DidYouMean(a.Region, sc.Network.Regions))
	}
	for _, k := range []struct{ key, v string }{{"name", a.Name}, {"subtree", a.Subtree}, {"superior", a.Superior}} {
		if k.v != "" && nameIndex(k.v, sc.Grid.Managers) < 0 {
			p.add(at(k.key), key(k.key), "%s is not a manager: managers are named m0 to m%d", text.QuoteShort(k.v), sc.Grid.Managers-1)
		}
	}
	switch a.From {
	case "random", "leaf", "root":
	default:
		if nameIndex(a.From, sc.Grid.Managers) < 0 {
			p.add(at("from"), key("from"), "%s: write random, leaf, root or a manager's name (m0 to m%d)", text.QuoteShort(a.From), sc.Grid.Managers-1)
		}
	}
}

// nameIndex is the index of the manager named name ("m17" → 17), or -1.
func nameIndex(name string, n int) int {
	if !strings.HasPrefix(name, "m") || len(name) < 2 || (len(name) > 2 && name[1] == '0') {
		return -1
	}
	i, err := strconv.Atoi(name[1:])
	if err != nil || i < 0 || i >= n {
		return -1
	}
	return i
}
