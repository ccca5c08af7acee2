package node

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// SavedAttributes are the attribute changes an admin made at runtime
// (set/unset attribute) over the properties file: the runtime saves them
// durably (Write.Attributes) and gives them back at start
// (Core.RestoreAttributes). Values are in config.FormatAttributeValue's
// form, so that their types survive any encoding.
type SavedAttributes struct {
	Set   map[string]string // name → value, as TOML
	Unset []string          // names removed, sorted
}

func (sa *SavedAttributes) clone() *SavedAttributes {
	return &SavedAttributes{Set: maps.Clone(sa.Set), Unset: slices.Clone(sa.Unset)}
}

// RestoreAttributes applies what a previous run saved over the properties
// file's attributes. Values that no longer parse are skipped and said in
// the returned text (for the log).
func (c *Core) RestoreAttributes(sa *SavedAttributes) string {
	if sa == nil || len(sa.Set)+len(sa.Unset) == 0 {
		return "no attributes set at runtime"
	}
	c.attrs = sa.clone()
	attrs := maps.Clone(c.cfg.Attributes)
	if attrs == nil {
		attrs = map[string]any{}
	}
	bad := 0
	for _, k := range sa.Unset {
		delete(attrs, k)
	}
	for k, s := range sa.Set {
		v, err := config.ParseAttributeValue(s)
		if err != nil || config.CheckAttributeKey(k) != "" {
			bad++
			continue
		}
		attrs[k] = v
	}
	c.setAttributes(attrs)
	msg := fmt.Sprintf("attributes set at runtime restored: %d set, %d unset", len(sa.Set)-bad, len(sa.Unset))
	if bad > 0 {
		msg += fmt.Sprintf(" (%d unreadable, skipped)", bad)
	}
	return msg
}

// setAttributes makes attrs the attributes queries see.
func (c *Core) setAttributes(attrs map[string]any) {
	c.cfg.Attributes = attrs
	c.vals.Attrs = attrs
	c.vals.Prepare()
}

// setAttribute is `set attribute NAME VALUE` (or, with unset, `unset
// attribute NAME`): the change is made, saved before the answer leaves
// (the Applier holds it behind the write), and kept across restarts.
func (a *admins) setAttribute(now time.Time, call *adminCall, name, value string, unset bool) {
	c := a.c
	verb := "set attribute"
	if unset {
		verb = "unset attribute"
	}
	if msg := config.CheckAttributeKey(name); msg != "" {
		a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, verb+": "+msg)
		return
	}
	old, had := c.cfg.Attributes[name]
	attrs := maps.Clone(c.cfg.Attributes)
	if attrs == nil {
		attrs = map[string]any{}
	}
	if c.attrs == nil {
		c.attrs = &SavedAttributes{Set: map[string]string{}}
	}
	if c.attrs.Set == nil {
		c.attrs.Set = map[string]string{}
	}
	was := "unset"
	if had {
		was = config.FormatAttributeValue(old)
	}
	if unset {
		if !had {
			a.ok(now, call, fmt.Sprintf("attribute %s was not set", name))
			return
		}
		delete(attrs, name)
		delete(c.attrs.Set, name)
		if !slices.Contains(c.attrs.Unset, name) {
			c.attrs.Unset = append(c.attrs.Unset, name)
			slices.Sort(c.attrs.Unset)
		}
		c.setAttributes(attrs)
		c.attrDirty = true
		c.event(now, c.self, c.cfg.Name, fmt.Sprintf("unset attribute %s (was %s) by admin %s", name, was, relations.ShortPeer(call.author)))
		a.ok(now, call, fmt.Sprintf("attribute %s removed (was %s); saved, kept across restarts", name, was))
		return
	}
	v, err := config.ParseAttributeValue(value)
	if err != nil {
		a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, verb+" "+name+": "+err.Error())
		return
	}
	nw := config.FormatAttributeValue(v)
	attrs[name] = v
	c.attrs.Set[name] = nw
	c.attrs.Unset = slices.DeleteFunc(c.attrs.Unset, func(k string) bool { return k == name })
	c.setAttributes(attrs)
	c.attrDirty = true
	c.event(now, c.self, c.cfg.Name, fmt.Sprintf("set attribute %s %s (was %s) by admin %s", name, nw, was, relations.ShortPeer(call.author)))
	a.ok(now, call, fmt.Sprintf("attribute %s: %s → %s (queries see attrs.%s now; saved, kept across restarts)", name, was, nw, name))
}
