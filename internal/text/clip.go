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
	if n <= 0 {
		return ClipMark
	}
	start, _ := runeAt(s, n)
	return s[:start] + ClipMark
}

// runeAt is where the rune of s that holds byte i (0 ≤ i < len(s)) starts
// and ends; a byte that is not part of valid UTF-8 is a rune of its own.
func runeAt(s string, i int) (start, end int) {
	for j := i; j >= 0 && j > i-utf8.UTFMax; j-- {
		if utf8.RuneStart(s[j]) {
			if _, size := utf8.DecodeRuneInString(s[j:]); j+size > i {
				return j, j + size
			}
			break
		}
	}
	return i, i + 1
}
