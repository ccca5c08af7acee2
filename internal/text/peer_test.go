package text

import "testing"

func TestShortPeer(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"p1", "p1"},
		{"123456789012", "123456789012"},
		{"1234567890123", "1234…890123"},
		{"12D3KooWQ4qwPRmkkWeAMpEhufgtsxeEkxLdMZGXQRB249SkJYjv", "12D3…SkJYjv"},
		// Not a peer id, but never cut inside a rune: "é" is 2 bytes, "€" 3.
		{"abcé" + "xxxxxx" + "€12345", "abc…12345"},
		{"abcdéfghijklmn", "abcd…ijklmn"},
		{"€€€€€€€€", "€…€€"},
	} {
		if got := ShortPeer(tc.in); got != tc.want {
			t.Errorf("ShortPeer(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
