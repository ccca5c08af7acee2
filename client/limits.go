package client

import (
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/reservation"
)

// The bounds and defaults of requests, as managers apply them, for a
// client program to check its input against before it sends it.
const (
	// DefaultQueryWant and DefaultQueryLimit are a query's defaults: climb
	// while fewer offers than Want were found; answer at most Limit.
	DefaultQueryWant  = node.DefaultQueryWant
	DefaultQueryLimit = node.DefaultQueryLimit
	// MaxQueryLimit bounds a query's Want and Limit (and so a
	// co-reservation asks for at most MaxQueryLimit/2 managers, as it
	// asks for twice as many offers).
	MaxQueryLimit = node.MaxQueryLimit
	// MaxTreeDepth bounds the depth of a tree: the most ancestors a
	// manager may have.
	MaxTreeDepth = relations.MaxAncestors
)

// CheckReservationID reports whether id is a reservation number as
// managers make them ("gm154-..."): an error that says why not.
func CheckReservationID(id string) error {
	_, _, _, err := reservation.ParseID(id)
	return err
}

// SplitInstance splits an application instance's id, RESERVATION.APP,
// into the reservation number and the application's name.
func SplitInstance(id string) (reservationID, app string, err error) {
	return node.SplitInstance(id)
}
