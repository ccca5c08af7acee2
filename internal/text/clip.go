package text

import "unicode/utf8"

// ClipMark is what Clip puts where it cut a string.
const ClipMark = "…"

// Clip bounds s for a message: s itself if it is at most n bytes, else
// its longest prefix of at most n bytes that ends on a rune boundary,
// followed by ClipMark. It never cuts a UTF-8 rune in two (bytes of
// invalid UTF-8 count as runes of one byte each). n below 0 counts as 0.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n, 0)
	// Back to the start of the rune that spans the cut, if one does.
	for i := cut - 1; i >= 0 && i > cut-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if _, size := utf8.DecodeRuneInString(s[i:]); i+size > cut {
				cut = i
			}
			break
		}
	}
	return s[:cut] + ClipMark
}
