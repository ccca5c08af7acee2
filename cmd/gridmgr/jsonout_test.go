package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/gridmgr/gridmgr/wire"
)

// everyKind is a message with a field of every kind plainJSON handles:
// each scalar type, enums (a top-level one, a nested one whose name is an
// acronym, a value without the prefix), a nested message, repeated and
// map fields of scalars, enums and messages, a oneof and a proto3
// optional field.
const everyKind = `
name: "jsontest.proto" package: "jsontest" syntax: "proto3"
enum_type { name: "Color"
  value { name: "COLOR_UNSPECIFIED" number: 0 }
  value { name: "COLOR_DARK_RED" number: 1 }
  value { name: "COLOR_BLUE" number: 2 } }
message_type { name: "Every"
  field { name: "b" number: 1 label: LABEL_OPTIONAL type: TYPE_BOOL }
  field { name: "i32" number: 2 label: LABEL_OPTIONAL type: TYPE_INT32 }
  field { name: "s32" number: 3 label: LABEL_OPTIONAL type: TYPE_SINT32 }
  field { name: "sf32" number: 4 label: LABEL_OPTIONAL type: TYPE_SFIXED32 }
  field { name: "i64" number: 5 label: LABEL_OPTIONAL type: TYPE_INT64 }
  field { name: "s64" number: 6 label: LABEL_OPTIONAL type: TYPE_SINT64 }
  field { name: "sf64" number: 7 label: LABEL_OPTIONAL type: TYPE_SFIXED64 }
  field { name: "u32" number: 8 label: LABEL_OPTIONAL type: TYPE_UINT32 }
  field { name: "f32" number: 9 label: LABEL_OPTIONAL type: TYPE_FIXED32 }
  field { name: "u64" number: 10 label: LABEL_OPTIONAL type: TYPE_UINT64 }
  field { name: "f64" number: 11 label: LABEL_OPTIONAL type: TYPE_FIXED64 }
  field { name: "fl" number: 12 label: LABEL_OPTIONAL type: TYPE_FLOAT }
  field { name: "db" number: 13 label: LABEL_OPTIONAL type: TYPE_DOUBLE }
  field { name: "s" number: 14 label: LABEL_OPTIONAL type: TYPE_STRING }
  field { name: "by" number: 15 label: LABEL_OPTIONAL type: TYPE_BYTES }
  field { name: "color" number: 16 label: LABEL_OPTIONAL type: TYPE_ENUM type_name: ".jsontest.Color" }
  field { name: "code" number: 17 label: LABEL_OPTIONAL type: TYPE_ENUM type_name: ".jsontest.Every.HTTPCode" }
  field { name: "child" number: 18 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".jsontest.Every" }
  field { name: "l_i64" number: 19 label: LABEL_REPEATED type: TYPE_INT64 }
  field { name: "l_color" number: 20 label: LABEL_REPEATED type: TYPE_ENUM type_name: ".jsontest.Color" }
  field { name: "l_child" number: 21 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".jsontest.Every" }
  field { name: "l_by" number: 22 label: LABEL_REPEATED type: TYPE_BYTES }
  field { name: "m_s_i64" number: 23 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".jsontest.Every.MSI64Entry" }
  field { name: "m_i32_s" number: 24 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".jsontest.Every.MI32SEntry" }
  field { name: "m_u64_color" number: 25 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".jsontest.Every.MU64ColorEntry" }
  field { name: "m_b_child" number: 26 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".jsontest.Every.MBChildEntry" }
  field { name: "o_s" number: 27 label: LABEL_OPTIONAL type: TYPE_STRING oneof_index: 0 }
  field { name: "o_child" number: 28 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".jsontest.Every" oneof_index: 0 }
  field { name: "o_u64" number: 29 label: LABEL_OPTIONAL type: TYPE_UINT64 oneof_index: 0 }
  field { name: "opt" number: 30 label: LABEL_OPTIONAL type: TYPE_INT64 oneof_index: 1 proto3_optional: true }
  nested_type { name: "MSI64Entry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_INT64 } }
  nested_type { name: "MI32SEntry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_INT32 }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_STRING } }
  nested_type { name: "MU64ColorEntry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_UINT64 }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_ENUM type_name: ".jsontest.Color" } }
  nested_type { name: "MBChildEntry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_BOOL }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".jsontest.Every" } }
  enum_type { name: "HTTPCode"
    value { name: "HTTP_CODE_UNSPECIFIED" number: 0 }
    value { name: "HTTP_CODE_NOT_FOUND" number: 1 }
    value { name: "TEAPOT" number: 2 } }
  oneof_decl { name: "pick" }
  oneof_decl { name: "_opt" } }
`

func everyKindDesc(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	var fdp descriptorpb.FileDescriptorProto
	if err := prototext.Unmarshal([]byte(everyKind), &fdp); err != nil {
		t.Fatal(err)
	}
	fd, err := protodesc.NewFile(&fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().ByName("Every")
}

// newEvery makes a message of md from its text format.
func newEvery(t *testing.T, md protoreflect.MessageDescriptor, text string) *dynamicpb.Message {
	t.Helper()
	m := dynamicpb.NewMessage(md)
	if err := prototext.Unmarshal([]byte(text), m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestJSONConverterEveryKind(t *testing.T) {
	md := everyKindDesc(t)
	for _, c := range []struct{ name, text, want string }{
		{"unset: every field but the oneofs, with its zero value; messages null", ``,
			`{"b":false,"i32":0,"s32":0,"sf32":0,"i64":0,"s64":0,"sf64":0,"u32":0,"f32":0,"u64":0,"f64":0,` +
				`"fl":0,"db":0,"s":"","by":"","color":"unspecified","code":"unspecified","child":null,` +
				`"l_i64":[],"l_color":[],"l_child":[],"l_by":[],"m_s_i64":{},"m_i32_s":{},"m_u64_color":{},"m_b_child":{}}`},
		{"every kind set", `
			b: true i32: -2147483648 s32: -7 sf32: 2147483647
			i64: -9223372036854775808 s64: 9223372036854775807 sf64: -1
			u32: 4294967295 f32: 7 u64: 18446744073709551615 f64: 417
			fl: 0.1 db: 1.5e-7 s: "a \"q\" \\ <&> \n\t\x01 é" by: "\x00\xff\xfe"
			color: COLOR_DARK_RED code: HTTP_CODE_NOT_FOUND child { i64: 1 color: COLOR_BLUE }
			l_i64: [1, -2, 9007199254740993] l_color: [COLOR_BLUE, COLOR_UNSPECIFIED] l_child { u64: 3 } l_child {} l_by: ["hi"]
			m_s_i64 { key: "b" value: 2 } m_s_i64 { key: "a" value: -1 }
			m_i32_s { key: 10 value: "ten" } m_i32_s { key: -3 value: "minus three" } m_i32_s { key: 2 value: "two" }
			m_u64_color { key: 18446744073709551615 value: COLOR_BLUE } m_u64_color { key: 9 value: COLOR_DARK_RED }
			m_b_child { key: true value { s: "t" } } m_b_child { key: false value {} }
			o_child { u32: 1 } opt: 0`,
			`{"b":true,"i32":-2147483648,"s32":-7,"sf32":2147483647,"i64":-9223372036854775808,"s64":9223372036854775807,"sf64":-1,` +
				`"u32":4294967295,"f32":7,"u64":18446744073709551615,"f64":417,"fl":0.1,"db":1.5e-7,` +
				`"s":"a \"q\" \\ <&> \n\t\u0001 é","by":"AP/+","color":"dark_red","code":"not_found",` +
				`"child":{"b":false,"i32":0,"s32":0,"sf32":0,"i64":1,"s64":0,"sf64":0,"u32":0,"f32":0,"u64":0,"f64":0,` +
				`"fl":0,"db":0,"s":"","by":"","color":"blue","code":"unspecified","child":null,` +
				`"l_i64":[],"l_color":[],"l_child":[],"l_by":[],"m_s_i64":{},"m_i32_s":{},"m_u64_color":{},"m_b_child":{}},` +
				`"l_i64":[1,-2,9007199254740993],"l_color":["blue","unspecified"],"l_child":[` + everyZero(`"u64":0`, `"u64":3`) + `,` + everyZero() + `],"l_by":["aGk="],` +
				`"m_s_i64":{"a":-1,"b":2},"m_i32_s":{"-3":"minus three","2":"two","10":"ten"},` +
				`"m_u64_color":{"9":"dark_red","18446744073709551615":"blue"},` +
				`"m_b_child":{"false":` + everyZero() + `,"true":` + everyZero(`"s":""`, `"s":"t"`) + `},` +
				`"o_child":` + everyZero(`"u32":0`, `"u32":1`) + `,"opt":0}`},
		{"a oneof's scalar member; the optional field unset", `o_u64: 5 code: TEAPOT`,
			everyZero(`"code":"unspecified"`, `"code":"teapot"`, `"m_b_child":{}}`, `"m_b_child":{},"o_u64":5}`)},
		{"numbers JSON cannot carry are null; tiny and huge ones in exponent form", `fl: nan db: -inf l_child { db: 1e21 fl: -0 } l_child { db: inf }`,
			everyZero(`"fl":0,"db":0`, `"fl":null,"db":null`, `"l_child":[]`,
				`"l_child":[`+everyZero(`"fl":0,"db":0`, `"fl":-0,"db":1e+21`)+`,`+everyZero(`"db":0`, `"db":null`)+`]`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newEvery(t, md, c.text)
			got := string(plainJSON(m))
			if got != c.want {
				t.Fatalf("got\n%s\nwant\n%s", got, c.want)
			}
			if !json.Valid([]byte(got)) {
				t.Fatalf("not JSON: %s", got)
			}
			checkPlainShape(t, c.name, []byte(got), md)
			if strings.Contains(c.text, "nan") || strings.Contains(c.text, "inf") {
				return // null reads back as 0
			}
			back := dynamicpb.NewMessage(md)
			if err := readPlainJSON([]byte(got), back); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(m, back) {
				t.Fatalf("does not read back the same:\n%v\n%v", prototext.Format(m), prototext.Format(back))
			}
		})
	}

	// A value the enum does not name (a newer peer's) is its number.
	m := dynamicpb.NewMessage(md)
	m.Set(md.Fields().ByName("color"), protoreflect.ValueOfEnum(7))
	if got := string(plainJSON(m)); !strings.Contains(got, `"color":7,`) {
		t.Fatalf("unknown enum value: %s", got)
	}
	// Indented output is the same JSON.
	var a, b any
	if json.Unmarshal(plainJSONIndent(m), &a) != nil || json.Unmarshal(plainJSON(m), &b) != nil || fmt.Sprint(a) != fmt.Sprint(b) ||
		!bytes.HasPrefix(plainJSONIndent(m), []byte("{\n  \"b\": false,\n")) {
		t.Fatalf("indented:\n%s", plainJSONIndent(m))
	}
}

// everyZero is the JSON of an unset Every, with pairs of replacements.
func everyZero(repl ...string) string {
	s := `{"b":false,"i32":0,"s32":0,"sf32":0,"i64":0,"s64":0,"sf64":0,"u32":0,"f32":0,"u64":0,"f64":0,` +
		`"fl":0,"db":0,"s":"","by":"","color":"unspecified","code":"unspecified","child":null,` +
		`"l_i64":[],"l_color":[],"l_child":[],"l_by":[],"m_s_i64":{},"m_i32_s":{},"m_u64_color":{},"m_b_child":{}}`
	for i := 0; i+1 < len(repl); i += 2 {
		s = strings.Replace(s, repl[i], repl[i+1], 1)
	}
	return s
}

func TestJSONEnumWords(t *testing.T) {
	for _, c := range []struct {
		e    protoreflect.Enum
		want string
	}{
		{wire.RelationState_RELATION_STATE_UP, "up"},
		{wire.RelationState_RELATION_STATE_UNSPECIFIED, "unspecified"},
		{wire.Role_ROLE_SUPERIOR, "superior"},
		{wire.ReservationState_RESERVATION_STATE_HELD, "held"},
		{wire.ReservationState_RESERVATION_STATE_COMMITTED, "committed"},
		{wire.EventKind_EVENT_KIND_UTILIZATION, "utilization"},
		{wire.ErrorReply_CODE_BAD_REQUEST, "bad_request"},
		{wire.QueryRequest_DIRECTION_DOWN, "down"},
		{wire.AppRequest_OP_EXEC, "exec"},
	} {
		if got, ok := enumWord(c.e.Descriptor(), c.e.Number()); !ok || got != c.want {
			t.Errorf("%v: %q, want %q", c.e, got, c.want)
		}
	}
	for in, want := range map[string]string{"RelationState": "RELATION_STATE", "Code": "CODE", "HTTPCode": "HTTP_CODE",
		"EventKind": "EVENT_KIND", "V2Thing": "V2_THING", "A": "A"} {
		if got := upperSnake(in); got != want {
			t.Errorf("upperSnake(%s) = %s, want %s", in, got, want)
		}
	}
}

// The wire messages the commands print, filled, come out in the plain
// shape and read back the same.
func TestJSONWireMessages(t *testing.T) {
	for _, m := range []proto.Message{
		&wire.TreeNode{Name: "gm152", State: wire.RelationState_RELATION_STATE_UNSPECIFIED, Children: []*wire.TreeNode{
			{Name: "gm154", State: wire.RelationState_RELATION_STATE_UP, RttUs: 417, LastHeardMsAgo: 12}}},
		&wire.StatusReply{Name: "gm152", UptimeMs: 1 << 40, Relations: []*wire.RelationInfo{{Role: wire.Role_ROLE_INFERIOR, State: wire.RelationState_RELATION_STATE_SUSPECT, RttUs: 9}}},
		&wire.Reservation{Id: "gm160-7-abcdef", State: wire.ReservationState_RESERVATION_STATE_HELD, Amounts: []*wire.Amount{{Kind: "cpus", N: 1}},
			CreatedUnixMs: 1767225600000, ExpiresUnixMs: 1767225660000, LeaseMs: 60000},
		&wire.QueryReply{Offers: []*wire.Offer{{Name: "a", CpuUtil: -1, Mem: 8 << 30, Starts: []*wire.Span{{FromUnixMs: 1, ToUnixMs: 2}}}},
			Visits: []*wire.Visit{{Direction: wire.QueryRequest_DIRECTION_UP}}, Earliest: &wire.Earliest{Found: true, BeginUnixMs: 3}},
		&wire.AdminReply{Ok: false, Code: wire.ErrorReply_CODE_FORBIDDEN, Replies: []*wire.AdminReply{{Name: "x", Ok: true}}},
		&wire.AppReply{Instances: []*wire.AppInstance{{Id: "r.hello", Ports: map[string]uint32{"http": 8080}, Pids: []int32{4, 5}, MemBytes: 3 << 30}}, Data: []byte("out")},
		&wire.Event{Kind: wire.EventKind_EVENT_KIND_RELATION, Seq: 3, TimeUnixMs: 1767225600000,
			Body: &wire.Event_Relation{Relation: &wire.RelationChange{From: wire.RelationState_RELATION_STATE_UP, To: wire.RelationState_RELATION_STATE_DOWN}}},
		&wire.CalendarReply{Kinds: []*wire.KindCalendar{{Kind: "cpus", Capacity: 32, Steps: []*wire.Step{{AtUnixMs: 1767225600000, Used: 4}}}}},
	} {
		md := m.ProtoReflect().Descriptor()
		out := plainJSON(m)
		checkPlainShape(t, string(md.Name()), out, md)
		back := m.ProtoReflect().New().Interface()
		if err := readPlainJSON(out, back); err != nil || !proto.Equal(m, back) {
			t.Fatalf("%s: %v; does not read back the same:\n%s", md.Name(), err, out)
		}
		old, _ := protojson.Marshal(m)
		t.Logf("%s\n  was: %s\n  now: %s", md.Name(), old, out)
	}
}

// readPlainJSON is plainJSON's inverse, for tests: it reads the plain
// shape into m (enum words back to numbers, then protojson).
func readPlainJSON(data []byte, m proto.Message) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return err
	}
	v, err := enumsToNumbers(v, m.ProtoReflect().Descriptor())
	if err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return protojson.Unmarshal(b, m)
}

func enumsToNumbers(v any, md protoreflect.MessageDescriptor) (any, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return v, nil // null
	}
	for k, fv := range obj {
		fd := md.Fields().ByName(protoreflect.Name(k))
		if fd == nil {
			return nil, fmt.Errorf("%s has no field %q", md.FullName(), k)
		}
		one := func(fd protoreflect.FieldDescriptor, x any) (any, error) {
			switch {
			case fd.Enum() != nil:
				w, ok := x.(string)
				if !ok {
					return x, nil
				}
				vals := fd.Enum().Values()
				for i := 0; i < vals.Len(); i++ {
					if got, _ := enumWord(fd.Enum(), vals.Get(i).Number()); got == w {
						return json.Number(fmt.Sprint(int32(vals.Get(i).Number()))), nil
					}
				}
				return nil, fmt.Errorf("%s: %q is not a word of %s", fd.FullName(), w, fd.Enum().FullName())
			case fd.Message() != nil:
				return enumsToNumbers(x, fd.Message())
			}
			return x, nil
		}
		var err error
		switch {
		case fd.IsList():
			l, _ := fv.([]any)
			for i := range l {
				if l[i], err = one(fd, l[i]); err != nil {
					return nil, err
				}
			}
		case fd.IsMap():
			mp, _ := fv.(map[string]any)
			for mk := range mp {
				if mp[mk], err = one(fd.MapValue(), mp[mk]); err != nil {
					return nil, err
				}
			}
		default:
			if obj[k], err = one(fd, fv); err != nil {
				return nil, err
			}
		}
	}
	return obj, nil
}

var (
	screamingEnum = regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$`)
	camelKey      = regexp.MustCompile(`[a-z][A-Z]`)
)

// checkPlainShape fails t unless data is the documented shape of md
// (docs/cli-json.md): every field of md by its .proto name (a oneof's
// member only if set, at most one), no other key; integers as JSON
// integers, doubles as numbers or null, strings, bools, base64 bytes,
// enums one of their words (or a number), messages objects or null, lists
// arrays and maps objects of such values. And nowhere a quoted number, a
// SCREAMING_ENUM or a camelCase key.
func checkPlainShape(t *testing.T, what string, data []byte, md protoreflect.MessageDescriptor) {
	t.Helper()
	if errs := plainShapeErrors(data, md); len(errs) > 0 {
		t.Fatalf("%s: not the documented shape of %s:\n  %s\n%s", what, md.FullName(), strings.Join(errs[:min(len(errs), 20)], "\n  "), data)
	}
}

// plainShapeErrors says how data differs from the shape of md.
func plainShapeErrors(data []byte, md protoreflect.MessageDescriptor) []string {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return []string{fmt.Sprintf("not JSON: %v", err)}
	}
	if _, err := d.Token(); err != io.EOF {
		return []string{"more than one JSON value"}
	}
	var errs []string
	checkMessage(v, md, string(md.Name()), &errs)
	return errs
}

func checkMessage(v any, md protoreflect.MessageDescriptor, path string, errs *[]string) {
	bad := func(format string, args ...any) {
		*errs = append(*errs, path+": "+fmt.Sprintf(format, args...))
	}
	if v == nil {
		return // a message not set
	}
	obj, ok := v.(map[string]any)
	if !ok {
		bad("want an object, got %T %v", v, v)
		return
	}
	for k := range obj {
		if md.Fields().ByName(protoreflect.Name(k)) == nil {
			bad("key %q is no field of %s", k, md.Name())
		}
		if camelKey.MatchString(k) {
			bad("key %q is camelCase", k)
		}
	}
	oneofs := map[protoreflect.Name]int{}
	for i := 0; i < md.Fields().Len(); i++ {
		fd := md.Fields().Get(i)
		fp := path + "." + string(fd.Name())
		fv, present := obj[string(fd.Name())]
		if od := fd.ContainingOneof(); od != nil {
			if present {
				oneofs[od.Name()]++
			}
			if !present {
				continue
			}
		} else if !present {
			bad("field %s missing", fd.Name())
			continue
		}
		switch {
		case fd.IsList():
			l, ok := fv.([]any)
			if !ok {
				bad("%s: want an array, got %T", fd.Name(), fv)
				continue
			}
			for i, x := range l {
				checkValue(x, fd, fmt.Sprintf("%s[%d]", fp, i), errs)
			}
		case fd.IsMap():
			mp, ok := fv.(map[string]any)
			if !ok {
				bad("%s: want an object (a map), got %T", fd.Name(), fv)
				continue
			}
			for k, x := range mp {
				checkValue(x, fd.MapValue(), fmt.Sprintf("%s[%q]", fp, k), errs)
			}
		default:
			checkValue(fv, fd, fp, errs)
		}
	}
	for od, n := range oneofs {
		if n > 1 {
			bad("oneof %s has %d members", od, n)
		}
	}
}

func checkValue(v any, fd protoreflect.FieldDescriptor, path string, errs *[]string) {
	bad := func(format string, args ...any) {
		*errs = append(*errs, path+": "+fmt.Sprintf(format, args...))
	}
	if s, ok := v.(string); ok && fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.BytesKind && fd.Enum() == nil {
		bad("a quoted %s: %q", fd.Kind(), s)
		return
	}
	switch fd.Kind() {
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			bad("want a bool, got %T %v", v, v)
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if n, ok := v.(json.Number); !ok || !regexp.MustCompile(`^-?[0-9]+$`).MatchString(string(n)) {
			bad("want an integer, got %T %v", v, v)
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		if _, ok := v.(json.Number); !ok && v != nil {
			bad("want a number, got %T %v", v, v)
		}
	case protoreflect.StringKind:
		s, ok := v.(string)
		if !ok {
			bad("want a string, got %T %v", v, v)
		} else if screamingEnum.MatchString(s) {
			bad("a SCREAMING_ENUM: %q", s)
		}
	case protoreflect.BytesKind:
		s, ok := v.(string)
		if _, err := base64.StdEncoding.DecodeString(s); !ok || err != nil {
			bad("want base64, got %T %v", v, v)
		}
	case protoreflect.EnumKind:
		if _, ok := v.(json.Number); ok {
			return // a value this program does not know
		}
		s, ok := v.(string)
		if !ok {
			bad("want an enum word, got %T %v", v, v)
			return
		}
		vals := fd.Enum().Values()
		for i := 0; i < vals.Len(); i++ {
			if w, _ := enumWord(fd.Enum(), vals.Get(i).Number()); w == s {
				return
			}
		}
		bad("%q is not a word of %s", s, fd.Enum().Name())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		checkMessage(v, fd.Message(), path, errs)
	}
}
