package reservation

// Seen reports whether holder peer's request requestID created a
// reservation the ledger still remembers: a request with that id is then a
// retry, which Reserve answers with the original reservation (or a
// conflict) whatever is free now.
func (l *Ledger) Seen(peer, requestID string) bool {
	_, ok := l.byReq[peer+"\x00"+requestID]
	return ok
}
