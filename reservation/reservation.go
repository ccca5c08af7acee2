package reservation

import (
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
)

// Resource kinds every manager offers. Other kinds are counted tokens that
// the properties file declares ("gpus", "licenses.matlab", ...).
const (
	CPUs = "cpus" // whole cpus
	Mem  = "mem"  // bytes of memory
)

// Amount is a quantity of one resource kind.
type Amount struct {
	Kind string `json:"kind"`
	N    int64  `json:"n"`
}

// Holder is who holds a reservation: the client's peer id (authenticated by
// the transport) and the user it states (not authenticated).
type Holder struct {
	Peer string `json:"peer"`
	User string `json:"user,omitempty"`
}

func (h Holder) String() string {
	p := text.ShortPeer(h.Peer)
	if h.User == "" {
		return "peer " + p
	}
	return fmt.Sprintf("user %s (peer %s)", h.User, p)
}

// State of a reservation.
type State uint8

// States. Held and Committed reservations count against capacity; Released
// and Expired are terminal and kept for a while so that retries and late
// releases get a precise answer.
const (
	Held      State = iota + 1 // returned with its number; lapses after the hold timeout
	Committed                  // a lease; lapses unless renewed
	Released                   // released by its holder or an admin
	Expired                    // lapsed: hold timeout or lease end
)

var stateNames = [...]string{"", "held", "committed", "released", "expired"}

func (s State) String() string {
	if int(s) < len(stateNames) && s != 0 {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Live reports whether the state holds resources.
func (s State) Live() bool { return s == Held || s == Committed }

// Op is a mutating operation on an existing reservation.
type Op uint8

// Ops.
const (
	OpCommit Op = iota + 1
	OpRenew
	OpRelease
)

var opNames = [...]string{"", "commit", "renew", "release"}

// Past is the op's past participle, for messages: "committed".
func (o Op) Past() string {
	switch o {
	case OpCommit:
		return "committed"
	case OpRenew:
		return "renewed"
	case OpRelease:
		return "released"
	}
	return o.String()
}

func (o Op) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// OpRecord remembers a mutating request applied to a reservation, so that a
// retry with the same request id gets the same answer.
type OpRecord struct {
	RequestID string    `json:"request_id"`
	Op        Op        `json:"op"`
	State     State     `json:"state"`   // state after the op
	Expires   time.Time `json:"expires"` // expiry after the op
}

// maxOpRecords bounds OpRecords kept per reservation (a renewing holder
// retries only its latest requests).
const maxOpRecords = 8

// Reservation is one booking of amounts at this manager.
type Reservation struct {
	ID        string        `json:"id"`
	Holder    Holder        `json:"holder"`
	Amounts   []Amount      `json:"amounts"` // sorted by kind, each N > 0
	State     State         `json:"state"`
	Created   time.Time     `json:"created"`
	Updated   time.Time     `json:"updated"`
	Expires   time.Time     `json:"expires"`         // hold end, lease end, or when the record goes
	Lease     time.Duration `json:"lease,omitempty"` // lease length of a committed reservation
	RequestID string        `json:"request_id"`      // id of the reserve request
	Group     string        `json:"group,omitempty"` // co-reservation this belongs to
	Reason    string        `json:"reason,omitempty"`
	Ops       []OpRecord    `json:"ops,omitempty"`

	// The reservation's window on the calendar: [Start, End). A lease
	// from now starts at its creation and ends with its lease (commit and
	// renew move the end); a window the client named (Window) keeps it.
	// While live, its amounts count against capacity over the window only.
	Start  time.Time `json:"start,omitzero"`
	End    time.Time `json:"end,omitzero"`
	Window bool      `json:"window,omitempty"`
}

// ActiveAt reports whether r is committed and its window holds t: what
// may run on it then.
func (r *Reservation) ActiveAt(t time.Time) bool {
	return r.State == Committed && !t.Before(r.Start) && t.Before(r.End)
}

// Clone returns a deep copy.
func (r *Reservation) Clone() Reservation {
	c := *r
	c.Amounts = slices.Clone(r.Amounts)
	c.Ops = slices.Clone(r.Ops)
	return c
}

// Amount returns the reserved amount of kind (0 if none).
func (r *Reservation) Amount(kind string) int64 {
	for _, a := range r.Amounts {
		if a.Kind == kind {
			return a.N
		}
	}
	return 0
}

// Change is one record to write: Rec is the new content of reservation ID,
// or nil when the record is to be deleted.
type Change struct {
	ID  string
	Rec *Reservation
}

// Batch is what the ledger changed since it was last asked: records to
// write and the sequence number the next reservation will take. A store
// writes a batch atomically.
type Batch struct {
	Changes []Change
	NextSeq uint64
}

// Empty reports whether the batch has nothing to write.
func (b Batch) Empty() bool { return len(b.Changes) == 0 }

// Snapshot is what a store holds: every record and the next sequence
// number.
type Snapshot struct {
	Records []Reservation
	NextSeq uint64
}

// Store keeps the ledger durable. Write must not return before the batch is
// on stable storage; batches are written in the order they were taken.
// Implementations: boltstore (bbolt in the data dir); tests use an in-memory
// one.
type Store interface {
	Load() (Snapshot, error)
	Write(Batch) error
	Close() error
}

// Code classifies an Error.
type Code uint8

// Error codes.
const (
	CodeBadRequest Code = iota + 1 // malformed: zero amount, unknown kind, TTL out of bounds
	CodeRefused                    // not enough free, access list, drained, ledger full
	CodeForbidden                  // not the holder
	CodeNotFound                   // unknown reservation
	CodeGone                       // released or expired: cannot be committed or renewed
	CodeConflict                   // request id reused for another request; wrong state
)

var codeNames = [...]string{"", "bad request", "refused", "forbidden", "not found", "gone", "conflict"}

func (c Code) String() string {
	if int(c) < len(codeNames) && c != 0 {
		return codeNames[c]
	}
	return "code(" + strconv.Itoa(int(c)) + ")"
}

// Error is a refusal of a ledger operation. The ledger is unchanged by a
// request that failed.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err, 0 if err is not an *Error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// Tag is the short fingerprint of an owner's peer id that reservation
// numbers carry: 6 base32 characters of its SHA-256.
func Tag(peer string) string {
	h := sha256.Sum256([]byte(peer))
	return strings.ToLower(base32.StdEncoding.EncodeToString(h[:])[:6])
}

// FormatID is the reservation number of the seq-th reservation at the
// manager named name whose peer id has tag Tag(peer): "gm154-17-k3f9q2".
// The name says where it lives; the tag tells apart managers that share a
// name; seq never repeats at one manager (it is stored with the ledger).
func FormatID(name string, seq uint64, tag string) string {
	return name + "-" + strconv.FormatUint(seq, 10) + "-" + tag
}

// ParseID splits a reservation number into the owner's name, the sequence
// number and the owner's tag.
func ParseID(id string) (name string, seq uint64, tag string, err error) {
	bad := func(why string) (string, uint64, string, error) {
		return "", 0, "", fmt.Errorf("reservation number %q is malformed: %s (want NAME-SEQ-TAG, e.g. gm154-17-k3f9q2)", id, why)
	}
	if len(id) > MaxIDLen {
		return bad(fmt.Sprintf("%d bytes, limit %d", len(id), MaxIDLen))
	}
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return bad("no '-'")
	}
	tag = id[i+1:]
	j := strings.LastIndexByte(id[:i], '-')
	if j <= 0 {
		return bad("no name")
	}
	if len(tag) != 6 || strings.Trim(tag, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		return bad("tag " + strconv.Quote(tag) + " is not 6 base32 letters")
	}
	seq, perr := strconv.ParseUint(id[j+1:i], 10, 64)
	if perr != nil || seq == 0 {
		return bad("sequence " + strconv.Quote(id[j+1:i]) + " is not a positive number")
	}
	return id[:j], seq, tag, nil
}

// Bounds on what a request may carry.
const (
	MaxIDLen        = 128 // reservation numbers
	MaxRequestIDLen = 128 // client request ids
	MaxKinds        = 32  // kinds per request, and declared token kinds
	MaxKindLen      = 64
	MaxUserLen      = 64
	MaxGroupLen     = 128
)
