package layout_test

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/gridmgr/gridmgr"

// rooms places every package of the module on a level; a package may
// import packages of a lower level, and its own sub-packages' code only
// if they are lower too. The longest matching prefix wins. The levels
// are the drawing of docs/design.md §2, from the bottom up.
var rooms = []struct {
	prefix string
	level  int
	drawn  bool // shown in design.md's drawing (test helpers and examples are not)
}{
	{"wire", 0, true},
	{"internal/text", 0, true},
	{"internal/lazyre", 0, true},
	{"internal/svgplot", 0, true},
	{"internal/memtrim", 0, true},
	{"internal/keys", 0, true},
	{"internal/layout", 0, false},
	{"peeraddr", 1, true},
	{"internal/tomlpos", 1, true},
	{"internal/atomicfile", 1, true},
	{"internal/boltfile", 1, true},

	{"relations", 2, true},
	{"query", 2, true},
	{"reservation", 2, true},
	{"deploy", 2, true},
	{"deploy/runner", 1, false}, // deploy's own sub-package, drawn as "deploy (+ runner)"
	{"deploy/deploytest", 3, false},
	{"deploy/examples", 3, false},

	{"config", 3, true},
	{"jobs", 3, true},
	{"reservation/boltstore", 3, true},

	{"node/admincmd", 4, true},
	{"node/render", 4, true},
	{"jobs/store", 4, true},
	{"node", 5, true},
	{"node/memnet", 6, true},
	{"node/p2p", 6, true},
	{"node/p2p/internal", 5, false}, // node/p2p's own
	{"node/p2p/events", 5, false},   // drawn as "node/p2p (+ events, transfer)"
	{"node/p2p/transfer", 5, false},

	{"client", 7, true},
	{"sim", 7, true},
	{"daemon/host", 7, true},
	{"daemon/plugins", 7, true},
	{"daemon/archive", 7, true},
	{"daemon/metrics", 7, true},
	{"daemon/web", 8, true},
	{"daemon", 9, true},

	{"cmd/gridmgr/demoapp", 0, false},
	{"cmd/gridmgr", 10, true},
}

// pure packages: no network, disk, clock, goroutines or global
// randomness (docs/design.md §3).
var pure = []string{"node", "node/admincmd", "node/render", "relations", "query", "reservation", "internal/text", "internal/keys", "jobs"}

// Imports a pure package may not have (a prefix matches the path and
// everything under it).
var impure = []string{"net", "os", "syscall", "io/fs", "io/ioutil", "github.com/libp2p", "go.etcd.io/bbolt", "golang.org/x/sys"}

// The Driver is the runtime that owns a Core (one goroutine, the
// clock, the random seed); it lives beside the Core in node/ and is the
// one file of a pure package exempt from the call check.
var runtimeFiles = []string{"node/driver.go"}

// Calls a pure package may not make, by package path and name; for
// math/rand/v2 every package-level function but the constructors.
var impureCalls = map[string][]string{
	"time": {"Now", "Sleep", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick", "Since", "Until"},
}

var randConstructors = []string{"New", "NewPCG", "NewChaCha8", "NewZipf"}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("the module root is not two levels up: %v", err)
	}
	return dir
}

type pkg struct {
	rel   string // path inside the module
	files []string
	imps  map[string][]string // import path → files importing it
}

// packages lists every package of the module with its non-test Go files
// (examples/ is its own module and is skipped, as are testdata dirs).
func packages(t *testing.T, dir string) []pkg {
	t.Helper()
	var out []pkg
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != dir && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if path != dir {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		bp, err := build.ImportDir(path, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		p := pkg{rel: filepath.ToSlash(rel), imps: map[string][]string{}}
		fset := token.NewFileSet()
		for _, f := range bp.GoFiles {
			p.files = append(p.files, filepath.Join(path, f))
			af, err := parser.ParseFile(fset, filepath.Join(path, f), nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, is := range af.Imports {
				ip, _ := strconv.Unquote(is.Path.Value)
				p.imps[ip] = append(p.imps[ip], f)
			}
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func level(rel string) (int, bool) {
	best, lv := -1, 0
	for _, r := range rooms {
		if (rel == r.prefix || strings.HasPrefix(rel, r.prefix+"/")) && len(r.prefix) > best {
			best, lv = len(r.prefix), r.level
		}
	}
	return lv, best >= 0
}

func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// TestImportsPointDown: no package imports one at its own level or
// above, so nothing below reaches up.
func TestImportsPointDown(t *testing.T) {
	pkgs := packages(t, root(t))
	if len(pkgs) < 20 {
		t.Fatalf("found only %d packages; is the walk broken?", len(pkgs))
	}
	for _, p := range pkgs {
		lv, ok := level(p.rel)
		if !ok {
			t.Errorf("%s: this package has no room in internal/layout's table (and in docs/design.md §2); add it", p.rel)
			continue
		}
		for ip, files := range p.imps {
			if !under(ip, module) {
				continue
			}
			rel := strings.TrimPrefix(strings.TrimPrefix(ip, module), "/")
			ilv, ok := level(rel)
			if !ok {
				continue // reported as its own package
			}
			if ilv >= lv {
				t.Errorf("%s (%s) imports %s, which is not below it (level %d, itself %d): imports point down (docs/design.md §2)", p.rel, strings.Join(files, ", "), rel, ilv, lv)
			}
		}
	}
}

// TestEveryPackageHasADocGo: each package says in doc.go what it is and
// what its caller must do (docs/design.md §3), and that comment is the
// package's documentation, not a comment elsewhere.
func TestEveryPackageHasADocGo(t *testing.T) {
	dir := root(t)
	for _, p := range packages(t, dir) {
		path := filepath.Join(dir, filepath.FromSlash(p.rel), "doc.go")
		fset := token.NewFileSet()
		af, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Errorf("%s: no doc.go saying what the package is and what its caller must do (%v)", p.rel, err)
			continue
		}
		if af.Doc == nil || len(strings.TrimSpace(af.Doc.Text())) < 80 {
			t.Errorf("%s/doc.go: its package comment is missing or a line; say what the package is and what its caller must do", p.rel)
		}
	}
}

// TestDrawingIsTheTable: every package the table places is on the line
// of its level in docs/design.md's drawing, so the drawing and the rule
// this test enforces are one.
func TestDrawingIsTheTable(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root(t), "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := map[int]string{}
	in := false
	for _, l := range strings.Split(string(doc), "\n") {
		switch {
		case strings.HasPrefix(l, "level  packages:"):
			in = true
		case in && l == "```":
			in = false
		case in:
			f := strings.Fields(l)
			if len(f) > 1 {
				if n, err := strconv.Atoi(f[0]); err == nil {
					lines[n] = " " + strings.Join(f[1:], " ") + " "
				}
			}
		}
	}
	if len(lines) == 0 {
		t.Fatal(`docs/design.md has no drawing of levels (a block starting "level  packages:")`)
	}
	for _, r := range rooms {
		if !r.drawn {
			continue
		}
		l := lines[r.level]
		if !strings.Contains(l, " "+r.prefix+" ") && !strings.Contains(l, " "+r.prefix+",") && !strings.Contains(l, " "+r.prefix+"*") {
			t.Errorf("docs/design.md's drawing does not show %s on level %d (that line: %q)", r.prefix, r.level, strings.TrimSpace(l))
		}
	}
}

// TestPurePackagesStayPure: the pure packages import no network, disk
// or libp2p, and call no clock, timer or global random source, and
// start no goroutine.
func TestPurePackagesStayPure(t *testing.T) {
	dir := root(t)
	pkgs := packages(t, dir)
	seen := 0
	for _, p := range pkgs {
		if !slices.Contains(pure, p.rel) {
			continue
		}
		seen++
		for ip, files := range p.imps {
			for _, bad := range impure {
				if under(ip, bad) || ip == "math/rand" {
					t.Errorf("%s (%s) imports %s: a pure package reaches no network, disk or global randomness", p.rel, strings.Join(files, ", "), ip)
				}
			}
		}
		for _, f := range p.files {
			if slices.Contains(runtimeFiles, p.rel+"/"+filepath.Base(f)) {
				continue
			}
			checkCalls(t, p.rel, f)
		}
	}
	if seen != len(pure) {
		t.Fatalf("found %d of the %d pure packages %v", seen, len(pure), pure)
	}
}

func checkCalls(t *testing.T, rel, file string) {
	t.Helper()
	fset := token.NewFileSet()
	af, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{} // local name → import path
	for _, is := range af.Imports {
		ip, _ := strconv.Unquote(is.Path.Value)
		name := filepath.Base(ip)
		if ip == "math/rand/v2" {
			name = "rand"
		}
		if is.Name != nil {
			name = is.Name.Name
		}
		names[name] = ip
	}
	ast.Inspect(af, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			t.Errorf("%s: %s starts a goroutine: a pure package has none", rel, fset.Position(n.Pos()))
		case *ast.SelectorExpr:
			id, ok := n.X.(*ast.Ident)
			if !ok {
				return true
			}
			ip, ok := names[id.Name]
			if !ok {
				return true
			}
			switch {
			case slices.Contains(impureCalls[ip], n.Sel.Name):
				t.Errorf("%s: %s uses %s.%s: time arrives as a now argument in a pure package", rel, fset.Position(n.Pos()), ip, n.Sel.Name)
			case ip == "math/rand/v2" && ast.IsExported(n.Sel.Name) && !slices.Contains(randConstructors, n.Sel.Name) && !isType(n.Sel.Name):
				t.Errorf("%s: %s uses the global random source (rand.%s): a pure package takes an injected *rand.Rand", rel, fset.Position(n.Pos()), n.Sel.Name)
			}
		}
		return true
	})
}

func isType(name string) bool {
	return slices.Contains([]string{"Rand", "Source", "PCG", "ChaCha8", "Zipf"}, name)
}
