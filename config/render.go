package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
)

// Render returns c as a properties file with every key written (paths
// relative to c.File's directory where they were), so that Parse(c.File,
// Render(), any host) gives back a Config equal to c.
func (c *Config) Render() []byte {
	var b strings.Builder
	section := ""
	for i := range table {
		k := &table[i]
		head, leaf, nested := strings.Cut(k.path, ".")
		if !nested {
			head, leaf = "", k.path
		}
		if k.open { // [tokens], [access], [attributes]
			fmt.Fprintf(&b, "\n[%s]\n%s", k.path, k.format(c))
			section = k.path
			continue
		}
		if head != section {
			fmt.Fprintf(&b, "\n[%s]\n", head)
			section = head
		}
		if v := k.format(c); v != "" {
			fmt.Fprintf(&b, "%s = %s\n", leaf, v)
		}
	}
	return []byte(strings.TrimPrefix(b.String(), "\n"))
}

// KeyDoc describes one key of the properties file.
type KeyDoc struct {
	Path     string // dotted, such as "heartbeat.interval"
	Default  string // as TOML; "" when the default is "none" or measured
	Settable bool   // admin set may change it on a running manager
	Doc      string
	// Overrides is the query variable whose live value the key declares
	// instead of the measured one ("load1" for resources.load1), or "".
	Overrides string
}

// Keys describes every key of the properties file, in file order.
func Keys() []KeyDoc {
	out := make([]KeyDoc, len(table))
	for i, k := range table {
		out[i] = KeyDoc{Path: k.path, Default: k.def, Settable: k.settable, Doc: k.doc, Overrides: k.overrides}
	}
	return out
}

// describe names the TOML type of a decoded value, with the value if short.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return "string " + text.QuoteShort(x)
	case int64:
		return "integer " + strconv.FormatInt(x, 10)
	case float64:
		return "float " + formatFloat(x)
	case bool:
		return "boolean " + strconv.FormatBool(x)
	case time.Time:
		return "a date/time"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	case []map[string]any:
		return "an array of tables"
	}
	return fmt.Sprintf("a value of type %T", v)
}

// stringArray renders strings as a TOML array, one element a line if
// there are several.
func stringArray(ss []string) string {
	switch len(ss) {
	case 0:
		return "[]"
	case 1:
		return "[" + quoteTOML(ss[0]) + "]"
	}
	var b strings.Builder
	b.WriteString("[\n")
	for _, s := range ss {
		b.WriteString("  " + quoteTOML(s) + ",\n")
	}
	return b.String() + "]"
}

// renderValue renders an attribute value: string, int64, float64, bool or
// []any of those from Parse; other Go values (a Config made in code) as
// the nearest TOML value, or as a string if there is none.
func renderValue(v reflect.Value, top bool) string {
	switch v.Kind() {
	case reflect.String:
		return quoteTOML(v.String())
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if v.Uint() <= math.MaxInt64 {
			return strconv.FormatUint(v.Uint(), 10)
		}
		return quoteTOML(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		return formatFloat(v.Float())
	case reflect.Interface:
		if !v.IsNil() {
			return renderValue(v.Elem(), top)
		}
	case reflect.Slice, reflect.Array:
		if top {
			parts := make([]string, v.Len())
			for i := range parts {
				parts[i] = renderValue(v.Index(i), false)
			}
			return "[" + strings.Join(parts, ", ") + "]"
		}
	}
	if !v.IsValid() {
		return `""`
	}
	return quoteTOML(fmt.Sprint(v.Interface()))
}

// formatFloat renders f as a TOML float that parses back to f.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// renderKey renders k as a TOML key: bare if it can be, else quoted.
func renderKey(k string) string {
	if k == "" || strings.IndexFunc(k, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}) >= 0 {
		return quoteTOML(k)
	}
	return k
}

// quoteTOML renders s as a TOML basic string.
func quoteTOML(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch r {
		case '"', '\\':
			b.WriteString(`\` + string(r))
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
