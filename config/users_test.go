package config

import (
	"strings"
	"testing"
)

const alicePeer = "12D3KooWLtyYhPK3Ek2yAaAcJpyoJmjhDn1NNnHzRmY1m5MwkM31"

func TestUsersTable(t *testing.T) {
	c := mustParse(t, "u.toml", "name = \"gm\"\n[users]\nallow_declared = false\nalice = [\""+alicePeer+"\"]\nbob = \""+alicePeer[:len(alicePeer)-1]+"2\"\n", "h")
	if c.AllowDeclaredUsers() {
		t.Fatal("allow_declared = false read as true")
	}
	if name, ok := c.UserOf(alicePeer); !ok || name != "alice" {
		t.Fatalf("UserOf(alice's peer) = %q, %v", name, ok)
	}
	if _, ok := c.UserOf("12D3KooWnobody"); ok {
		t.Fatal("an unmapped peer has a user")
	}
	if d := mustParse(t, "d.toml", "name = \"gm\"\n", "h"); !d.AllowDeclaredUsers() {
		t.Fatal("allow_declared does not default to true")
	}
	// Rendered and read back, the same.
	again := mustParse(t, "r.toml", string(c.Render()), "h")
	if again.AllowDeclaredUsers() || len(again.Users["alice"]) != 1 {
		t.Fatalf("round trip: %+v %v", again.Users, again.AllowDeclaredUsers())
	}

	for _, bad := range []struct{ in, want string }{
		{"[users]\nallow_declared = \"no\"\n", "users.allow_declared: expected true or false"},
		{"[users]\n\"al ice\" = [\"" + alicePeer + "\"]\n", "is not a user name"},
		{"[users]\nalice = [\"not-a-peer\"]\n", "invalid peer id"},
		{"[users]\nalice = [3]\n", "expected a client peer id"},
		{"[users]\nalice = [\"" + alicePeer + "\"]\nbob = [\"" + alicePeer + "\"]\n", "is already user alice"},
	} {
		_, err := Parse("bad.toml", []byte("name = \"gm\"\n"+bad.in), "h")
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v; want an error with %q", bad.in, err, bad.want)
		}
	}
}
