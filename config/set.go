package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/gridmgr/gridmgr/internal/text"
)

// Set changes one key of a running manager's config, as `admin set KEY
// VALUE` does: only the settable keys (see Keys), the value checked with
// the file's types, bounds and messages (VALUE is a TOML value; a bare word
// such as 500ms or debug is taken as the string it is). It returns the new
// config and the old and new values as the file would write them; the
// handshake timeout follows the heartbeat when it was derived from it.
func Set(c Config, path, value string) (out Config, old, new string, err error) {
	var settable []string
	var k *key
	for i := range table {
		if table[i].settable {
			settable = append(settable, table[i].path)
			if table[i].path == path {
				k = &table[i]
			}
		}
	}
	if k == nil {
		msg := fmt.Sprintf("%q cannot be changed at runtime; it can: %s", path, strings.Join(settable, ", "))
		if near := text.Closest(path, settable, max(2, len(path)/3)); near != "" {
			msg = fmt.Sprintf("%q cannot be changed at runtime; did you mean %q? (it can: %s)", path, near, strings.Join(settable, ", "))
		}
		return c, "", "", &Error{Msg: msg} // the message names the key
	}
	var doc map[string]any
	if _, err := toml.Decode("v = "+value, &doc); err != nil || strings.ContainsAny(value, "\n\r") {
		doc = map[string]any{"v": value}
	}
	d := &decoder{first: map[string]int{}}
	out = c
	k.decode(d, strings.Split(path, "."), doc["v"], &out)
	if len(d.errs) > 0 {
		return c, "", "", &Error{Key: path, Msg: d.errs[0].Msg}
	}
	if es := crossCheck(&out); len(es) > 0 {
		return c, "", "", es[0]
	}
	if c.HandshakeTimeout == handshakeFor(&c) {
		out.HandshakeTimeout = handshakeFor(&out)
	}
	return out, display(k.format(&c)), display(k.format(&out)), nil
}

// display is a TOML value as a person reads it: strings without quotes.
func display(v string) string {
	if s, err := strconv.Unquote(v); err == nil {
		return s
	}
	return v
}

// Settable are the keys Set may change, with their docs.
func Settable() []KeyDoc {
	var out []KeyDoc
	for _, k := range Keys() {
		if k.Settable {
			out = append(out, k)
		}
	}
	return out
}
