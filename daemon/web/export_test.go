package web

import "net/http"

// Held is what h's limits count now: the live streams and the clients
// holding them.
func Held(h http.Handler) (streams, streamClients int) {
	return h.(*handler).streams.held()
}
