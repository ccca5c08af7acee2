package web

import (
	"net/http"
	"net/netip"
	"sync"
)

// limiter counts what clients hold at once (live streams, requests in
// progress), in all and per client, so that one client cannot take what
// is shared.
type limiter struct {
	max, perClient int

	mu    sync.Mutex
	total int
	by    map[string]int // client → held; no entry at 0
}

func newLimiter(max, perClient int) *limiter {
	return &limiter{max: max, perClient: perClient, by: map[string]int{}}
}

// take holds one for client; if it cannot, it says which limit is
// reached: errClient (the client's own) or errTotal.
func (l *limiter) take(client string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.by[client] >= l.perClient:
		return errClient
	case l.total >= l.max:
		return errTotal
	}
	l.by[client]++
	l.total++
	return nil
}

// release gives back one that take held for client.
func (l *limiter) release(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.by[client]--; l.by[client] <= 0 {
		delete(l.by, client)
	}
}

// held is what is held now, and by how many clients.
func (l *limiter) held() (n, clients int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, len(l.by)
}

type limitError string

func (e limitError) Error() string { return string(e) }

const (
	errClient limitError = "the client's limit"
	errTotal  limitError = "the manager's limit"
)

// clientOf is who a request comes from, as the limits count clients: its
// remote IP address, or for IPv6 the /64 it is in (one host usually has a
// whole /64 to pick addresses from).
func clientOf(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	a := ap.Addr().Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
