package main

import (
	"strings"
	"testing"
)

// A piece of protoc-gen-go-vtproto's output: a string field, a varint, a
// tag and a skip of an unknown field.
const sample = `package wire

import (
	fmt "fmt"
	protohelpers "github.com/planetscale/vtprotobuf/protohelpers"
)

func (m *Offer) UnmarshalVT(dAtA []byte) error {
	l := len(dAtA)
	iNdEx := 0
	for iNdEx < l {
		preIndex := iNdEx
		var wire uint64
		for shift := uint(0); ; shift += 7 {
			b := dAtA[iNdEx]
			iNdEx++
			wire |= uint64(b&0x7F) << shift
			if b < 0x80 {
				break
			}
		}
		fieldNum := int32(wire >> 3)
		switch fieldNum {
		case 1:
			if wireType != 2 {
				return fmt.Errorf("proto: wrong wireType = %d for field Peer", wireType)
			}
			postIndex := iNdEx
			m.Peer = string(dAtA[iNdEx:postIndex])
		default:
			skippy, err := protohelpers.Skip(dAtA[preIndex:])
			_, _ = skippy, err
		}
	}
	return nil
}

func (m *Offer) MarshalToSizedBufferVT(dAtA []byte) (int, error) {
	i := len(dAtA)
	if m.Rank != 0 {
		i -= 8
		binary.LittleEndian.PutUint64(dAtA[i:], uint64(math.Float64bits(float64(m.Rank))))
	}
	return len(dAtA) - i, nil
}

func (m *Offer) SizeVT() (n int) {
	if m.Rank != 0 {
		n += 9
	}
	if m.Cpus != 0 {
		n += 2
	}
	return n
}
`

func TestRewrite(t *testing.T) {
	out, err := rewrite([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{
		`"unicode/utf8"`,
		"if !utf8.Valid(dAtA[iNdEx:postIndex]) {\n\t\t\t\treturn fmt.Errorf(\"%w: field Offer.Peer\", ErrInvalidUTF8)",
		"if shift == 63 && b > 1 {",
		"if wire>>3 > maxFieldNumber {",
		"skipField(dAtA[preIndex:])",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the output lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "if m.Rank != 0 || math.Signbit(float64(m.Rank)) {"); n != 2 {
		t.Errorf("-0 is tested for in %d places, want the size and the encoding:\n%s", n, got)
	}
	if !strings.Contains(got, "if m.Cpus != 0 {") {
		t.Error("an integer field's test for zero was changed")
	}
	if strings.Contains(got, "protohelpers.Skip") {
		t.Error("protohelpers.Skip is still called")
	}
	if _, err := rewrite(out); err == nil || !strings.Contains(err.Error(), "already") {
		t.Errorf("a second run: %v", err)
	}
	// A string made outside a named field of an UnmarshalVT.
	bad := strings.Replace(sample, "\t\t\tif wireType != 2 {\n\t\t\t\treturn fmt.Errorf(\"proto: wrong wireType = %d for field Peer\", wireType)\n\t\t\t}\n", "", 1)
	if _, err := rewrite([]byte(bad)); err == nil || !strings.Contains(err.Error(), "outside a named field") {
		t.Errorf("a string with no field: %v", err)
	}
	// Output of another generator.
	if _, err := rewrite([]byte("package wire\n\nimport (\n\t\"fmt\"\n)\n")); err == nil || !strings.Contains(err.Error(), "expected some of each") {
		t.Errorf("no vtproto code: %v", err)
	}
}
