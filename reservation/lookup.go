package reservation

// Retry returns the reservation that holder peer's request requestID
// created, if the ledger still remembers it: a new request with that id is
// a retry and must get this answer.
func (l *Ledger) Retry(peer, requestID string) (Reservation, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id, ok := l.byReq[peer+"\x00"+requestID]
	if !ok {
		return Reservation{}, false
	}
	return l.res[id].Clone(), true
}
