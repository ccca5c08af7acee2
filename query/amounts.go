package query

import (
	"fmt"
	"strings"

	"github.com/gridmgr/gridmgr/wire"
)

// Need is what a request claims, as the requirement that a manager has it
// free: the one builder of "cpus_free >= 2 && mem_free >= 4294967296 &&
// tokens["gpus"] >= 1" for every caller (the CLI's reserve, the client
// library, the simulator), so that they write the same text.
type Need struct {
	CPUs int64 // cpus_free >= CPUs
	Mem  int64 // mem_free >= Mem, in bytes
	// Tokens are counted tokens, tokens["KIND"] >= N each, in this order.
	Tokens []*wire.Amount
	// Zeros writes the cpus and mem terms even when they are zero (the
	// simulator's form, whose byte counts are part of its figures);
	// otherwise a zero amount has no term.
	Zeros bool
}

// Requirement is the requirement text: the terms joined by " && ", cpus
// first, then mem, then the tokens; "true" when there is none.
func (n Need) Requirement() string {
	var terms []string
	if n.CPUs != 0 || n.Zeros {
		terms = append(terms, fmt.Sprintf("cpus_free >= %d", n.CPUs))
	}
	if n.Mem != 0 || n.Zeros {
		terms = append(terms, fmt.Sprintf("mem_free >= %d", n.Mem))
	}
	for _, a := range n.Tokens {
		terms = append(terms, fmt.Sprintf("tokens[%q] >= %d", a.Kind, a.N))
	}
	if len(terms) == 0 {
		return "true"
	}
	return strings.Join(terms, " && ")
}

// And is expr and the need: "(expr) && " + Requirement(), or just the
// Requirement when expr is "".
func (n Need) And(expr string) string {
	if expr == "" {
		return n.Requirement()
	}
	return "(" + expr + ") && " + n.Requirement()
}
