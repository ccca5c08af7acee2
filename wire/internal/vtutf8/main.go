package main

import (
	"bytes"
	"fmt"
	"go/format"
	"os"
	"regexp"
	"strings"
)

const marker = "// Rewritten by wire/internal/vtutf8 to refuse what protobuf-go refuses: strings that are not UTF-8, varints over 64 bits, field numbers over 2^29-1; unknown fields are read by protowire; -0 is encoded as protobuf-go encodes it."

var (
	funcRE   = regexp.MustCompile(`^func \(m \*(\w+)\) UnmarshalVT\(dAtA \[\]byte\) error \{$`)
	fieldRE  = regexp.MustCompile(`return fmt\.Errorf\("proto: wrong wireType = %d for field (\w+)", wireType\)`)
	stringRE = regexp.MustCompile(`^(\s*)(.*)\bstring\(dAtA\[iNdEx:(post\w*)\]\)(.*)$`)
	importRE = regexp.MustCompile(`^import \($`)
	tagRE    = regexp.MustCompile(`^(\s*)fieldNum := int32\(wire >> 3\)$`)
	methodRE = regexp.MustCompile(`^func \(m \*(\w+)\) `)
	floatRE  = regexp.MustCompile(`math\.Float(?:64|32)bits\(float(?:64|32)\(m\.(\w+)\)\)`)
	zeroRE   = regexp.MustCompile(`^(\s*)if m\.(\w+) != 0 \{$`)
	varintRE = regexp.MustCompile(`^(\s*)[\w.]+ \|= [\w.]+\(b&0x7F\) << shift$`)
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: vtutf8 FILE_vtproto.pb.go")
		os.Exit(2)
	}
	path := os.Args[1]
	src, err := os.ReadFile(path)
	if err == nil {
		src, err = rewrite(src)
	}
	if err == nil {
		err = os.WriteFile(path, src, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "vtutf8: %s: %v\n", path, err)
		os.Exit(1)
	}
}

func rewrite(src []byte) ([]byte, error) {
	if bytes.Contains(src, []byte(marker)) {
		return nil, fmt.Errorf("already has the UTF-8 checks; run protoc first")
	}
	lines := strings.Split(string(src), "\n")
	// The floating-point fields, by message: their encoding is what names
	// them (math.Float64bits(float64(m.X))).
	floats, fn := map[string]bool{}, ""
	for _, line := range lines {
		if m := methodRE.FindStringSubmatch(line); m != nil {
			fn = m[1]
		}
		if m := floatRE.FindStringSubmatch(line); m != nil && fn != "" {
			floats[fn+"."+m[1]] = true
		}
	}
	var out []string
	msg, field, checks, varints, skips, tags, zeros, imported := "", "", 0, 0, 0, 0, 0, false
	for i, line := range lines {
		if m := funcRE.FindStringSubmatch(line); m != nil {
			msg, field = m[1], ""
		} else if strings.HasPrefix(line, "func ") {
			msg, field = "", ""
		}
		if m := methodRE.FindStringSubmatch(line); m != nil {
			fn = m[1]
		}
		if m := zeroRE.FindStringSubmatch(line); m != nil && floats[fn+"."+m[2]] {
			line = m[1] + "if m." + m[2] + " != 0 || math.Signbit(float64(m." + m[2] + ")) {"
			zeros++
		}
		if m := fieldRE.FindStringSubmatch(line); m != nil {
			field = m[1]
		}
		if !imported && importRE.MatchString(line) {
			out = append(out, marker, line, "\t\"unicode/utf8\"")
			imported = true
			continue
		}
		if m := stringRE.FindStringSubmatch(line); m != nil {
			if msg == "" || field == "" {
				return nil, fmt.Errorf("line %d: a string outside a named field of an UnmarshalVT: %s", i+1, strings.TrimSpace(line))
			}
			ind := m[1]
			out = append(out,
				ind+"if !utf8.Valid(dAtA[iNdEx:"+m[3]+"]) {",
				ind+"\treturn fmt.Errorf(\"%w: field "+msg+"."+field+"\", ErrInvalidUTF8)",
				ind+"}")
			checks++
		}
		if strings.Contains(line, "protohelpers.Skip(") {
			line = strings.ReplaceAll(line, "protohelpers.Skip(", "skipField(")
			skips++
		}
		out = append(out, line)
		if m := tagRE.FindStringSubmatch(line); m != nil {
			out = append(out,
				m[1]+"if wire>>3 > maxFieldNumber {",
				m[1]+"\treturn fmt.Errorf(\"proto: field number %d out of range\", wire>>3)",
				m[1]+"}")
			tags++
		}
		if m := varintRE.FindStringSubmatch(line); m != nil {
			out = append(out,
				m[1]+"if shift == 63 && b > 1 {",
				m[1]+"\treturn protohelpers.ErrIntOverflow",
				m[1]+"}")
			varints++
		}
	}
	if !imported {
		return nil, fmt.Errorf("no import block")
	}
	if checks == 0 || varints == 0 || skips == 0 || tags == 0 {
		return nil, fmt.Errorf("found %d strings, %d varints, %d tags and %d skips of unknown fields, expected some of each: is this protoc-gen-go-vtproto's output?", checks, varints, tags, skips)
	}
	if zeros != 2*len(floats) { // one test where it is sized, one where it is encoded
		return nil, fmt.Errorf("found %d floating-point fields and %d tests for their zero, expected two each", len(floats), zeros)
	}
	res, err := format.Source([]byte(strings.Join(out, "\n")))
	if err != nil {
		return nil, fmt.Errorf("the rewritten file does not parse: %v", err)
	}
	fmt.Fprintf(os.Stderr, "vtutf8: %d strings checked, %d varints and %d tags bounded, %d skips replaced, %d floating-point fields keep -0\n", checks, varints, tags, skips, len(floats))
	return res, nil
}
