package wire_test

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gridmgr/gridmgr/wire"
)

// randomEnvelope fills an Envelope with random values by reflection: each
// field set or not, every kind of field (lists, maps, enums including
// numbers no enum names, strings with multibyte runes, nested messages to
// depth 4), and one body of the oneof, so that the generated code of
// every message type meets protobuf-go's.
func randomEnvelope(r *rand.Rand) *wire.Envelope {
	env := new(wire.Envelope)
	fillMessage(env.ProtoReflect(), r, 0)
	return env
}

func fillMessage(m protoreflect.Message, r *rand.Rand, depth int) {
	fds := m.Descriptor().Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			continue
		}
		if r.IntN(3) == 0 {
			continue
		}
		fillField(m, fd, r, depth)
	}
	ods := m.Descriptor().Oneofs()
	for i := 0; i < ods.Len(); i++ {
		od := ods.Get(i)
		if od.IsSynthetic() || r.IntN(8) == 0 {
			continue
		}
		fillField(m, od.Fields().Get(r.IntN(od.Fields().Len())), r, depth)
	}
}

func fillField(m protoreflect.Message, fd protoreflect.FieldDescriptor, r *rand.Rand, depth int) {
	isMsg := fd.Message() != nil && !fd.IsMap()
	if (isMsg || fd.IsMap() && fd.MapValue().Message() != nil) && depth >= 4 {
		return
	}
	switch {
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		for n := r.IntN(4); n > 0; n-- {
			k := scalar(fd.MapKey(), r).MapKey()
			if vd := fd.MapValue(); vd.Message() != nil {
				v := mp.NewValue()
				fillMessage(v.Message(), r, depth+1)
				mp.Set(k, v)
			} else {
				mp.Set(k, scalar(vd, r))
			}
		}
	case fd.IsList():
		l := m.Mutable(fd).List()
		for n := r.IntN(4); n > 0; n-- {
			if isMsg {
				v := l.NewElement()
				fillMessage(v.Message(), r, depth+1)
				l.Append(v)
			} else {
				l.Append(scalar(fd, r))
			}
		}
	case isMsg:
		fillMessage(m.Mutable(fd).Message(), r, depth+1)
	default:
		m.Set(fd, scalar(fd, r))
	}
}

func scalar(fd protoreflect.FieldDescriptor, r *rand.Rand) protoreflect.Value {
	big := func() int64 { return int64(r.Uint64()) >> r.IntN(64) }
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 0)
	case protoreflect.EnumKind:
		if vs := fd.Enum().Values(); r.IntN(4) != 0 {
			return protoreflect.ValueOfEnum(vs.Get(r.IntN(vs.Len())).Number())
		}
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(int32(big())))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(big()))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(big())
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(big()))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(big()))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(r.NormFloat64() * 1e3))
	case protoreflect.DoubleKind:
		// math.Copysign: a Go constant -0.0 is +0.
		return protoreflect.ValueOfFloat64([]float64{r.NormFloat64(), math.Inf(1), math.Copysign(0, -1), 1e300}[r.IntN(4)])
	case protoreflect.StringKind:
		return protoreflect.ValueOfString([]string{"", "gm152", "héllo wörld ✓", strings.Repeat("x", r.IntN(300)), "12D3KooWGrJ7sYh6wP1p2mXJXzZ8s4fRrW1b5vYd2c3xQk9TnF6E"}[r.IntN(5)])
	case protoreflect.BytesKind:
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return protoreflect.ValueOfBytes(b)
	}
	panic("kind " + fd.Kind().String())
}

// checkSame decodes data with protobuf-go and with wire.UnmarshalEnvelope
// and fails unless both accept it and agree, or both refuse it (the
// generated decoder may also refuse a known field of the wrong wire type,
// which protobuf-go keeps as unknown). It returns the decoded envelope.
func checkSame(t *testing.T, data []byte) *wire.Envelope {
	t.Helper()
	pb, vt := new(wire.Envelope), new(wire.Envelope)
	perr := proto.Unmarshal(data, pb)
	verr := wire.UnmarshalEnvelope(data, vt)
	switch {
	case perr != nil && verr != nil:
		return nil
	case perr != nil:
		t.Fatalf("protobuf-go refuses (%v) what UnmarshalEnvelope accepts: %x", perr, data)
	case verr != nil:
		if !strings.Contains(verr.Error(), "wrong wireType") {
			t.Fatalf("UnmarshalEnvelope refuses (%v) what protobuf-go accepts: %x", verr, data)
		}
		return nil
	}
	if !proto.Equal(pb, vt) && !proto.Equal(pb, normalized(t, vt)) {
		t.Fatalf("decoded differently:\nprotobuf-go %v\nvtproto     %v", pb, vt)
	}
	return vt
}

// normalized is env read back by protobuf-go from its own encoding. The
// generated decoder keeps an unknown field's bytes as they came, where
// protobuf-go rewrites a tag sent in more bytes than it needs
// ("\xd9\xf6\x00" for "\xd9\x76"): the same field, which proto.Equal
// compares byte for byte.
func normalized(t *testing.T, env *wire.Envelope) *wire.Envelope {
	data, err := proto.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	out := new(wire.Envelope)
	if err := proto.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkEncode encodes env with AppendFrame and checks the frame: its
// length prefix, the size protobuf-go gives, and that both decoders read
// back env.
func checkEncode(t *testing.T, env *wire.Envelope) {
	t.Helper()
	prefix := []byte("before")
	n := env.SizeVT()
	frame, err := wire.AppendFrame(append([]byte(nil), prefix...), env, n)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(frame, prefix) {
		t.Fatal("AppendFrame changed what was in the buffer")
	}
	if want := proto.Size(env); n != want {
		t.Fatalf("SizeVT %d, protobuf-go's size %d", n, want)
	}
	l, k := protowire.ConsumeVarint(frame[len(prefix):])
	body := frame[len(prefix)+k:]
	if k < 0 || int(l) != n || len(body) != n {
		t.Fatalf("frame prefix says %d, body is %d, size %d", l, len(body), n)
	}
	back := checkSame(t, body)
	if back == nil {
		// The one difference UnmarshalEnvelope documents: a known field
		// with the wrong wire type. protobuf-go keeps it as an unknown
		// field, and so does UnmarshalEnvelope when a body that can nest
		// sends the whole frame to protobuf-go. Once that body is gone
		// (a later body of the oneof replaced it), the generated decoder
		// reads the frame and refuses the field.
		pb := new(wire.Envelope)
		if err := proto.Unmarshal(body, pb); err != nil || !proto.Equal(pb, env) {
			t.Fatalf("protobuf-go reads back %v (%v), want %v", pb, err, env)
		}
		err := wire.UnmarshalEnvelope(body, new(wire.Envelope))
		if err == nil || !strings.Contains(err.Error(), "wrong wireType") {
			t.Fatalf("read back refused (%v), not for a field's wire type: %x", err, body)
		}
		return
	}
	if !proto.Equal(back, env) {
		t.Fatalf("read back %v, want %v", back, env)
	}
}

// TestCodecMatchesProtobufGo: random envelopes of every body type are
// encoded by both encoders and decoded by both decoders, with the same
// results; their bytes cut short at every length are refused by both or
// accepted by both alike.
func TestCodecMatchesProtobufGo(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 4))
	bodies := map[string]bool{}
	for i := 0; i < 3000; i++ {
		env := randomEnvelope(r)
		if b := env.ProtoReflect().WhichOneof(env.ProtoReflect().Descriptor().Oneofs().ByName("body")); b != nil {
			bodies[string(b.Name())] = true
		}
		checkEncode(t, env)
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		checkSame(t, data)
		if i%10 == 0 {
			for cut := 0; cut < len(data); cut += 1 + len(data)/50 {
				checkSame(t, data[:cut])
			}
		}
	}
	if n := (&wire.Envelope{}).ProtoReflect().Descriptor().Oneofs().ByName("body").Fields().Len(); len(bodies) != n {
		t.Errorf("only %d of the %d bodies were tried", len(bodies), n)
	}
}

// utf8Case is an envelope holding s in one string field: the field as
// the generated decoder names it (Go's name) and as wire.InvalidUTF8 does
// (the .proto's).
type utf8Case struct {
	env           *wire.Envelope
	decoder, name string
}

// utf8Cases puts s at the top, in a list of nested messages, in a list of
// strings, in a map's key and in a map's value.
func utf8Cases(s string) []utf8Case {
	return []utf8Case{
		{&wire.Envelope{TraceId: s}, "Envelope.TraceId", "Envelope.trace_id"},
		{&wire.Envelope{Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: s}}}, "Goodbye.Reason", "Goodbye.reason"},
		{&wire.Envelope{Body: &wire.Envelope_QueryReply{QueryReply: &wire.QueryReply{Offers: []*wire.Offer{{Name: "a"}, {Peer: s}}}}}, "Offer.Peer", "Offer.peer"},
		{&wire.Envelope{Body: &wire.Envelope_QueryReply{QueryReply: &wire.QueryReply{Offers: []*wire.Offer{{Addrs: []string{"x", s}}}}}}, "Offer.Addrs", "Offer.addrs"},
		{&wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{Attrs: map[string]string{s: "v"}}}}, "QueryRequest.Attrs", "QueryRequest.attrs"},
		{&wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{Requirement: "ok", Attrs: map[string]string{"k": s}}}}, "QueryRequest.Attrs", "QueryRequest.attrs"},
	}
}

// TestCodecRefusesInvalidUTF8: a string field holding bytes that are not
// UTF-8 is refused, with the message and the field named, wherever it is
// (utf8Cases).
func TestCodecRefusesInvalidUTF8(t *testing.T) {
	const mark = "MARK-MARK"
	for _, c := range utf8Cases(mark) {
		data, err := proto.Marshal(c.env)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(data, []byte(mark))
		bad := bytes.Clone(data)
		copy(bad[i:], "MARK\xffMARK")
		if err := proto.Unmarshal(bad, new(wire.Envelope)); err == nil {
			t.Fatalf("%s: protobuf-go takes it: the test is wrong", c.decoder)
		}
		err = wire.UnmarshalEnvelope(bad, new(wire.Envelope))
		if !errors.Is(err, wire.ErrInvalidUTF8) || !strings.Contains(err.Error(), "field "+c.decoder) {
			t.Errorf("%s: %v", c.decoder, err)
		}
		if err := wire.UnmarshalEnvelope(data, new(wire.Envelope)); err != nil {
			t.Errorf("%s: the valid frame: %v", c.decoder, err)
		}
	}
}

// TestInvalidUTF8Names: the string a client's encoder refuses is named
// wherever it is (utf8Cases); a message without one names nothing.
func TestInvalidUTF8Names(t *testing.T) {
	cases := append(utf8Cases("x\xffy"), utf8Case{env: &wire.Envelope{Body: &wire.Envelope_QueryRequest{QueryRequest: &wire.QueryRequest{Requirement: "héllo", Attrs: map[string]string{"k": "v"}}}}})
	for _, c := range cases {
		if got := wire.InvalidUTF8(c.env); got != c.name {
			t.Errorf("%v: named %q, want %q", c.env, got, c.name)
		}
		if _, err := proto.Marshal(c.env); (err == nil) != (c.name == "") {
			t.Errorf("%v: protobuf-go's encoder says %v", c.env, err)
		}
	}
}

// nestedTree is a TreeReply whose root has depth-1 generations of only
// children below it, in wire form.
func nestedTree(depth int) []byte {
	node := protowire.AppendTag(nil, 2, protowire.BytesType) // TreeNode.name
	node = protowire.AppendString(node, "leaf")
	for i := 1; i < depth; i++ {
		node = protowire.AppendBytes(protowire.AppendTag(nil, 7, protowire.BytesType), node) // children
	}
	reply := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), node) // TreeReply.root
	num := (&wire.Envelope{}).ProtoReflect().Descriptor().Fields().ByName("tree_reply").Number()
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), reply)
}

// TestCodecBoundsNesting: a tree of nodes nested past protobuf-go's limit
// (10,000) is refused as protobuf-go refuses it (the generated decoder
// alone would read it, on a stack as deep as the frame is long: a million
// levels in a 4 MiB frame); a tree nested 2,000 deep is read.
func TestCodecBoundsNesting(t *testing.T) {
	deep := nestedTree(20_000)
	if err := new(wire.Envelope).UnmarshalVT(deep); err != nil {
		t.Fatalf("the generated decoder refuses the deep tree (%v): the test no longer shows the bound", err)
	}
	if err := wire.UnmarshalEnvelope(deep, new(wire.Envelope)); err == nil {
		t.Fatal("a tree 20,000 deep was read")
	}
	env := new(wire.Envelope)
	if err := wire.UnmarshalEnvelope(nestedTree(2000), env); err != nil {
		t.Fatal(err)
	}
	n := 0
	for node := env.GetTreeReply().GetRoot(); node != nil; node = node.GetChildren()[0] {
		if n++; len(node.GetChildren()) == 0 {
			break
		}
	}
	if n != 2000 {
		t.Fatalf("read %d generations, want 2000", n)
	}
}

// FuzzCodec: for any bytes, wire.UnmarshalEnvelope accepts what
// protobuf-go accepts and reads the same envelope, and what it reads
// encodes back to an equal one.
func FuzzCodec(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 40; i++ {
		data, err := proto.Marshal(randomEnvelope(r))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(nestedTree(50))
	f.Fuzz(func(t *testing.T, data []byte) {
		if env := checkSame(t, data); env != nil {
			checkEncode(t, env)
		}
	})
}

// queryReply is the answer a manager with three managers below it sends
// up a whole-grid query: three offers as a query carries them.
func queryReply() *wire.Envelope {
	var offers []*wire.Offer
	for i := 0; i < 3; i++ {
		offers = append(offers, &wire.Offer{Peer: "12D3KooWGrJ7sYh6wP1p2mXJXzZ8s4fRrW1b5vYd2c3xQk9TnF6E", Name: "gm160",
			Addrs: []string{"/ip4/127.0.0.1/tcp/41234", "/ip6/::1/tcp/41235"}, Cpus: 2, CpusFree: 2, Mem: 24 << 30, MemFree: 20 << 30,
			CpuUtil: 0.1, Hostname: "gm160", Os: "linux", Arch: "amd64", Rank: 2, Ranked: true,
			Matched: []*wire.Attr{{Key: "cpus", Value: "2"}, {Key: "mem_free", Value: "21474836480"}}})
	}
	return &wire.Envelope{ReplyTo: 77, Body: &wire.Envelope_QueryReply{QueryReply: &wire.QueryReply{Offers: offers}}}
}

// BenchmarkCodec decodes and encodes a three-offer query reply with
// protobuf-go and with what the streams use (UnmarshalEnvelope,
// AppendFrame), alternately in one run, and reports each and their
// ratios (< 1: the streams' codec is faster).
//
//	go test -run '^$' -bench Codec -benchtime 200000x ./wire/
func BenchmarkCodec(b *testing.B) {
	env := queryReply()
	data, err := proto.Marshal(env)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 4096)
	var pbDec, vtDec, pbEnc, vtEnc time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := proto.Unmarshal(data, new(wire.Envelope)); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := wire.UnmarshalEnvelope(data, new(wire.Envelope)); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		n := proto.Size(env)
		buf = protowire.AppendVarint(buf[:0], uint64(n))
		if buf, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(buf, env); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		if buf, err = wire.AppendFrame(buf[:0], env, env.SizeVT()); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		pbDec += t1.Sub(t0)
		vtDec += t2.Sub(t1)
		pbEnc += t3.Sub(t2)
		vtEnc += t4.Sub(t3)
	}
	n := float64(b.N)
	b.ReportMetric(float64(pbDec.Nanoseconds())/n, "protobuf-go-decode-ns")
	b.ReportMetric(float64(vtDec.Nanoseconds())/n, "decode-ns")
	b.ReportMetric(float64(pbEnc.Nanoseconds())/n, "protobuf-go-encode-ns")
	b.ReportMetric(float64(vtEnc.Nanoseconds())/n, "encode-ns")
	b.ReportMetric(float64(vtDec)/float64(pbDec), "decode-ratio")
	b.ReportMetric(float64(vtEnc)/float64(pbEnc), "encode-ratio")
}
