package deploy

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/internal/lazyre"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/internal/tomlpos"
)

// ManifestName is the manifest's name at the root of a bundle.
const ManifestName = "app.toml"

// Limits of a manifest: far above what an application needs, low enough
// that a hostile one costs nothing to read.
const (
	maxManifestSize = 256 << 10
	maxArgs         = 256  // words of one command
	maxList         = 1000 // files, dirs, commands, operations, values
	maxPorts        = 32
	maxPath         = 1024
)

// Manifest is an application's app.toml: what it is, how to install,
// run, ask and control it, and what it reports. Parse reads one;
// deploy/examples/hello/app.toml is a complete example with every key.
type Manifest struct {
	Name        string `toml:"name"`    // [a-z][a-z0-9-]*, at most 63
	Version     string `toml:"version"` // free text, at most 64
	Class       string `toml:"class"`   // applications sharing Shared; default Name
	Description string `toml:"description"`
	// Network is "host" (the default: the host's network, to serve
	// ports) or "none" (a network namespace of its own, loopback only).
	Network string `toml:"network"`

	Install Install `toml:"install"`
	// Shared is done once, for the first instance of the class on a host,
	// and undone with the last one (reference counted), in the class's
	// own directory.
	Shared Shared `toml:"shared"`
	Run    Run    `toml:"run"`
	Idle   Probe  `toml:"idle"`
	Health Probe  `toml:"health"`
	// Operations are the application's own commands the grid may invoke
	// (the patent's list of queries and commands an application supports).
	Operations []Operation `toml:"operation"`
	// Values is the process data scheme: values the application reports.
	Values ValueScheme `toml:"values"`
	Data   Data        `toml:"data"`
}

// Install is what installing one instance does, in the instance's
// directory (paths are relative to it).
type Install struct {
	Files    []Place           `toml:"files"`
	Dirs     []string          `toml:"dirs"`
	Commands [][]string        `toml:"commands"` // run in order after the files are placed
	Ports    []string          `toml:"ports"`    // named TCP ports to allocate: ${PORT_NAME}
	Env      map[string]string `toml:"env"`
}

// Place copies a file of the bundle into the instance.
type Place struct {
	From string `toml:"from"` // path in the bundle
	To   string `toml:"to"`   // path in the instance directory; default From
	Mode string `toml:"mode"` // octal, default "0644"; no setuid, setgid or sticky bits
}

// Shared is the class's one-time setup, in the class directory.
type Shared struct {
	Files    []Place    `toml:"files"`
	Dirs     []string   `toml:"dirs"`
	Commands [][]string `toml:"commands"`
}

// Run says how to start and stop the application.
type Run struct {
	Command     []string `toml:"command"`
	StopSignal  string   `toml:"stop_signal"` // default SIGTERM
	StopGrace   Duration `toml:"stop_grace"`  // then SIGKILL; default 10s
	Restart     string   `toml:"restart"`     // never (default) or on-failure
	MaxRestarts int      `toml:"max_restarts"`
	Nice        int      `toml:"nice"` // 0 to 19: only lower priority
	// Args lets a start append words to Command (a job's per-start
	// arguments); Env lets it add environment variables. Without them a
	// start that brings either is refused. Executor.StartWith says what
	// is checked.
	Args bool `toml:"args"`
	Env  bool `toml:"env"`
}

// Probe asks the application a question: "are you idle?" or "are you
// healthy?". It is one of a command (exit 0: yes), an HTTP GET on a named
// port (200: yes), a TCP connect (health only), or CPU use below a share
// of the reserved cpus for a while (idle only).
type Probe struct {
	Command  []string `toml:"command"`
	Port     string   `toml:"port"` // a name from install.ports
	Path     string   `toml:"path"` // with port: HTTP GET; without: TCP connect
	CPUBelow float64  `toml:"cpu_below"`
	For      Duration `toml:"for"`
	Interval Duration `toml:"interval"` // default 10s
}

// Operation is a command of the application the grid may invoke by name.
type Operation struct {
	Name        string   `toml:"name"`
	Description string   `toml:"description"`
	Command     []string `toml:"command"`
	Args        bool     `toml:"args"` // the caller may append arguments
}

// ValueScheme is how the application reports its own values: Command
// prints "NAME VALUE" lines, one per Value.
type ValueScheme struct {
	Command  []string `toml:"command"`
	Interval Duration `toml:"interval"` // default 30s
	Values   []Value  `toml:"value"`
}

// Value is one reported value.
type Value struct {
	Name        string `toml:"name"`
	Type        string `toml:"type"` // int, float or string
	Unit        string `toml:"unit"`
	Description string `toml:"description"`
}

// Data says where `gridmgr app put` may write and `app get` may read,
// relative to the instance directory.
type Data struct {
	In  []string `toml:"in"`
	Out []string `toml:"out"`
}

// Duration is a time.Duration written as "150ms" in TOML (0 to 24h).
type Duration = tomlpos.Duration

// Built-in controls, which an operation may not be named after.
var builtins = []string{"install", "start", "stop", "pause", "resume", "status", "logs", "idle", "health", "remove", "put", "get", "list"}

// Signals a manifest may name for stopping.
var stopSignals = []string{"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGKILL"}

var (
	nameRE  = lazyre.New(`^[a-z][a-z0-9-]{0,62}$`)
	portRE  = lazyre.New(`^[a-z][a-z0-9_]{0,31}$`)
	valueRE = lazyre.New(`^[a-z][a-z0-9_]{0,62}$`)
	envRE   = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	varRE   = regexp.MustCompile(`\$\{([^}]*)\}`)
)

// Parse reads and checks a manifest. It is strict: unknown keys, wrong
// types, bad names and paths, and values out of range are errors, all
// reported at once as FILE:LINE: KEY: what is wrong (tomlpos.Errors),
// in the order of their lines. Only a TOML syntax error stops it early
// (what follows cannot be read), and says so. On success defaults are
// filled in.
func Parse(file string, data []byte) (*Manifest, error) {
	var m Manifest
	doc, errs, failed := tomlpos.DecodeAll(file, data, maxManifestSize, &m)
	if doc == nil {
		return nil, errs // not TOML: nothing more can be checked
	}
	c := &checker{file: file, doc: doc, errs: errs, failed: failed}
	c.check(&m)
	if len(c.errs) > 0 {
		sort.SliceStable(c.errs, func(i, j int) bool { return c.errs[i].Line < c.errs[j].Line })
		return nil, c.errs
	}
	return &m, nil
}

type checker struct {
	file string
	doc  *tomlpos.Doc
	errs tomlpos.Errors
	// failed are the keys decoding reported already (a value of the
	// wrong type, or the key an unknown one was meant to be): the checks
	// say nothing more about them.
	failed map[string]bool
}

func (c *checker) add(line int, key, format string, args ...any) {
	if c.reported(key) {
		return
	}
	if len(c.errs) < tomlpos.MaxErrors {
		c.errs = append(c.errs, &tomlpos.Error{File: c.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
	}
}

// reported says whether decoding reported key, or a key it is part of.
func (c *checker) reported(key string) bool {
	for k := key; k != ""; {
		if c.failed[k] {
			return true
		}
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return false
}

// at is the line of key in table (dotted, "" for the top).
func (c *checker) at(table, key string) int {
	start := 0
	if table != "" {
		start = c.doc.Table(table)
	}
	return c.doc.Key(start, key)
}

func (c *checker) check(m *Manifest) {
	switch {
	case m.Name == "":
		c.add(0, "name", "missing: the application's name (lower-case letters, digits and '-')")
	case !nameRE.MatchString(m.Name):
		c.add(c.at("", "name"), "name", "%s: write lower-case letters, digits and '-', starting with a letter, at most 63", describe(m.Name))
	}
	if m.Version == "" {
		c.add(0, "version", "missing: the application's version")
	} else if len(m.Version) > 64 || strings.ContainsFunc(m.Version, isControl) {
		c.add(c.at("", "version"), "version", "%s: needed, at most 64 printable characters", describe(m.Version))
	}
	if m.Class == "" {
		m.Class = m.Name
	} else if !nameRE.MatchString(m.Class) {
		c.add(c.at("", "class"), "class", "%s: write it as a name (lower-case letters, digits, '-')", describe(m.Class))
	}
	switch m.Network {
	case "":
		m.Network = "host"
	case "host", "none":
	default:
		c.add(c.at("", "network"), "network", "%s: host (the host's network, the default) or none (its own, loopback only)", describe(m.Network))
	}
	if m.Network == "none" && len(m.Install.Ports) > 0 {
		c.add(c.at("install", "ports"), "install.ports", "with network = \"none\" nothing outside the application can reach a port: drop the ports, or use the host's network")
	}
	ports := map[string]bool{}
	if len(m.Install.Ports) > maxPorts {
		c.add(c.at("install", "ports"), "install.ports", "at most %d ports, got %d", maxPorts, len(m.Install.Ports))
	}
	for _, p := range m.Install.Ports {
		switch {
		case !portRE.MatchString(p):
			c.add(c.at("install", "ports"), "install.ports", "%s: a port's name is lower-case letters, digits and '_', starting with a letter", describe(p))
		case ports[p]:
			c.add(c.at("install", "ports"), "install.ports", "%q is named twice", p)
		}
		ports[p] = true
	}
	vars := func(line int, key string, words ...string) {
		for _, w := range words {
			for _, v := range varRE.FindAllStringSubmatch(w, -1) {
				name := v[1]
				switch {
				case name == "INSTANCE_DIR" || name == "INSTANCE" || name == "APP" || name == "CLASS_DIR":
				case strings.HasPrefix(name, "PORT_") && ports[strings.ToLower(strings.TrimPrefix(name, "PORT_"))]:
				default:
					c.add(line, key, "%s is not known: use ${INSTANCE_DIR}, ${INSTANCE}, ${APP}, ${CLASS_DIR} or ${PORT_NAME} of a port in install.ports", text.QuoteShort("${"+name+"}"))
				}
			}
		}
	}
	c.places("install", m.Install.Files)
	c.paths("install", "dirs", m.Install.Dirs)
	c.commands("install", "commands", m.Install.Commands, vars)
	for _, k := range slices.Sorted(maps.Keys(m.Install.Env)) {
		line := c.at("install.env", k)
		if !envRE.MatchString(k) || strings.HasPrefix(k, "GRIDMGR_") {
			c.add(line, "install.env."+k, "not a variable name the manifest may set (letters, digits, '_'; GRIDMGR_ is reserved)")
		}
		if strings.ContainsRune(m.Install.Env[k], 0) {
			c.add(line, "install.env."+k, "the value holds a NUL byte")
		}
		vars(line, "install.env."+k, m.Install.Env[k])
	}
	c.places("shared", m.Shared.Files)
	c.paths("shared", "dirs", m.Shared.Dirs)
	c.commands("shared", "commands", m.Shared.Commands, vars)

	r := &m.Run
	if len(r.Command) == 0 {
		c.add(c.at("run", "command"), "run.command", "missing: the command that starts the application, as a list of words")
	} else {
		c.command(c.at("run", "command"), "run.command", r.Command, vars)
	}
	if r.StopSignal == "" {
		r.StopSignal = "SIGTERM"
	} else if !slices.Contains(stopSignals, r.StopSignal) {
		c.add(c.at("run", "stop_signal"), "run.stop_signal", "%s: one of %s", describe(r.StopSignal), strings.Join(stopSignals, ", "))
	}
	if r.StopGrace == 0 {
		r.StopGrace = Duration(10 * time.Second)
	}
	switch r.Restart {
	case "":
		r.Restart = "never"
	case "never", "on-failure":
	default:
		c.add(c.at("run", "restart"), "run.restart", "%s: never or on-failure", describe(r.Restart))
	}
	if r.MaxRestarts < 0 || r.MaxRestarts > 1000 {
		c.add(c.at("run", "max_restarts"), "run.max_restarts", "must be between 0 and 1000, got %d", r.MaxRestarts)
	} else if r.MaxRestarts > 0 && r.Restart != "on-failure" {
		c.add(c.at("run", "max_restarts"), "run.max_restarts", "only with restart = \"on-failure\"")
	}
	if r.Nice < 0 || r.Nice > 19 {
		c.add(c.at("run", "nice"), "run.nice", "must be between 0 and 19 (an application may only lower its priority), got %d", r.Nice)
	}
	c.probe("idle", &m.Idle, ports, vars)
	c.probe("health", &m.Health, ports, vars)

	lines := c.doc.Array("operation")
	seen := map[string]bool{}
	if len(m.Operations) > maxList {
		c.add(0, "operation", "at most %d operations, got %d", maxList, len(m.Operations))
	}
	for i := range m.Operations {
		op := &m.Operations[i]
		line := 0
		if i < len(lines) {
			line = lines[i]
		}
		key := fmt.Sprintf("operation[%d]", i+1)
		switch {
		case !nameRE.MatchString(op.Name):
			c.add(c.doc.Key(line, "name"), key+".name", "%s: write it as a name (lower-case letters, digits, '-')", describe(op.Name))
		case slices.Contains(builtins, op.Name):
			c.add(c.doc.Key(line, "name"), key+".name", "%q is a built-in control of every application; name the operation otherwise", op.Name)
		case seen[op.Name]:
			c.add(c.doc.Key(line, "name"), key+".name", "operation %q is defined twice", op.Name)
		}
		seen[op.Name] = true
		if len(op.Command) == 0 {
			c.add(line, key+".command", "missing: the command the operation runs")
		} else {
			c.command(c.doc.Key(line, "command"), key+".command", op.Command, vars)
		}
	}

	v := &m.Values
	if v.Interval == 0 {
		v.Interval = Duration(30 * time.Second)
	}
	vlines := c.doc.Array("values.value")
	vseen := map[string]bool{}
	for i, val := range v.Values {
		line := 0
		if i < len(vlines) {
			line = vlines[i]
		}
		key := fmt.Sprintf("values.value[%d]", i+1)
		if !valueRE.MatchString(val.Name) || vseen[val.Name] {
			c.add(c.doc.Key(line, "name"), key+".name", "%s: a value's name is lower-case letters, digits and '_', once each", describe(val.Name))
		}
		vseen[val.Name] = true
		if val.Type != "int" && val.Type != "float" && val.Type != "string" {
			c.add(c.doc.Key(line, "type"), key+".type", "%s: int, float or string", describe(val.Type))
		}
	}
	if len(v.Values) > 0 && len(v.Command) == 0 {
		c.add(c.at("values", "command"), "values.command", "missing: the command that prints the values (\"NAME VALUE\" lines)")
	}
	if len(v.Command) > 0 {
		c.command(c.at("values", "command"), "values.command", v.Command, vars)
		if len(v.Values) == 0 {
			c.add(c.at("values", "command"), "values.command", "there is no [[values.value]] for it to report")
		}
	}
	c.paths("data", "in", m.Data.In)
	c.paths("data", "out", m.Data.Out)
}

func (c *checker) probe(name string, p *Probe, ports map[string]bool, vars func(int, string, ...string)) {
	kinds := 0
	if len(p.Command) > 0 {
		kinds++
		c.command(c.at(name, "command"), name+".command", p.Command, vars)
	}
	if p.Port != "" {
		kinds++
		if !ports[p.Port] {
			c.add(c.at(name, "port"), name+".port", "%s is not one of install.ports", describe(p.Port))
		}
		if p.Path != "" && (!strings.HasPrefix(p.Path, "/") || len(p.Path) > maxPath || strings.ContainsFunc(p.Path, isControl)) {
			c.add(c.at(name, "path"), name+".path", "%s: an HTTP path, starting with /", describe(p.Path))
		}
		if name == "idle" && p.Path == "" {
			c.add(c.at(name, "port"), name+".port", "an idle probe on a port needs path (an HTTP GET that answers 200 when idle)")
		}
	} else if p.Path != "" {
		c.add(c.at(name, "path"), name+".path", "path needs port: the named port to send the HTTP GET to")
	}
	if p.CPUBelow != 0 {
		kinds++
		if name != "idle" {
			c.add(c.at(name, "cpu_below"), name+".cpu_below", "only an idle probe may be a CPU threshold")
		}
		if !(p.CPUBelow > 0 && p.CPUBelow <= 1) {
			c.add(c.at(name, "cpu_below"), name+".cpu_below", "a share of the reserved cpus, in (0, 1], got %v", p.CPUBelow)
		}
		if p.For == 0 {
			c.add(c.at(name, "cpu_below"), name+".for", "cpu_below needs for: how long the use must stay below it")
		}
	} else if p.For != 0 {
		c.add(c.at(name, "for"), name+".for", "for goes with cpu_below")
	}
	if kinds > 1 {
		c.add(c.doc.Table(name), name, "give one of command, port (with path: HTTP; without: TCP) or cpu_below, not several")
	}
	if p.Interval == 0 {
		p.Interval = Duration(10 * time.Second)
	}
}

func (c *checker) places(table string, ps []Place) {
	if len(ps) > maxList {
		c.add(c.at(table, "files"), table+".files", "at most %d files, got %d", maxList, len(ps))
		return
	}
	for i := range ps {
		p := &ps[i]
		line := c.at(table, "files")
		key := fmt.Sprintf("%s.files[%d]", table, i+1)
		if p.To == "" {
			p.To = p.From
		}
		for _, x := range []struct{ k, v string }{{"from", p.From}, {"to", p.To}} {
			if err := checkPath(x.v); err != "" {
				c.add(line, key+"."+x.k, "%s: %s", describe(x.v), err)
			}
		}
		if p.Mode == "" {
			p.Mode = "0644"
		}
		if mode, err := strconv.ParseUint(p.Mode, 8, 32); err != nil || mode > 0o777 {
			c.add(line, key+".mode", "%s: an octal mode up to 0777 (no setuid, setgid or sticky bit)", describe(p.Mode))
		}
	}
}

func (c *checker) paths(table, name string, ps []string) {
	if len(ps) > maxList {
		c.add(c.at(table, name), table+"."+name, "at most %d, got %d", maxList, len(ps))
		return
	}
	for _, p := range ps {
		if err := checkPath(p); err != "" {
			c.add(c.at(table, name), table+"."+name, "%s: %s", describe(p), err)
		}
	}
}

// checkPath says what is wrong with a path the manifest names inside an
// instance or class directory, or "".
func checkPath(p string) string {
	switch {
	case p == "":
		return "a path is needed"
	case len(p) > maxPath:
		return fmt.Sprintf("longer than %d bytes", maxPath)
	case strings.ContainsFunc(p, isControl) || strings.Contains(p, `\`):
		return "holds a control character or a backslash"
	case !filepath.IsLocal(p):
		return "must be relative and stay inside the application's directory (no leading /, no ..)"
	case filepath.Clean(p) != p:
		return fmt.Sprintf("write it as %q", filepath.Clean(p))
	}
	return ""
}

func (c *checker) commands(table, name string, cmds [][]string, vars func(int, string, ...string)) {
	if len(cmds) > maxList {
		c.add(c.at(table, name), table+"."+name, "at most %d commands, got %d", maxList, len(cmds))
		return
	}
	for i, cmd := range cmds {
		key := fmt.Sprintf("%s.%s[%d]", table, name, i+1)
		if len(cmd) == 0 {
			c.add(c.at(table, name), key, "an empty command")
			continue
		}
		c.command(c.at(table, name), key, cmd, vars)
	}
}

func (c *checker) command(line int, key string, cmd []string, vars func(int, string, ...string)) {
	switch {
	case len(cmd) > maxArgs:
		c.add(line, key, "at most %d words, got %d", maxArgs, len(cmd))
	case cmd[0] == "":
		c.add(line, key, "the program (first word) is empty")
	default:
		for _, w := range cmd {
			if strings.ContainsRune(w, 0) {
				c.add(line, key, "a word holds a NUL byte")
				return
			}
		}
		vars(line, key, cmd...)
	}
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// describe quotes a value for an error, or says it is empty.
func describe(s string) string {
	if s == "" {
		return "empty"
	}
	return text.QuoteShort(s)
}
