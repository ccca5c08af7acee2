package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gridmgr/gridmgr/internal/text"
)

// UIDRange is apps.uid_range: the uids First…Last (inclusive), each used
// as a uid and as the gid of the same number.
type UIDRange struct {
	First, Last uint32
}

// Len is how many uids the range holds.
func (r UIDRange) Len() int { return int(r.Last-r.First) + 1 }

func (r UIDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// minAppUID keeps applications off the uids of the system's own users and
// services (Debian gives 0–999 to them, 1000 up to its first user).
const minAppUID = 1000

func (r UIDRange) check() string {
	switch {
	case r.First < minAppUID:
		return fmt.Sprintf("%s starts below %d: applications must not run as the system's own users", r, minAppUID)
	case r.Last < r.First:
		return fmt.Sprintf("%s ends before it starts", r)
	case r.Last >= 1<<31-1:
		return fmt.Sprintf("%s reaches past %d: uids of 2^31 and above are not portable (and 4294967295 is no uid)", r, uint32(1<<31-2))
	case r.Last-r.First < 1:
		return fmt.Sprintf("%s holds one uid: it needs at least two (a reservation's and a class's)", r)
	}
	return ""
}

func parseUIDRange(v any) (UIDRange, string) {
	s, ok := v.(string)
	if !ok {
		return UIDRange{}, `expected a range of uids such as "60600-61099", got ` + describe(v)
	}
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return UIDRange{}, fmt.Sprintf(`%s is not a range of uids: write FIRST-LAST, such as "60600-61099"`, text.QuoteShort(s))
	}
	return UIDRange{First: uint32(first), Last: uint32(last)}, ""
}
