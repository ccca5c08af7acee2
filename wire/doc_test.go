package wire_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gridmgr/gridmgr/wire"
)

// docSections reads docs/wire.md and checks that its sections are numbered
// in order (## 1., ## 2., …; ### 5.1, 5.2, … within each), returning the
// text of section 5 and the titles of its subsections by number.
func docSections(t *testing.T) (sec5 string, titles map[int]string) {
	t.Helper()
	b, err := os.ReadFile("../docs/wire.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	titles = map[int]string{}
	top, sub := 0, 0
	start, end := -1, len(doc)
	offset := 0
	h2, h3 := regexp.MustCompile(`^## (\d+)\. `), regexp.MustCompile(`^### (\d+)\.(\d+) (.*)`)
	for line := range strings.SplitAfterSeq(doc, "\n") {
		at := offset
		offset += len(line)
		line = strings.TrimRight(line, "\n")
		if m := h2.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			if n != top+1 {
				t.Errorf("docs/wire.md: %q follows section %d", line, top)
			}
			if top == 5 && end == len(doc) {
				end = at
			}
			top, sub = n, 0
			if n == 5 {
				start = at
			}
			continue
		}
		if m := h3.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			s, _ := strconv.Atoi(m[2])
			if n != top || s != sub+1 {
				t.Errorf("docs/wire.md: %q follows %d.%d", line, top, sub)
			}
			sub = s
			if n == 5 {
				titles[s] = m[3]
			}
		}
	}
	if start < 0 {
		t.Fatal("docs/wire.md has no section 5")
	}
	return doc[start:end], titles
}

// docs/wire.md section 5 is complete against the Envelope's oneof: every
// body is named there with its field number, and every request a client
// may send (NAME_request, reservation_op) has a row in the table of
// requests and replies, pointing to the subsection that describes it.
func TestWireDocNamesEveryBody(t *testing.T) {
	sec5, titles := docSections(t)
	fields := (&wire.Envelope{}).ProtoReflect().Descriptor().Oneofs().ByName("body").Fields()
	byName := map[string]protoreflect.FieldNumber{}
	var names []string // in the .proto's order
	for i := range fields.Len() {
		f := fields.Get(i)
		byName[string(f.Name())] = f.Number()
		names = append(names, string(f.Name()))
	}

	// Every mention "`name` (N)" of a body in section 5 has its number.
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z_]+)`\\s+\\((\\d+)").FindAllStringSubmatch(sec5, -1) {
		num, ok := byName[m[1]]
		if !ok {
			continue
		}
		if m[2] != strconv.Itoa(int(num)) {
			t.Errorf("docs/wire.md section 5 gives %s field %s; the .proto says %d", m[1], m[2], num)
		}
		named[m[1]] = true
	}
	for _, name := range names {
		if !named[name] {
			t.Errorf("docs/wire.md section 5 does not name Envelope body %s (%d)", name, byName[name])
		}
	}

	// The table of requests: | 5.N | `request` (n) | `reply` (n) | what |
	row := regexp.MustCompile("^\\| 5\\.(\\d+) \\| `([a-z_]+)` \\(\\d+\\) \\| `([a-z_]+)` \\(\\d+\\) \\|")
	rows := map[string]bool{}
	for line := range strings.SplitSeq(sec5, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s, _ := strconv.Atoi(m[1])
		req, rep := m[2], m[3]
		rows[req] = true
		for _, b := range []string{req, rep} {
			if _, ok := byName[b]; !ok {
				t.Errorf("docs/wire.md's table names %s, which is not an Envelope body", b)
			}
		}
		// The subsection's title begins with the request's name
		// (reserve_request: "reserve", reservation_op: "reservation_op").
		word := strings.TrimSuffix(req, "_request")
		if title := titles[s]; title != word && !strings.HasPrefix(title, word+":") {
			t.Errorf("docs/wire.md's table sends %s to section 5.%d, titled %q", req, s, title)
		}
	}
	for _, name := range names {
		if (strings.HasSuffix(name, "_request") || name == "reservation_op") && !rows[name] {
			t.Errorf("docs/wire.md's table of requests has no row for %s", name)
		}
	}
}
