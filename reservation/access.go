package reservation

import (
	"fmt"
	"slices"
	"strings"
)

// Access says who may reserve which kinds: for a kind it lists the allowed
// holders, each "peer:ID" (or a bare peer id), "user:NAME" or "*". A kind
// without a list is open to everyone; admins may reserve everything. Peer
// ids are authenticated by the transport; user names are only stated by
// the client, so a "user:" entry is a convenience among trusting peers, not
// a security boundary.
type Access map[string][]string

// ParseAccessEntry checks one list entry and returns it in canonical form.
func ParseAccessEntry(s string) (string, error) {
	switch {
	case s == "*":
		return s, nil
	case strings.HasPrefix(s, "user:"):
		if len(s) == len("user:") || len(s) > len("user:")+MaxUserLen {
			return "", fmt.Errorf("%q: the user name is empty or longer than %d bytes", s, MaxUserLen)
		}
		return s, nil
	case strings.HasPrefix(s, "peer:"):
		if len(s) == len("peer:") {
			return "", fmt.Errorf("%q: the peer id is empty", s)
		}
		return s, nil
	case strings.Contains(s, ":") || s == "":
		return "", fmt.Errorf("%q is not \"*\", \"user:NAME\", \"peer:ID\" or a peer id", s)
	}
	return "peer:" + s, nil
}

func (a Access) allows(kind string, h Holder) bool {
	list, ok := a[kind]
	if !ok {
		return true
	}
	for _, e := range list {
		switch {
		case e == "*":
			return true
		case strings.HasPrefix(e, "peer:"):
			if e[len("peer:"):] == h.Peer {
				return true
			}
		case strings.HasPrefix(e, "user:"):
			if h.User != "" && e[len("user:"):] == h.User {
				return true
			}
		default:
			if e == h.Peer {
				return true
			}
		}
	}
	return false
}

// Check returns a refusal naming every kind of amounts that h may not
// reserve, or nil.
func (a Access) Check(h Holder, admin bool, amounts []Amount) error {
	if admin || len(a) == 0 {
		return nil
	}
	var denied []string
	for _, am := range amounts {
		if !a.allows(am.Kind, h) {
			denied = append(denied, fmt.Sprintf("%s (allowed: %s)", am.Kind, strings.Join(a[am.Kind], ", ")))
		}
	}
	if len(denied) == 0 {
		return nil
	}
	slices.Sort(denied)
	return errorf(CodeRefused, "%s may not reserve %s: refused by the access list", h, strings.Join(denied, "; "))
}
