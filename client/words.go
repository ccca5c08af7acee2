package client

import (
	"errors"
	"strings"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
)

// plainWords are what the package-prefixed sentinels that errors wrap
// ("relations: bad manager address: ...") mean to a user: those of this
// package and of the packages under it, whose errors a client program
// shows (properties files, saved relations, expressions, a manager run in
// process).
var plainWords = []struct {
	sentinel error
	words    string
}{
	{ErrAddr, "not a manager address"},
	{config.ErrConfig, "bad properties"},
	{relations.ErrSaved, "bad saved relations file"},
	{relations.ErrCycle, "that would close a cycle"},
	{relations.ErrSelf, "a manager cannot be related to itself"},
	{ErrKey, "not a usable key file"},
	{ErrClosed, "the manager closed the connection"},
	{node.ErrStopped, "the manager stopped"},
	{node.ErrProtocol, "the manager broke the protocol"},
	{node.ErrBadMessage, "bad request"},
	{query.ErrExpr, "bad expression"},
}

// PlainWords is err's text with each sentinel it wraps (errors.Is) said
// in plain words: "not a manager address: ..." rather than "peeraddr: bad
// manager address: ...", "bad expression" rather than "query: bad
// expression". The rest of the text is left as it is.
func PlainWords(err error) string {
	msg := err.Error()
	for _, p := range plainWords {
		if errors.Is(err, p.sentinel) {
			msg = strings.ReplaceAll(msg, p.sentinel.Error(), p.words)
		}
	}
	return msg
}
