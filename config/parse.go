package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/BurntSushi/toml"

	"github.com/gridmgr/gridmgr/internal/text"
)

// Limits of Parse. A valid file never comes near them; they keep hostile
// or corrupt input from costing much time or memory.
const (
	maxFileSize = 1 << 20 // bytes of one file
	maxNesting  = 8       // depth of [ and { in a value
	maxKeyParts = 8       // dots in one dotted key or table header
	maxErrors   = 100     // problems reported before giving up
)

// Parse reads and checks one manager's properties file (TOML). file is the
// path it was read from: it names the errors, and relative paths in the
// file are resolved against its directory (unless file is ""). hostname is
// the default name.
//
// The check is strict: unknown keys, wrong types and out-of-range values
// are errors, and so is a policy that does not compile. On success it
// returns a Config that has passed Validate. Otherwise it returns nil and
// Errors with every problem found (at most 100), sorted by line, each
// naming file, line and key; a key of an array element ("superiors[1]")
// gets the line of the array. A TOML syntax error stops the parse, so it
// is reported alone. Files larger than 1 MiB, not UTF-8, or nested deeper
// than 8 levels are refused whole. Parse does no I/O.
func Parse(file string, data []byte, hostname string) (*Config, error) {
	d := &decoder{file: file, first: map[string]int{}}
	c := d.parse(data, hostname)
	if len(d.errs) > 0 {
		sort.SliceStable(d.errs, func(i, j int) bool { return d.errs[i].Line < d.errs[j].Line })
		if d.dropped > 0 {
			d.errs = append(d.errs, &Error{File: file, Msg: fmt.Sprintf("too many errors; %d more not shown", d.dropped)})
		}
		return nil, d.errs
	}
	return c, nil
}

// decoder is the state of one Parse.
type decoder struct {
	file string
	src  string
	// For line lookups: the document as a Primitive, its metadata, and
	// the tables decoded so far into Primitives, by toml.Key.String().
	md      toml.MetaData
	root    toml.Primitive
	tables  map[string]map[string]toml.Primitive
	errs    Errors
	dropped int
	first   map[string]int // key path + "\x00" + peer → its first array index
}

func (d *decoder) parse(data []byte, hostname string) (cfg *Config) {
	defer func() {
		// Nothing below should panic; if a dependency does, report it
		// instead of taking the caller down.
		if r := recover(); r != nil {
			cfg = nil
			d.add(0, "", "internal error while parsing: %v", r)
		}
	}()
	src := strings.TrimPrefix(string(data), "\ufeff")
	d.src = src
	if len(src) > maxFileSize {
		d.add(0, "", "file is too large (%d bytes); the limit is %d bytes", len(src), maxFileSize)
		return nil
	}
	if i := text.FirstInvalidUTF8(src); i >= 0 {
		d.add(lineAt(src, i), "", "file is not valid UTF-8")
		return nil
	}
	if off, msg := checkNesting(src); msg != "" {
		d.add(lineAt(src, off), "", "%s", msg)
		return nil
	}
	md, err := toml.Decode(src, &d.root)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			d.add(pe.Position.Line, pe.LastKey, "invalid TOML: %s", pe.Message)
		} else {
			d.add(0, "", "invalid TOML: %v", err)
		}
		return nil
	}
	d.md, d.tables = md, map[string]map[string]toml.Primitive{}
	var doc map[string]any
	if err := md.PrimitiveDecode(d.root, &doc); err != nil {
		d.add(0, "", "invalid TOML: %v", err)
		return nil
	}

	c := Default()
	c.File = d.file
	c.DataDir = d.resolve(c.DataDir)
	d.unknownKeys(nil, doc)
	badTable, seenTable := map[string]bool{}, map[string]bool{}
	for i := range table {
		k := &table[i]
		path := strings.Split(k.path, ".")
		t := doc
		if len(path) == 2 {
			v, ok := doc[path[0]]
			if !ok || badTable[path[0]] {
				continue
			}
			if t, ok = d.table(path[:1], v); !ok {
				badTable[path[0]] = true
				continue
			}
			if !seenTable[path[0]] {
				seenTable[path[0]] = true
				d.unknownKeys(path[:1], t)
			}
		}
		if v, ok := t[path[len(path)-1]]; ok {
			k.decode(d, path, v, &c)
		}
	}
	if _, ok := doc["name"]; !ok {
		if msg := checkName(hostname); msg != "" {
			d.add(0, "name", "no name is set and the host name %s is not a valid name (1 to 64 of A-Z a-z 0-9 . _ -); set name in the file", text.QuoteShort(hostname))
		}
		c.Name = hostname
	}
	if _, ok := doc["identity"]; !ok {
		c.Identity = filepath.Join(c.DataDir, DefaultIdentityFile)
	}
	for _, e := range crossCheck(&c) {
		path := strings.SplitN(e.Key, ".", 2)
		if e.Key == "dial.retry_max" && !d.md.IsDefined(path...) {
			path, e.Msg = []string{"dial", "retry_initial"}, fmt.Sprintf("%s is longer than dial.retry_max (default %s)", c.RetryInitial, c.RetryMax)
		}
		d.errAt(path, -1, "%s", e.Msg)
	}
	// The policy is compiled here too, so that its error comes with the
	// others, at its line.
	if err := c.compilePolicy(); err != nil {
		var e *Error
		if errors.As(err, &e) {
			first, _, _ := strings.Cut(e.Msg, "\n") // its position says the column: no caret
			d.errAt([]string{e.Key}, -1, "%s", first)
		}
	}
	if len(d.errs) > 0 {
		return nil
	}
	if err := c.validate(func(p string) bool { return d.md.IsDefined(strings.Split(p, ".")...) }); err != nil {
		var e *Error
		if errors.As(err, &e) {
			d.errAt(strings.SplitN(e.Key, ".", 2), -1, "%s", e.Msg)
		} else {
			d.add(0, "", "%v", err)
		}
		return nil
	}
	return &c
}

// known returns the known keys under path (nil: the top level), and
// whether the table's own keys are checked at all ([tokens], [access] and
// [attributes] take any key).
func known(path []string) ([]string, bool) {
	var out []string
	for _, k := range table {
		parts := strings.SplitN(k.path, ".", 2)
		switch {
		case len(path) == 0:
			out = append(out, parts[0])
		case parts[0] != path[0]:
		case k.open && k.path == strings.Join(path, "."):
			return nil, false
		case len(parts) == 2:
			out = append(out, parts[1])
		}
	}
	return slices.Compact(out), true
}

// unknownKeys reports the keys of t (at path) that are not in the table.
func (d *decoder) unknownKeys(path []string, t map[string]any) {
	names, checked := known(path)
	if !checked {
		return
	}
	for _, k := range slices.Sorted(mapKeys(t)) {
		if slices.Contains(names, k) {
			continue
		}
		kp := append(slices.Clip(path), k)
		msg := "unknown key"
		if why, ok := replaced[strings.Join(kp, ".")]; ok {
			msg += "; " + why
		} else if s := suggest(kp); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		d.errAt(kp, -1, "%s", msg)
	}
}

// replaced says what took the place of keys earlier versions knew.
var replaced = map[string]string{
	"apps.user": "applications no longer share one user: each reservation's run as a uid of their own from apps.uid_range",
}

// suggest returns the known key closest to the unknown key path, or "".
func suggest(path []string) string {
	for _, k := range path {
		if len(k) > 40 {
			return ""
		}
	}
	var all []string
	for _, k := range table {
		if i := strings.IndexByte(k.path, '.'); i > 0 && !slices.Contains(all, k.path[:i]) {
			all = append(all, k.path[:i])
		}
		all = append(all, k.path)
	}
	full := strings.ToLower(strings.Join(path, "."))
	best, bestD := "", 3
	for _, k := range all {
		if dist := text.EditDistance(full, k); dist < bestD && 2*dist < len(k) {
			best, bestD = k, dist
		}
	}
	if best != "" {
		return best
	}
	// The right key in the wrong table, such as "interval" at the top.
	leaf := strings.ToLower(path[len(path)-1])
	for _, k := range all {
		kl := k[strings.LastIndexByte(k, '.')+1:]
		if dist := text.EditDistance(leaf, kl); dist < bestD && 3*dist < len(kl) {
			best, bestD = k, dist
		}
	}
	return best
}

// add records an error at line for key (already formatted).
func (d *decoder) add(line int, key, format string, args ...any) {
	if len(d.errs) >= maxErrors {
		d.dropped++
		return
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Key: oneLine(key), Msg: oneLine(fmt.Sprintf(format, args...))})
}

// errAt records an error about the key at path, or about its element idx
// when idx >= 0.
func (d *decoder) errAt(path []string, idx int, format string, args ...any) {
	if len(d.errs) >= maxErrors {
		d.dropped++
		return
	}
	k, line := toml.Key(path).String(), 0
	if idx >= 0 {
		k += "[" + strconv.Itoa(idx) + "]"
		line = d.elemLine(path, idx)
	} else {
		line, _ = d.lineOf(path)
	}
	d.add(line, k, format, args...)
}

func (d *decoder) table(path []string, v any) (map[string]any, bool) {
	t, ok := v.(map[string]any)
	if !ok {
		d.errAt(path, -1, "expected a table, got %s", describe(v))
	}
	return t, ok
}

func (d *decoder) array(path []string, v any) ([]any, bool) {
	a, ok := v.([]any)
	if !ok {
		d.errAt(path, -1, "expected an array of strings, got %s", describe(v))
	}
	return a, ok
}

// resolve makes a relative path relative to the directory of the file.
func (d *decoder) resolve(s string) string {
	if d.file == "" || filepath.IsAbs(s) {
		return filepath.Clean(s)
	}
	return filepath.Join(filepath.Dir(d.file), s)
}

// Line lookup. BurntSushi/toml records the position of every key but does
// not export it; it does put it in the ParseError it returns when a
// toml.Unmarshaler fails. So to find the line of a key, the tables along
// its path are decoded into Primitives (cached) and the key's Primitive is
// decoded into lineProbe, whose UnmarshalTOML always fails.

type lineProbe struct{}

func (lineProbe) UnmarshalTOML(any) error { return errors.New("line probe") }

func (d *decoder) primTable(path []string) map[string]toml.Primitive {
	ck := toml.Key(path).String()
	if t, ok := d.tables[ck]; ok {
		return t
	}
	prim := d.root
	if len(path) > 0 {
		pr, ok := d.primTable(path[:len(path)-1])[path[len(path)-1]]
		if !ok {
			d.tables[ck] = nil
			return nil
		}
		prim = pr
	}
	var t map[string]toml.Primitive
	if err := d.md.PrimitiveDecode(prim, &t); err != nil {
		t = nil
	}
	d.tables[ck] = t
	return t
}

// lineOf returns the line of the key at path, and the offset toml records
// for it (for "key = [...]", just after the "["). A table created
// implicitly (the "a" of "[a.b]") has no position of its own: it gets the
// line of its first key; failing that, the enclosing key's line is used.
func (d *decoder) lineOf(path []string) (line, start int) {
	if d.tables == nil {
		return 0, 0
	}
	probe := func(p []string) (int, int) {
		prim, ok := d.primTable(p[:len(p)-1])[p[len(p)-1]]
		var pe toml.ParseError
		if ok && errors.As(d.md.PrimitiveDecode(prim, lineProbe{}), &pe) {
			return pe.Position.Line, pe.Position.Start
		}
		return 0, 0
	}
	for n := len(path); n > 0; n-- {
		if l, st := probe(path[:n]); l > 0 {
			if n < len(path) {
				st = 0 // the offset is the enclosing key's
			}
			return l, st
		}
		for _, k := range d.md.Keys() {
			if len(k) > n && slices.Equal(k[:n], path[:n]) {
				if l, _ := probe(k); l > 0 {
					return l, 0
				}
			}
		}
	}
	return 0, 0
}

// elemLine is the line where element idx of the array at path starts when
// the array is written as "key = [...]"; else the key's line.
func (d *decoder) elemLine(path []string, idx int) int {
	line, start := d.lineOf(path)
	if start <= 0 || start > len(d.src) || d.src[start-1] != '[' {
		return line
	}
	depth, expect, n := 1, true, 0
	for i := start; i < len(d.src) && depth > 0; i++ {
		switch c := d.src[i]; {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
		case c == '#':
			i += max(strings.IndexByte(d.src[i:], '\n'), 0)
		case c == ',':
			expect = expect || depth == 1
		case c == ']' || c == '}':
			depth--
		default:
			if depth == 1 && expect {
				if n == idx {
					return lineAt(d.src, i)
				}
				n, expect = n+1, false
			}
			switch c {
			case '[', '{':
				depth++
			case '"', '\'':
				i = skipString(d.src, i) - 1
			}
		}
	}
	return line
}

// lineAt returns the 1-based line of byte offset off in src.
func lineAt(src string, off int) int {
	return 1 + strings.Count(src[:min(max(off, 0), len(src))], "\n")
}

// checkNesting scans src for brackets nested deeper than maxNesting and
// for keys with more than maxKeyParts dots, which the TOML decoder handles
// in quadratic time and memory. It returns the offset and a message, or ""
// if src is fine. Strings and comments are skipped.
func checkNesting(src string) (int, string) {
	depth, dots := 0, 0
	for i := 0; i < len(src); i++ {
		switch c := src[i]; {
		case c == '#':
			if j := strings.IndexByte(src[i:], '\n'); j >= 0 {
				i += j
			} else {
				return 0, ""
			}
		case c == '"' || c == '\'':
			i = skipString(src, i) - 1
		case c == '[' || c == '{':
			if depth++; depth > maxNesting {
				return i, fmt.Sprintf("values are nested more than %d levels deep", maxNesting)
			}
			dots = 0
		case c == ']' || c == '}':
			depth, dots = max(depth-1, 0), 0
		case c == '.':
			if dots++; dots > maxKeyParts {
				return i, fmt.Sprintf("key has more than %d dotted parts", maxKeyParts+1)
			}
		case c == ' ' || c == '\t' || c == '_' || c == '-' || unicode.IsLetter(rune(c)) || unicode.IsDigit(rune(c)):
		default:
			dots = 0
		}
	}
	return 0, ""
}

// skipString returns the offset just after the TOML string (basic,
// literal, or their multi-line forms) that starts at src[i]. A single-line
// string that does not end stops at the newline.
func skipString(src string, i int) int {
	q := src[i]
	triple := strings.Repeat(string(q), 3)
	end, j := "\n", i+1
	if strings.HasPrefix(src[i:], triple) {
		end, j = triple, i+3
	}
	for j < len(src) {
		switch {
		case q == '"' && src[j] == '\\':
			j += 2
		case end == triple && strings.HasPrefix(src[j:], triple):
			j += 3
			for k := 0; k < 2 && j < len(src) && src[j] == q; k++ {
				j++ // up to two more quotes end the string too
			}
			return j
		case end == "\n" && src[j] == q:
			return j + 1
		case end == "\n" && src[j] == '\n':
			return j
		default:
			j++
		}
	}
	return len(src)
}

// oneLine escapes control characters in a message (parts of it, such as
// go-multiaddr's errors, may quote the input) and shortens it if long.
func oneLine(s string) string {
	s = text.Clip(s, 400)
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}
