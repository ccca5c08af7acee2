package tomlpos

import (
	"encoding"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	"github.com/gridmgr/gridmgr/internal/text"
)

// MaxErrors bounds the problems DecodeAll reports (a hostile file could
// have thousands).
const MaxErrors = 100

// DecodeAll is Decode that does not stop at the first value it cannot
// take: every value of the wrong type and every key v has no field for
// is reported, each as FILE:LINE: KEY: what is wrong, and everything else
// is decoded into v, a pointer to a struct whose fields have toml tags
// (structs, lists of structs, and any other type toml decodes). A syntax
// error still stops it — what follows cannot be read — and says so.
//
// Keys are written as checks made afterwards should write them: dotted,
// with a 1-based index for an entry of a list of tables
// ("operation[2].name"). Failed holds the keys whose value was not
// decoded (wrong type), and the key an unknown key was probably meant to
// be when that key is not there ("command" for "comand"): checks made
// afterwards should not report what is missing or wrong there again.
func DecodeAll(file string, data []byte, limit int, v any) (doc *Doc, errs Errors, failed map[string]bool) {
	if len(data) > limit {
		return nil, Errors{{File: file, Msg: fmt.Sprintf("file is too large (%d bytes); the limit is %d", len(data), limit)}}, nil
	}
	if !utf8.Valid(data) {
		return nil, Errors{{File: file, Msg: "file is not UTF-8 text"}}, nil
	}
	src := strings.TrimPrefix(string(data), "\ufeff")
	var top map[string]toml.Primitive
	md, err := toml.Decode(src, &top)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			line := pe.Position.Line
			if at := pe.Position.Start; at > 0 && at <= len(src) {
				// toml counts a line's newline as the next line's.
				line = 1 + strings.Count(src[:at], "\n")
			}
			return nil, Errors{{File: file, Line: line, Msg: "invalid TOML: " + pe.Message +
				" (the rest of the file cannot be read until this is fixed, so nothing else was checked)"}}, nil
		}
		return nil, Errors{{File: file, Msg: strings.TrimPrefix(err.Error(), "toml: ")}}, nil
	}
	d := &decoder{file: file, md: &md, doc: New(src), failed: map[string]bool{}}
	d.table(top, reflect.ValueOf(v).Elem(), "", "", 0, false)
	slices.SortStableFunc(d.errs, func(a, b *Error) int { return a.Line - b.Line })
	return d.doc, d.errs, d.failed
}

type decoder struct {
	file   string
	md     *toml.MetaData
	doc    *Doc
	errs   Errors
	failed map[string]bool
}

func (d *decoder) add(line int, key, format string, args ...any) {
	if len(d.errs) < MaxErrors {
		d.errs = append(d.errs, &Error{File: d.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
	}
}

// table decodes the keys of one table into the struct rv. key is the
// table's key as errors name it ("operation[2]"), name its dotted name in
// the document ("operation"), start the line its keys follow. header
// says start is the table's own [[name]] header: toml's lines for its
// keys are those of the last table of the list, so lines are found from
// the header instead.
func (d *decoder) table(keys map[string]toml.Primitive, rv reflect.Value, key, name string, start int, header bool) {
	fields := map[string][]int{}
	var names []string
	var collect func(t reflect.Type, index []int)
	collect = func(t reflect.Type, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			at := append(slices.Clone(index), i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("toml") == "" {
				collect(f.Type, at) // an embedded struct's keys are the table's own
				continue
			}
			tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if tag != "" && tag != "-" {
				fields[tag] = at
				names = append(names, tag)
			}
		}
	}
	collect(rv.Type(), nil)
	// Sorted, so that the errors come in the same order every time (they
	// are sorted by line at the end).
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		i, ok := fields[k]
		if !ok {
			if len(d.errs) >= MaxErrors {
				continue // finding its line costs a scan of the file
			}
			best := text.Closest(k, names, 2)
			hint := ""
			if best != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", best)
				if _, there := keys[best]; !there {
					d.failed[join(key, best)] = true
				}
			}
			line := d.doc.Table(join(name, k))
			if line == 0 {
				line = d.doc.Key(start, k)
			}
			d.add(line, join(key, k), "unknown key%s", hint)
			continue
		}
		d.value(keys[k], rv.FieldByIndex(i), join(key, k), join(name, k), start, header)
	}
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// value decodes one key's value into rv.
func (d *decoder) value(p toml.Primitive, rv reflect.Value, key, name string, start int, header bool) {
	t := rv.Type()
	isText := reflect.PointerTo(t).Implements(textUnmarshaler)
	// What was written, to say what it is when it is not what t takes
	// (toml decodes a value that is not a table into a map as nothing).
	var raw any
	if err := d.md.PrimitiveDecode(p, &raw); err != nil {
		d.fail(err, nil, key, t, start, header)
		return
	}
	switch kind := kindOf(raw); {
	case isText:
	case (t.Kind() == reflect.Struct || t.Kind() == reflect.Map) && kind != "table",
		t.Kind() == reflect.Slice && kind != "list":
		d.failed[key] = true
		if len(d.errs) < MaxErrors {
			d.add(d.lineOf(key, name, start), key, "want %s, not %s", wanted(t), found(raw))
		}
		return
	}
	switch {
	case t.Kind() == reflect.Struct && !isText:
		var keys map[string]toml.Primitive
		if err := d.md.PrimitiveDecode(p, &keys); err != nil {
			d.fail(err, raw, key, t, start, header)
			return
		}
		line := d.doc.Table(name)
		if line == 0 {
			line = d.doc.Key(start, lastKey(name))
		}
		d.table(keys, rv, key, name, line, header)
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.Struct && !reflect.PointerTo(t.Elem()).Implements(textUnmarshaler):
		// a table of tables, each [name.KEY] or KEY = { … }
		var keys map[string]toml.Primitive
		if err := d.md.PrimitiveDecode(p, &keys); err != nil {
			d.fail(err, raw, key, t, start, header)
			return
		}
		rv.Set(reflect.MakeMapWithSize(t, len(keys)))
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			ev := reflect.New(t.Elem()).Elem()
			d.value(keys[k], ev, join(key, k), join(name, k), start, header)
			rv.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), ev)
		}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct && !reflect.PointerTo(t.Elem()).Implements(textUnmarshaler):
		var elems []toml.Primitive
		if err := d.md.PrimitiveDecode(p, &elems); err != nil {
			d.fail(err, raw, key, t, start, header)
			return
		}
		rv.Set(reflect.MakeSlice(t, len(elems), len(elems)))
		headers := d.doc.Array(name)
		for i, e := range elems {
			if len(headers) == len(elems) { // [[name]] tables
				d.value(e, rv.Index(i), fmt.Sprintf("%s[%d]", key, i+1), name, headers[i], true)
			} else { // an inline list
				d.value(e, rv.Index(i), fmt.Sprintf("%s[%d]", key, i+1), name, d.doc.Key(start, lastKey(name)), header)
			}
		}
	default:
		if err := d.md.PrimitiveDecode(p, rv.Addr().Interface()); err != nil {
			rv.Set(reflect.Zero(t))
			d.fail(err, raw, key, t, start, header)
		}
	}
}

// lineOf is the line of key's value (name in the document), found from
// start, or its table's header.
func (d *decoder) lineOf(key, name string, start int) int {
	if line := d.doc.Key(start, lastKey(strings.TrimRight(key, "]0123456789["))); line != start || start != 0 {
		return line
	}
	if line := d.doc.Table(name); line > 0 {
		return line
	}
	if lines := d.doc.Array(name); len(lines) > 0 {
		return lines[0]
	}
	return start
}

// badType is toml's account of a value of the wrong type.
var badType = regexp.MustCompile(`^toml: (?:line (\d+) )?(?:\(last key "[^"]*"\): )?incompatible types: TOML value has type (\S+); destination has type .*$`)

// fail reports a value (raw) that t could not take, with what was
// wanted. Its line is toml's, unless header says start is where to look
// from.
func (d *decoder) fail(err error, raw any, key string, t reflect.Type, start int, header bool) {
	d.failed[key] = true
	if len(d.errs) >= MaxErrors {
		return
	}
	line := d.lineOf(key, "", start)
	var pe toml.ParseError
	if errors.As(err, &pe) { // a value its type's UnmarshalText refused, or out of range
		if pe.Position.Line > 0 && !header {
			line = pe.Position.Line
		}
		d.add(line, key, "%s", pe.Message)
		return
	}
	m := badType.FindStringSubmatch(err.Error())
	if m == nil {
		d.add(line, key, "%s", strings.TrimPrefix(err.Error(), "toml: "))
		return
	}
	if n, _ := strconv.Atoi(m[1]); n > 0 && !header {
		line = n
	}
	if k := kindOf(raw); k == "list" || k == "table" {
		// A list or table, as wanted: one of its entries is not.
		d.add(line, key, "want %s; an entry is %s", wanted(t), foundType(m[2]))
		return
	}
	d.add(line, key, "want %s, not %s", wanted(t), found(raw))
}

// kindOf is "list", "table" or "" (a single value) for a value toml decoded.
func kindOf(raw any) string {
	switch raw.(type) {
	case []any, []map[string]any:
		return "list"
	case map[string]any:
		return "table"
	}
	return ""
}

// wanted says in words what a value of type t is written as.
func wanted(t reflect.Type) string {
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		return "a string"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string (in quotes)"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map:
		if t.Elem().Kind() == reflect.String {
			return "a table of strings"
		}
		return "a table"
	case reflect.Struct:
		return "a table"
	case reflect.Slice:
		switch e := t.Elem(); {
		case e.Kind() == reflect.String:
			return `a list of strings, e.g. ["a", "b"]`
		case e.Kind() == reflect.Slice && e.Elem().Kind() == reflect.String:
			return `a list of commands, each a list of words, e.g. [["bin/setup", "-v"]]`
		case e.Kind() == reflect.Struct:
			return "a list of tables"
		}
		return "a list"
	}
	return t.String()
}

// found says in words what a value toml decoded is.
func found(raw any) string { return foundType(fmt.Sprintf("%T", raw)) }

// foundType says in words what toml found, from the Go type it decoded
// it as.
func foundType(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case goType == "int64":
		return "a whole number"
	case goType == "float64":
		return "a number"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["):
		return "a table"
	case strings.Contains(goType, "time.") || strings.Contains(goType, "toml.Local"):
		return "a date or time"
	}
	return goType
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

func lastKey(dotted string) string {
	return dotted[strings.LastIndexByte(dotted, '.')+1:]
}
