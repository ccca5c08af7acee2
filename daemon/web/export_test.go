package web

import "net/http"

// Held is what h's limits count now: the live streams and the clients
// holding them, the requests to the grid in progress and theirs.
func Held(h http.Handler) (streams, streamClients, calls, callClients int) {
	hh := h.(*handler)
	streams, streamClients = hh.streams.held()
	calls, callClients = hh.calls.held()
	return
}
