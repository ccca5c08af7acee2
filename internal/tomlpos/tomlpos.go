package tomlpos

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	"github.com/gridmgr/gridmgr/internal/text"
)

// Doc is a document's lines and table headers.
type Doc struct {
	lines  []string
	tables map[string]int   // first [table] header line, by dotted name
	arrays map[string][]int // each [[array]] header line, by dotted name
	// keys are the lines that assign each simple key (bare, or quoted
	// without escapes), in order: Key finds a line without a scan.
	keys map[string][]int
}

var (
	headerRE = regexp.MustCompile(`^\s*(\[\[?)\s*([A-Za-z0-9_.-]+)\s*\]\]?`)
	keyRE    = regexp.MustCompile(`^\s*(?:([A-Za-z0-9_-]+)|"([^"\\]*)"|'([^']*)')\s*=`)
	simpleRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// New indexes src.
func New(src string) *Doc {
	d := &Doc{lines: strings.Split(src, "\n"), tables: map[string]int{}, arrays: map[string][]int{}, keys: map[string][]int{}}
	for i, l := range d.lines {
		if m := keyRE.FindStringSubmatch(l); m != nil {
			k := m[1] + m[2] + m[3]
			d.keys[k] = append(d.keys[k], i+1)
			continue
		}
		m := headerRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if m[1] == "[[" {
			d.arrays[m[2]] = append(d.arrays[m[2]], i+1)
		} else if _, ok := d.tables[m[2]]; !ok {
			d.tables[m[2]] = i + 1
		}
	}
	return d
}

// Table is the line of the header [name], or 0.
func (d *Doc) Table(name string) int { return d.tables[name] }

// Array is the line of each [[name]] header, in order.
func (d *Doc) Array(name string) []int { return d.arrays[name] }

// Key is the first line after line start (0: the top) that assigns key
// (bare or quoted); start if there is none.
func (d *Doc) Key(start int, key string) int {
	if simpleRE.MatchString(key) {
		lines := d.keys[key]
		if i, _ := slices.BinarySearch(lines, start+1); i < len(lines) {
			return lines[i]
		}
		return start
	}
	re := regexp.MustCompile(`^\s*["']?` + regexp.QuoteMeta(key) + `["']?\s*=`)
	for i, l := range d.lines {
		if i+1 > start && re.MatchString(l) {
			return i + 1
		}
	}
	return start
}

// Of is the line of key k, searched after the header of its table.
func (d *Doc) Of(k toml.Key) int {
	if len(k) == 0 {
		return 0
	}
	start := 0
	if len(k) > 1 {
		start = d.tables[strings.Join(k[:len(k)-1], ".")]
	}
	return d.Key(start, k[len(k)-1])
}

// Error is a problem at a line of a file (0: the whole file), with the
// key it is about, printed as FILE:LINE: KEY: what is wrong.
type Error struct {
	File string
	Line int
	Key  string
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors are every problem found in one file, one per line of text.
type Errors []*Error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// Decode checks a TOML file's size (at most limit bytes) and encoding,
// and decodes it into v. Its errors name the file and line: a syntax
// error as invalid TOML, a value that v's own types refused (their
// UnmarshalText says "duration" or "size", as Duration's does) by its key. On success it
// returns the metadata (for Undecoded) and the Doc (for lines).
func Decode(file string, data []byte, limit int, v any) (toml.MetaData, *Doc, Errors) {
	if len(data) > limit {
		return toml.MetaData{}, nil, Errors{{File: file, Msg: fmt.Sprintf("file is too large (%d bytes); the limit is %d", len(data), limit)}}
	}
	if !utf8.Valid(data) {
		return toml.MetaData{}, nil, Errors{{File: file, Msg: "file is not UTF-8 text"}}
	}
	src := strings.TrimPrefix(string(data), "\ufeff")
	md, err := toml.Decode(src, v)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			if strings.Contains(pe.Message, "duration") || strings.Contains(pe.Message, "size") {
				return md, nil, Errors{{File: file, Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message}}
			}
			return md, nil, Errors{{File: file, Line: pe.Position.Line, Msg: "invalid TOML: " + pe.Message}}
		}
		return md, nil, Errors{{File: file, Msg: strings.TrimPrefix(err.Error(), "toml: ")}}
	}
	return md, New(src), nil
}

// MaxDuration bounds a Duration.
const MaxDuration = 24 * time.Hour

// Duration is a time.Duration written as a Go duration string ("150ms",
// "2m") in TOML, between 0 and MaxDuration. Decode names the key of a
// value it refuses.
type Duration time.Duration

// UnmarshalText parses a Go duration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil || v < 0 || v > MaxDuration {
		return fmt.Errorf("%s is not a duration between 0 and 24h (write e.g. \"150ms\" or \"2m\")", text.QuoteShort(string(b)))
	}
	*d = Duration(v)
	return nil
}

// D is the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
