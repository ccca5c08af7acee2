package text

// ShortPeer is the short form in which people see a peer id: its first 4
// and last 6 characters around "…", such as "12D3…SkJYjv" (the CLI's
// tables and tree, the web UI, messages and logs all show this form).
// An id of at most 12 bytes is shown whole. It never cuts a UTF-8 rune,
// should a string that is not a peer id come its way.
func ShortPeer(p string) string {
	const head, tail = 4, 6
	if len(p) <= head+tail+2 {
		return p
	}
	h, _ := runeAt(p, head)
	t := len(p) - tail
	if start, end := runeAt(p, t); start != t {
		t = end
	}
	return p[:h] + "…" + p[t:]
}
