package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The --json output of every client command (docs/cli-json.md): the wire
// message the command shows, written by walking its descriptor, so that
// a field added to wire/gridmgr.proto is printed without more code here.
//
//   - keys are the .proto field names (snake_case), in .proto order; every
//     field is present with its zero value when unset (0, "", false, [],
//     {}), except a message field not set, which is null, and the members
//     of a oneof, of which only the one set is present;
//   - integers of every width are JSON numbers (not protojson's strings
//     for 64 bits), times are the wire's unix milliseconds;
//   - an enum is the plain lower-case word the text output uses: the value
//     name without the enum's own prefix (RELATION_STATE_UP: "up",
//     ErrorReply.Code CODE_BAD_REQUEST: "bad_request"); a value this
//     program does not know (a newer manager's) is its number;
//   - doubles are JSON numbers (NaN and infinities, which no field
//     carries, are null), bytes are standard base64, map keys strings,
//     sorted.
//
// Unknown fields (from a newer manager) are not printed.

// plainJSON returns m in the --json shape, compact, on one line.
func plainJSON(m proto.Message) []byte {
	return appendMessage(nil, m.ProtoReflect())
}

// plainJSONIndent returns m in the --json shape, indented by two spaces.
func plainJSONIndent(m proto.Message) []byte {
	compact := plainJSON(m)
	var b bytes.Buffer
	if err := json.Indent(&b, compact, "", "  "); err != nil {
		return compact // plainJSON writes valid JSON: this does not happen
	}
	return b.Bytes()
}

func appendMessage(b []byte, m protoreflect.Message) []byte {
	b = append(b, '{')
	fields := m.Descriptor().Fields()
	n := 0
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.ContainingOneof() != nil && !m.Has(fd) {
			continue // a oneof shows its member that is set, if any
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = appendString(b, string(fd.Name()))
		b = append(b, ':')
		switch {
		case fd.IsList():
			l := m.Get(fd).List()
			b = append(b, '[')
			for j := 0; j < l.Len(); j++ {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendSingular(b, fd, l.Get(j))
			}
			b = append(b, ']')
		case fd.IsMap():
			b = appendMap(b, fd, m.Get(fd).Map())
		case fd.Message() != nil && !m.Has(fd):
			b = append(b, "null"...)
		default:
			b = appendSingular(b, fd, m.Get(fd))
		}
	}
	return append(b, '}')
}

func appendMap(b []byte, fd protoreflect.FieldDescriptor, mp protoreflect.Map) []byte {
	keys := make([]protoreflect.MapKey, 0, mp.Len())
	mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	slices.SortFunc(keys, func(x, y protoreflect.MapKey) int {
		switch x.Interface().(type) {
		case int32, int64:
			return cmpOrdered(x.Int(), y.Int())
		case uint32, uint64:
			return cmpOrdered(x.Uint(), y.Uint())
		case bool:
			return cmpOrdered(boolInt(x.Bool()), boolInt(y.Bool()))
		}
		return strings.Compare(x.String(), y.String())
	})
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k.String())
		b = append(b, ':')
		b = appendSingular(b, fd.MapValue(), mp.Get(k))
	}
	return append(b, '}')
}

func cmpOrdered[T int64 | uint64](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func boolInt(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

// appendSingular writes one value of fd's kind (an element of a list or
// a map's value included).
func appendSingular(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.AppendInt(b, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(b, v.Uint(), 10)
	case protoreflect.FloatKind:
		return appendFloat(b, v.Float(), 32)
	case protoreflect.DoubleKind:
		return appendFloat(b, v.Float(), 64)
	case protoreflect.StringKind:
		return appendString(b, v.String())
	case protoreflect.BytesKind:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v.Bytes())
		return append(b, '"')
	case protoreflect.EnumKind:
		if w, ok := enumWord(fd.Enum(), v.Enum()); ok {
			return appendString(b, w)
		}
		return strconv.AppendInt(b, int64(v.Enum()), 10)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendMessage(b, v.Message())
	}
	panic(fmt.Sprintf("plainJSON: field %s of unknown kind %v", fd.FullName(), fd.Kind()))
}

// appendFloat writes f as encoding/json does (the shortest form that
// reads back the same; exponents only for very small or large values);
// NaN and the infinities, which JSON has no number for, as null.
func appendFloat(b []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		// 1e-07 → 1e-7, as encoding/json writes it.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendString writes s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 as U+FFFD, nothing else (no HTML
// escapes: "a && b" stays readable).
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, "\ufffd"...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// enumWord is the plain word of value n of enum ed: its name without the
// enum's prefix (the enum's name in upper snake case and "_", as the
// protobuf style asks: RelationState's RELATION_STATE_UP is "up"), in
// lower case. ok is false for a number ed does not name.
func enumWord(ed protoreflect.EnumDescriptor, n protoreflect.EnumNumber) (w string, ok bool) {
	vd := ed.Values().ByNumber(n)
	if vd == nil {
		return "", false
	}
	name := string(vd.Name())
	if rest, ok := strings.CutPrefix(name, upperSnake(string(ed.Name()))+"_"); ok && rest != "" {
		name = rest
	}
	return strings.ToLower(name), true
}

// upperSnake is RelationState → RELATION_STATE, HTTPCode → HTTP_CODE.
func upperSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		upper := 'A' <= r && r <= 'Z'
		if upper && i > 0 {
			prev := rune(s[i-1])
			nextLower := i+1 < len(s) && 'a' <= s[i+1] && s[i+1] <= 'z'
			if 'a' <= prev && prev <= 'z' || '0' <= prev && prev <= '9' || ('A' <= prev && prev <= 'Z' && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}
