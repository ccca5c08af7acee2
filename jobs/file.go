package jobs

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/internal/lazyre"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/internal/tomlpos"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// Defaults and limits of a job file (docs/jobs.md lists them for users).
const (
	MaxFileSize = 256 << 10 // bytes of job.toml

	DefaultCount = 1
	MaxCount     = 100_000 // indexes of one array

	DefaultCPUs = 1
	MaxCPUs     = 65536

	DefaultMemory = 256 << 20
	MinSize       = 1 << 20 // memory and disk
	MaxSize       = 1 << 50

	MaxTokenAmount = 1 << 40 // as a properties file's [tokens]

	DefaultRuntime = time.Hour
	MinRuntime     = time.Second
	MaxRuntime     = 7 * 24 * time.Hour

	DefaultLostAfter = 5 * time.Minute
	MinLostAfter     = 10 * time.Second
	MaxLostAfter     = 24 * time.Hour

	MaxRetries  = 100
	MinPriority = -1000
	MaxPriority = 1000

	// MaxAhead bounds a relative begin or deadline ("+400d" is a mistake).
	MaxAhead = 366 * 24 * time.Hour

	maxArgs  = deploy.MaxStartArgs // words of args (what a start may add)
	maxList  = 1000                // env entries, inputs, outputs, exit codes
	maxPath  = 1024
	maxValue = 64 << 10 // bytes of one word or env value
)

// The variables args, env, inputs and outputs may use; output_dir may use
// ${NAME} only.
const (
	VarIndex = "${INDEX}"
	VarName  = "${NAME}"
)

// What happens to an index once its retries are spent (OnFailure).
const (
	OnFailureFail = "fail"
	OnFailureHold = "hold"
)

// Description is a checked job file, its defaults filled in. Paths are
// slash-separated and clean; Program, Inputs and OutputDir are relative
// to the job file's directory, Outputs to the program's out/ directory.
// Args, Env, Inputs and Outputs may still hold ${INDEX} and ${NAME}
// (Expand replaces them); OutputDir has its ${NAME} replaced.
type Description struct {
	Name string // [a-z][a-z0-9-]{0,62}; default the file's base name without .toml

	// Program is a single executable, a directory (then Executable names
	// the file in it to run), or an application bundle (ends in .gapp).
	// Which of the first two it is, the caller finds on disk.
	Program    string
	Executable string
	Args       []string
	Env        map[string]string

	Count int // indexes 0…Count-1

	// What one index reserves, and for how long: the reservation's lease
	// covers Runtime.
	CPUs    int64
	Memory  int64            // bytes
	Disk    int64            // bytes; 0: none asked
	Tokens  map[string]int64 // counted tokens by kind
	Runtime time.Duration

	// Requirement and Rank are CEL as `gridmgr query` takes them ("": none,
	// all equal); Need().And(Requirement) is the query's requirement.
	Requirement string
	Rank        string

	Inputs    []string
	Outputs   []string
	OutputDir string

	MaxRetries       int
	SuccessExitCodes []int // sorted
	OnFailure        string

	// Begin: not started before (zero: at once). Deadline: not started
	// after (zero: none). Written relative ("+2h"), they count from the
	// submission: BeginIn/DeadlineIn hold them until Resolve (ParseAt
	// resolves them at once), and Begin/Deadline are zero meanwhile.
	Begin, Deadline     time.Time
	BeginIn, DeadlineIn time.Duration

	Priority  int    // among the user's own jobs, higher first
	Network   string // "host" or "none"
	LostAfter time.Duration
}

// Proc is one index of a job, its variables replaced.
type Proc struct {
	Index   int
	Args    []string
	Env     map[string]string
	Inputs  []string
	Outputs []string
	// ResultDir is where the index's results land, relative to the job
	// file's directory: OutputDir for a single job, OutputDir/INDEX for an
	// array.
	ResultDir string
}

// Expand is index's Proc (0 <= index < Count): ${INDEX} becomes the
// decimal index and ${NAME} the job's name.
func (d *Description) Expand(index int) Proc {
	r := strings.NewReplacer(VarIndex, strconv.Itoa(index), VarName, d.Name)
	p := Proc{Index: index, ResultDir: d.OutputDir}
	if d.Count > 1 {
		p.ResultDir = path.Join(d.OutputDir, strconv.Itoa(index))
	}
	p.Args = expandAll(r, d.Args)
	p.Inputs = expandAll(r, d.Inputs)
	p.Outputs = expandAll(r, d.Outputs)
	if d.Env != nil {
		p.Env = make(map[string]string, len(d.Env))
		for k, v := range d.Env {
			p.Env[k] = r.Replace(v)
		}
	}
	return p
}

func expandAll(r *strings.Replacer, ws []string) []string {
	if ws == nil {
		return nil
	}
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = r.Replace(w)
	}
	return out
}

// DiskToken is the token kind disk is reserved as, in MiB: node.DiskToken
// (which this package, below node, cannot import).
const DiskToken = "disk"

// Need is what one index reserves, as query.Need: its cpus, memory and
// tokens sorted by kind, disk among them as DiskToken (MiB, rounded up).
func (d *Description) Need() query.Need {
	n := query.Need{CPUs: d.CPUs, Mem: d.Memory}
	tokens := maps.Clone(d.Tokens)
	if d.Disk > 0 {
		if tokens == nil {
			tokens = map[string]int64{}
		}
		tokens[DiskToken] = (d.Disk + 1<<20 - 1) >> 20
	}
	for _, k := range slices.Sorted(maps.Keys(tokens)) {
		n.Tokens = append(n.Tokens, &wire.Amount{Kind: k, N: tokens[k]})
	}
	return n
}

// Resolve makes a relative begin and deadline absolute, counted from
// submitted (the time the job was submitted).
func (d *Description) Resolve(submitted time.Time) {
	if d.BeginIn > 0 {
		d.Begin, d.BeginIn = submitted.Add(d.BeginIn), 0
	}
	if d.DeadlineIn > 0 {
		d.Deadline, d.DeadlineIn = submitted.Add(d.DeadlineIn), 0
	}
}

// fileKeys is job.toml as decoded, before the checks.
type fileKeys struct {
	Name             string            `toml:"name"`
	Program          string            `toml:"program"`
	Executable       string            `toml:"executable"`
	Args             []string          `toml:"args"`
	Env              map[string]string `toml:"env"`
	Count            int64             `toml:"count"`
	CPUs             int64             `toml:"cpus"`
	Memory           string            `toml:"memory"`
	Disk             string            `toml:"disk"`
	Tokens           map[string]int64  `toml:"tokens"`
	Runtime          string            `toml:"runtime"`
	Requirement      string            `toml:"requirement"`
	Rank             string            `toml:"rank"`
	Inputs           []string          `toml:"inputs"`
	Outputs          []string          `toml:"outputs"`
	OutputDir        string            `toml:"output_dir"`
	MaxRetries       int64             `toml:"max_retries"`
	SuccessExitCodes []int64           `toml:"success_exit_codes"`
	OnFailure        string            `toml:"on_failure"`
	Begin            any               `toml:"begin"`
	Deadline         any               `toml:"deadline"`
	Priority         int64             `toml:"priority"`
	Network          string            `toml:"network"`
	LostAfter        string            `toml:"lost_after"`
}

// Parse reads and checks a job file; file names it in errors (and gives
// the job's default name), data is its content. It is strict: unknown
// keys, wrong types, values out of range, bad names, paths and variables,
// and requirements or ranks that do not compile are errors, all reported
// at once as FILE:LINE: KEY: what is wrong (tomlpos.Errors), in the order
// of their lines. Only a TOML syntax error stops it early, and says so.
// A relative begin or deadline is left in BeginIn/DeadlineIn (see
// Resolve, ParseAt).
func Parse(file string, data []byte) (*Description, error) {
	return parse(file, data, time.Time{})
}

// ParseAt is Parse for a job submitted at now: a relative begin or
// deadline counts from now, and a deadline already past, or not after
// the begin, is an error.
func ParseAt(file string, data []byte, now time.Time) (*Description, error) {
	if now.IsZero() {
		return nil, tomlpos.Errors{{File: file, Msg: "jobs.ParseAt needs the submission time"}}
	}
	return parse(file, data, now)
}

func parse(file string, data []byte, now time.Time) (*Description, error) {
	var f fileKeys
	c, err := newChecker(file, data, MaxFileSize, &f, now)
	if err != nil {
		return nil, err
	}
	d := c.check(&f)
	if err := c.result(); err != nil {
		return nil, err
	}
	if !now.IsZero() {
		d.Resolve(now)
	}
	return d, nil
}

// newChecker decodes data (at most limit bytes) into v, every value of the
// wrong type and unknown key noted, and returns the checker that goes on
// from there; a file that cannot be read at all is the error.
func newChecker(file string, data []byte, limit int, v any, now time.Time) (*checker, error) {
	doc, errs, failed := tomlpos.DecodeAll(file, data, limit, v)
	if doc == nil {
		return nil, errs
	}
	// Which keys are written at all (a 0 written is not a 0 left out).
	// The file decoded once already, so this cannot fail.
	var top map[string]any
	if _, err := toml.Decode(strings.TrimPrefix(string(data), "\ufeff"), &top); err != nil {
		return nil, tomlpos.Errors{{File: file, Msg: "invalid TOML: " + err.Error()}}
	}
	return &checker{file: file, doc: doc, errs: errs, failed: failed, given: top, now: now}, nil
}

// result is every problem found, in the order of their lines (at most
// tomlpos.MaxErrors), or nil.
func (c *checker) result() error {
	if len(c.errs) == 0 {
		return nil
	}
	sort.SliceStable(c.errs, func(i, j int) bool { return c.errs[i].Line < c.errs[j].Line })
	if len(c.errs) > tomlpos.MaxErrors {
		c.errs = c.errs[:tomlpos.MaxErrors]
	}
	return c.errs
}

type checker struct {
	file   string
	doc    *tomlpos.Doc
	errs   tomlpos.Errors
	failed map[string]bool // keys decoding reported already
	given  map[string]any
	now    time.Time
	// table, for a job written inline in another file (a workflow's
	// node), is the dotted name of the table its keys are in ("" a job
	// file), start that table's line and defName the job's default name.
	table   string
	start   int
	defName string
}

// full is key as the file writes it: inside table, if any.
func (c *checker) full(key string) string {
	if c.table == "" || key == "" {
		return c.table + key
	}
	return c.table + "." + key
}

func (c *checker) add(line int, key, format string, args ...any) {
	if c.reported(key) || len(c.errs) >= tomlpos.MaxErrors {
		return
	}
	if line == 0 {
		line = c.start
	}
	c.errs = append(c.errs, &tomlpos.Error{File: c.file, Line: line, Key: c.full(key), Msg: fmt.Sprintf(format, args...)})
}

// reported says whether decoding reported key, or the table it is in.
func (c *checker) reported(key string) bool {
	if c.failed[c.full(key)] {
		return true
	}
	t, _, ok := strings.Cut(key, ".")
	return ok && c.failed[c.full(t)]
}

// line is the line of a key of the job's table.
func (c *checker) line(key string) int { return c.doc.Key(c.start, key) }

// lineIn is the line of key in the job's table name, written as [name]
// or as name = { … }.
func (c *checker) lineIn(name, key string) int {
	if start := c.doc.Table(c.full(name)); start > 0 {
		return c.doc.Key(start, key)
	}
	return c.line(name)
}

func (c *checker) has(key string) bool { _, ok := c.given[key]; return ok }

var (
	nameRE  = lazyre.New(`^[a-z][a-z0-9-]{0,62}$`)
	envRE   = lazyre.New(`^[A-Z_][A-Z0-9_]{0,127}$`)
	tokenRE = lazyre.New(`^[A-Za-z0-9._-]{1,64}$`)
)

func (c *checker) check(f *fileKeys) *Description {
	d := &Description{}

	// name
	d.Name = f.Name
	if !c.has("name") && c.defName != "" {
		d.Name = c.defName
	} else if !c.has("name") {
		d.Name = strings.TrimSuffix(path.Base(filepath.ToSlash(c.file)), ".toml")
		if !nameRE.MatchString(d.Name) {
			c.add(0, "name", "missing, and the file's name %s is not a job name: set name (lower-case letters, digits and '-', starting with a letter, at most 63)", describe(d.Name))
		}
	} else if !nameRE.MatchString(d.Name) {
		c.add(c.line("name"), "name", "%s: write lower-case letters, digits and '-', starting with a letter, at most 63", describe(d.Name))
	}

	// program, executable
	d.Program, d.Executable = f.Program, f.Executable
	if !c.has("program") {
		c.add(0, "program", "missing: the program to run, a path relative to the job file's directory (a file, a directory with executable, or an app bundle *.gapp)")
	} else if msg := checkPath(f.Program, false); msg != "" {
		c.add(c.line("program"), "program", "%s: %s", describe(f.Program), msg)
	}
	if c.has("executable") {
		switch {
		case strings.HasSuffix(f.Program, ".gapp"):
			c.add(c.line("executable"), "executable", "an app bundle runs its own run.command: drop executable, or make program a directory")
		default:
			if msg := checkPath(f.Executable, false); msg != "" {
				c.add(c.line("executable"), "executable", "%s: %s (a path inside the program's directory)", describe(f.Executable), msg)
			}
		}
	}

	// args, env
	d.Args = f.Args
	if len(f.Args) > maxArgs {
		c.add(c.line("args"), "args", "at most %d words, got %d", maxArgs, len(f.Args))
	} else {
		for i, w := range f.Args {
			c.word(c.line("args"), fmt.Sprintf("args[%d]", i+1), w)
		}
	}
	d.Env = f.Env
	if len(f.Env) > deploy.MaxStartEnv {
		c.add(c.line("env"), "env", "at most %d variables, got %d", deploy.MaxStartEnv, len(f.Env))
	} else {
		for _, k := range slices.Sorted(maps.Keys(f.Env)) {
			line, key := c.lineIn("env", k), "env."+k
			if !envRE.MatchString(k) || deploy.ReservedEnv(k) {
				c.add(line, key, "not a variable name a job may set: upper-case letters, digits and '_', not starting with a digit; PATH, HOME, TMPDIR, INSTANCE_DIR, INSTANCE, APP, CLASS_DIR and names starting GRIDMGR_, PORT_ or LD_ are the manager's")
			}
			c.word(line, key, f.Env[k])
		}
	}

	if n := wordsSize(f.Args, f.Env); n > deploy.MaxStartBytes {
		c.add(c.line("args"), "args", "the args and env are %d bytes together; at most %d", n, deploy.MaxStartBytes)
	}

	// count, cpus
	d.Count = DefaultCount
	if c.has("count") {
		if f.Count < 1 || f.Count > MaxCount {
			c.add(c.line("count"), "count", "must be between 1 and %d, got %d", MaxCount, f.Count)
		} else {
			d.Count = int(f.Count)
		}
	}
	d.CPUs = DefaultCPUs
	if c.has("cpus") {
		if f.CPUs < 1 || f.CPUs > MaxCPUs {
			c.add(c.line("cpus"), "cpus", "must be between 1 and %d, got %d", MaxCPUs, f.CPUs)
		} else {
			d.CPUs = f.CPUs
		}
	}

	// memory, disk, tokens, runtime
	d.Memory = DefaultMemory
	if c.has("memory") {
		d.Memory = c.size("memory", f.Memory)
	}
	if c.has("disk") {
		d.Disk = c.size("disk", f.Disk)
	}
	if len(f.Tokens) > 0 {
		d.Tokens = map[string]int64{}
	}
	if len(f.Tokens) > reservation.MaxKinds-2 {
		c.add(c.line("tokens"), "tokens", "at most %d kinds of token, got %d", reservation.MaxKinds-2, len(f.Tokens))
	} else {
		for _, k := range slices.Sorted(maps.Keys(f.Tokens)) {
			line, key := c.lineIn("tokens", k), "tokens."+k
			n := f.Tokens[k]
			switch {
			case !tokenRE.MatchString(k) || k == reservation.CPUs || k == reservation.Mem || k == DiskToken:
				c.add(line, key, "not a token kind: 1 to 64 of A-Z a-z 0-9 . _ - (cpus, memory and disk have keys of their own)")
			case n < 1 || n > MaxTokenAmount:
				c.add(line, key, "must be between 1 and %d, got %d", int64(MaxTokenAmount), n)
			default:
				d.Tokens[k] = n
			}
		}
	}
	d.Runtime = c.duration("runtime", f.Runtime, DefaultRuntime, MinRuntime, MaxRuntime)

	// requirement, rank
	d.Requirement, d.Rank = f.Requirement, f.Rank
	c.expr("requirement", query.Requirement, f.Requirement)
	c.expr("rank", query.Rank, f.Rank)

	// inputs, outputs, output_dir
	d.Inputs = c.paths("inputs", f.Inputs, false)
	d.Outputs = c.paths("outputs", f.Outputs, true)
	c.distinctOutputs(d.Name, d.Count, d.Outputs)
	d.OutputDir = "results-" + VarName
	if c.has("output_dir") {
		d.OutputDir = f.OutputDir
	}
	if msg := checkPath(strings.ReplaceAll(d.OutputDir, VarName, "x"), false); msg != "" {
		c.add(c.line("output_dir"), "output_dir", "%s: %s", describe(d.OutputDir), msg)
	} else if v := firstVar(d.OutputDir, VarName); v != "" {
		c.add(c.line("output_dir"), "output_dir", "%s is not known here: output_dir may use ${NAME} only (results of an array land in output_dir/INDEX)", text.QuoteShort(v))
	} else {
		d.OutputDir = strings.ReplaceAll(d.OutputDir, VarName, d.Name)
		for _, p := range append([]string{d.Program}, d.Inputs...) {
			if p != "" && (within(p, d.OutputDir) || within(d.OutputDir, p)) {
				c.add(c.line("output_dir"), "output_dir", "%s overlaps %s: results must not land on the job's own files", describe(d.OutputDir), describe(p))
				break
			}
		}
	}

	// max_retries, success_exit_codes, on_failure
	if f.MaxRetries < 0 || f.MaxRetries > MaxRetries {
		c.add(c.line("max_retries"), "max_retries", "must be between 0 and %d, got %d", MaxRetries, f.MaxRetries)
	} else {
		d.MaxRetries = int(f.MaxRetries)
	}
	d.SuccessExitCodes = []int{0}
	if c.has("success_exit_codes") {
		d.SuccessExitCodes = nil
		seen := map[int64]bool{}
		line := c.line("success_exit_codes")
		switch {
		case len(f.SuccessExitCodes) == 0:
			c.add(line, "success_exit_codes", "empty: list the exit codes that mean success, e.g. [0]")
		case len(f.SuccessExitCodes) > 256:
			c.add(line, "success_exit_codes", "at most 256 codes, got %d", len(f.SuccessExitCodes))
		}
		for _, n := range f.SuccessExitCodes {
			switch {
			case n < 0 || n > 255:
				c.add(line, "success_exit_codes", "%d is not an exit code: 0 to 255", n)
			case seen[n]:
				c.add(line, "success_exit_codes", "%d is listed twice", n)
			default:
				d.SuccessExitCodes = append(d.SuccessExitCodes, int(n))
			}
			seen[n] = true
		}
		slices.Sort(d.SuccessExitCodes)
	}
	d.OnFailure = OnFailureFail
	if c.has("on_failure") {
		d.OnFailure = f.OnFailure
		if f.OnFailure != OnFailureFail && f.OnFailure != OnFailureHold {
			c.add(c.line("on_failure"), "on_failure", "%s: \"fail\" (the default: the index fails) or \"hold\" (it waits for `gridmgr job unhold` or `job rm`)", describe(f.OnFailure))
		}
	}

	// begin, deadline
	d.Begin, d.BeginIn = c.when("begin", f.Begin)
	d.Deadline, d.DeadlineIn = c.when("deadline", f.Deadline)
	c.order(d)

	// priority, network, lost_after
	if f.Priority < MinPriority || f.Priority > MaxPriority {
		c.add(c.line("priority"), "priority", "must be between %d and %d, got %d", MinPriority, MaxPriority, f.Priority)
	} else {
		d.Priority = int(f.Priority)
	}
	d.Network = "host"
	if c.has("network") {
		d.Network = f.Network
		if f.Network != "host" && f.Network != "none" {
			c.add(c.line("network"), "network", "%s: \"host\" (the host's network, the default) or \"none\" (loopback only)", describe(f.Network))
		}
	}
	d.LostAfter = c.duration("lost_after", f.LostAfter, DefaultLostAfter, MinLostAfter, MaxLostAfter)
	return d
}

// word checks one word of args or one env value: no NUL, bounded, and
// only the variables ${INDEX} and ${NAME}.
func (c *checker) word(line int, key, w string) {
	switch {
	case strings.ContainsRune(w, 0):
		c.add(line, key, "holds a NUL byte")
	case len(w) > maxValue:
		c.add(line, key, "longer than %d bytes", maxValue)
	default:
		if v := firstVar(w, VarIndex, VarName); v != "" {
			c.add(line, key, "%s", varMsg(v))
		}
	}
}

func varMsg(v string) string {
	if !strings.HasSuffix(v, "}") {
		return text.QuoteShort(v) + ": a ${ without its }: write ${INDEX} or ${NAME}"
	}
	return text.QuoteShort(v) + " is not known: use ${INDEX} (the array index) or ${NAME} (the job's name)"
}

// firstVar is the first ${…} in s that is not one of known (an unclosed
// "${" is returned without its }), or "".
func firstVar(s string, known ...string) string {
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			return ""
		}
		s = s[i:]
		j := strings.IndexByte(s, '}')
		if j < 0 {
			return text.Clip(s, 40)
		}
		if !slices.Contains(known, s[:j+1]) {
			return s[:j+1]
		}
		s = s[j+1:]
	}
}

func (c *checker) size(key, s string) int64 {
	n, err := text.ParseSize(s)
	if err != nil {
		c.add(c.line(key), key, "%s: %v", describe(s), err)
		return 0
	}
	if n < MinSize || n > MaxSize {
		c.add(c.line(key), key, "%s: must be between 1MiB and 1024TiB", describe(s))
		return 0
	}
	return int64(n)
}

func (c *checker) duration(key, s string, def, lo, hi time.Duration) time.Duration {
	if !c.has(key) {
		return def
	}
	d, err := text.ParseDuration(s)
	switch {
	case err != nil:
		c.add(c.line(key), key, "%s: %v", describe(s), err)
	case d < lo || d > hi:
		c.add(c.line(key), key, "%s: must be between %s and %s", describe(s), text.FormatDuration(lo), text.FormatDuration(hi))
	default:
		return d
	}
	return def
}

// expr compiles a requirement or rank as a manager will, and reports its
// first problem at the key's line (with the position inside the
// expression).
func (c *checker) expr(key string, kind query.Kind, src string) {
	if src == "" {
		if c.has(key) {
			c.add(c.line(key), key, "empty: leave the key out, or write an expression")
		}
		return
	}
	_, err := query.Compile(kind, src)
	if err == nil {
		return
	}
	var e *query.ExprError
	if errors.As(err, &e) {
		where := fmt.Sprintf("column %d", e.Col)
		if strings.Contains(src, "\n") {
			where = fmt.Sprintf("line %d, column %d of the expression", e.Line, e.Col)
		}
		c.add(c.line(key), key, "%s (at %s)", e.Msg, where)
		return
	}
	c.add(c.line(key), key, "%v", err)
}

// paths checks a list of paths: relative and inside the job's directory
// (inputs) or the program's out/ directory (outputs), clean, variables
// ${INDEX} and ${NAME} only, each named once.
func (c *checker) paths(key string, ps []string, outputs bool) []string {
	line := c.line(key)
	if len(ps) > maxList {
		c.add(line, key, "at most %d paths, got %d", maxList, len(ps))
		return ps
	}
	seen := map[string]bool{}
	for i, p := range ps {
		k := fmt.Sprintf("%s[%d]", key, i+1)
		if v := firstVar(p, VarIndex, VarName); v != "" {
			c.add(line, k, "%s", varMsg(v))
			continue
		}
		// An index is digits and a name [a-z0-9-]: neither makes a path
		// absolute, .. or unclean, so one expansion checks them all.
		if msg := checkPath(expandSample(p), outputs); msg != "" {
			c.add(line, k, "%s: %s", describe(p), msg)
			continue
		}
		if outputs && (p == "out" || strings.HasPrefix(p, "out/")) {
			c.add(line, k, "%s: outputs are relative to the program's out/ directory already: write %s", describe(p), describe(strings.TrimPrefix(strings.TrimPrefix(p, "out"), "/")))
			continue
		}
		if seen[p] {
			c.add(line, k, "%s is listed twice", describe(p))
		}
		seen[p] = true
	}
	return ps
}

// distinctOutputs reports two outputs that name the same file for the
// first or the last index (the same template twice is reported by paths).
func (c *checker) distinctOutputs(name string, count int, outs []string) {
	if len(outs) > maxList {
		return
	}
	for _, i := range []int{0, count - 1} {
		r := strings.NewReplacer(VarIndex, strconv.Itoa(i), VarName, name)
		seen := map[string]string{}
		for _, p := range outs {
			e := r.Replace(p)
			if q, ok := seen[e]; ok && q != p {
				c.add(c.line("outputs"), "outputs", "%s and %s are the same file for index %d", describe(q), describe(p), i)
				return
			}
			seen[e] = p
		}
		if count == 1 {
			break
		}
	}
}

func expandSample(p string) string {
	return strings.NewReplacer(VarIndex, "0", VarName, "x").Replace(p)
}

// checkPath says what is wrong with a relative path a job file names, or
// "". Paths are slash-separated on every system.
func checkPath(p string, output bool) string {
	where := "the job file's directory"
	if output {
		where = "the program's out/ directory"
	}
	switch {
	case p == "":
		return "a path is needed"
	case len(p) > maxPath:
		return fmt.Sprintf("longer than %d bytes", maxPath)
	case strings.ContainsFunc(p, isControl) || strings.Contains(p, `\`):
		return "holds a control character or a backslash"
	case strings.HasPrefix(p, "/") || (len(p) >= 2 && p[1] == ':'):
		return "must be relative to " + where + " (no leading / or drive)"
	case p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/.."):
		return "must stay inside " + where + " (no ..)"
	case p == ".":
		return "names the directory itself: name a file or a directory inside it"
	case path.Clean(p) != p:
		return fmt.Sprintf("write it as %q", path.Clean(p))
	}
	return ""
}

// within says whether p is dir or under it.
func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// when reads begin or deadline: an RFC 3339 time with its zone (a TOML
// date-time or a string), or "+D" (D after the submission, D > 0 as
// text.ParseDuration reads it). It returns the time or the offset; both
// are zero when the key is not given or is wrong.
func (c *checker) when(key string, v any) (time.Time, time.Duration) {
	if !c.has(key) {
		return time.Time{}, 0
	}
	line := c.line(key)
	const forms = `an RFC 3339 time with its zone, such as 2026-12-01T02:00:00Z or "2026-12-01T03:00:00+01:00", or "+2h" (after the submission)`
	switch v := v.(type) {
	case time.Time:
		if isLocal(v) {
			c.add(line, key, "a date or time without its zone (the job may run in another): give %s", forms)
			return time.Time{}, 0
		}
		return v, 0
	case string:
		if s, ok := strings.CutPrefix(v, "+"); ok {
			d, err := text.ParseDuration(s)
			switch {
			case err != nil:
				c.add(line, key, "%s: after + give a duration: %v", describe(v), err)
			case d <= 0 || d > MaxAhead:
				c.add(line, key, "%s: after + give a duration above 0 and at most %s", describe(v), text.FormatDuration(MaxAhead))
			default:
				return time.Time{}, d
			}
			return time.Time{}, 0
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			c.add(line, key, "%s: give %s", describe(v), forms)
			return time.Time{}, 0
		}
		return t, 0
	}
	c.add(line, key, "give %s", forms)
	return time.Time{}, 0
}

// isLocal says whether toml decoded t from a date or time without a zone
// (its location is then one of toml's, named for the form).
func isLocal(t time.Time) bool {
	switch t.Location().String() {
	case "datetime-local", "date-local", "time-local":
		return true
	}
	return false
}

// order checks that the deadline comes after the begin when both are
// known: both absolute, both relative, or from now (ParseAt), when the
// deadline must also be ahead.
func (c *checker) order(d *Description) {
	hasB := !d.Begin.IsZero() || d.BeginIn > 0
	hasD := !d.Deadline.IsZero() || d.DeadlineIn > 0
	if !hasD {
		return
	}
	line := c.line("deadline")
	if !c.now.IsZero() {
		b, dl := d.Begin, d.Deadline
		if b.IsZero() {
			b = c.now.Add(d.BeginIn)
		}
		if dl.IsZero() {
			dl = c.now.Add(d.DeadlineIn)
		}
		if !dl.After(c.now) {
			c.add(line, "deadline", "already past at the submission (%s)", c.now.UTC().Format(time.RFC3339))
		} else if hasB && !dl.After(b) {
			c.add(line, "deadline", "not after begin: no index could start")
		}
		return
	}
	switch {
	case !hasB:
	case !d.Begin.IsZero() && !d.Deadline.IsZero() && !d.Deadline.After(d.Begin),
		d.BeginIn > 0 && d.DeadlineIn > 0 && d.DeadlineIn <= d.BeginIn:
		c.add(line, "deadline", "not after begin: no index could start")
	}
}

// describe quotes a value for an error, or says it is empty.
func describe(s string) string {
	if s == "" {
		return "empty"
	}
	return text.QuoteShort(s)
}

// wordsSize is the bytes of args and env (names and values) together, as
// a start counts them.
func wordsSize(args []string, env map[string]string) int {
	n := 0
	for _, a := range args {
		n += len(a)
	}
	for k, v := range env {
		n += len(k) + len(v)
	}
	return n
}
