package node

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/internal/keys"
	"github.com/gridmgr/gridmgr/internal/text"
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

	// Users set at runtime (set/unset user) over the [users] table.
	Users      map[string][]string // name → client peer ids
	UnsetUsers []string            // names removed, sorted
}

func (sa *SavedAttributes) clone() *SavedAttributes {
	users := make(map[string][]string, len(sa.Users))
	for k, v := range sa.Users {
		users[k] = slices.Clone(v)
	}
	return &SavedAttributes{Set: maps.Clone(sa.Set), Unset: slices.Clone(sa.Unset), Users: users, UnsetUsers: slices.Clone(sa.UnsetUsers)}
}

// applyUsers sets the users table queries and reservations see: the
// properties file's, with what was set and unset at runtime over it (a
// peer set for one user leaves any other).
func (c *Core) applyUsers(sa *SavedAttributes) int {
	users := make(map[string][]string, len(c.cfg.Users))
	for k, v := range c.cfg.Users {
		users[k] = slices.Clone(v)
	}
	for _, k := range sa.UnsetUsers {
		delete(users, k)
	}
	bad := 0
	for _, k := range keys.Sorted(sa.Users) {
		ids, msg := config.CheckUser(k, sa.Users[k])
		if msg != "" {
			bad++
			continue
		}
		for other, was := range users {
			users[other] = slices.DeleteFunc(was, func(p string) bool { return slices.Contains(ids, p) })
			if len(users[other]) == 0 {
				delete(users, other)
			}
		}
		users[k] = ids
	}
	c.ownConfig().Users = users
	return bad
}

// RestoreAttributes applies what a previous run saved over the properties
// file's attributes. Values that no longer parse are skipped and said in
// the returned text (for the log).
func (c *Core) RestoreAttributes(sa *SavedAttributes) string {
	c.dl.ok = false // see NextDeadline
	if sa == nil || len(sa.Set)+len(sa.Unset)+len(sa.Users)+len(sa.UnsetUsers) == 0 {
		return "no attributes set at runtime"
	}
	c.attrs = sa.clone()
	badUsers := c.applyUsers(c.attrs)
	attrs := maps.Clone(c.own.Attributes)
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
	if n := len(sa.Users) + len(sa.UnsetUsers); n > 0 {
		msg += fmt.Sprintf("; users set at runtime: %d set, %d unset", len(sa.Users)-badUsers, len(sa.UnsetUsers))
		if badUsers > 0 {
			msg += fmt.Sprintf(" (%d unreadable, skipped)", badUsers)
		}
	}
	return msg
}

// setAttributes makes attrs the attributes queries see.
func (c *Core) setAttributes(attrs map[string]any) {
	own := *c.own
	own.Attributes = attrs
	c.own = &own
	c.res.vals.Attrs = attrs
	c.res.vals.Prepare()
}

// setAttribute is `set attribute NAME VALUE` (or, with unset, `unset
// attribute NAME`): the change is made, saved before the answer leaves
// (the Applier holds it behind the write), and kept across restarts.
func (a *admins) setAttribute(now time.Time, call *adminCall, name, value string, unset bool) {
	e := a.e
	verb := "set attribute"
	if unset {
		verb = "unset attribute"
	}
	if msg := config.CheckAttributeKey(name); msg != "" {
		a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, verb+": "+msg)
		return
	}
	old, had := e.ownFields().Attributes[name]
	attrs := maps.Clone(e.ownFields().Attributes)
	if attrs == nil {
		attrs = map[string]any{}
	}
	sa := e.savedAttrs()
	if sa.Set == nil {
		sa.Set = map[string]string{}
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
		delete(sa.Set, name)
		if !slices.Contains(sa.Unset, name) {
			sa.Unset = append(sa.Unset, name)
			slices.Sort(sa.Unset)
		}
		e.setAttributes(attrs)
		e.attributesChanged()
		e.event(now, e.me(), e.name(), fmt.Sprintf("unset attribute %s (was %s) by admin %s", name, was, text.ShortPeer(call.author)))
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
	sa.Set[name] = nw
	sa.Unset = slices.DeleteFunc(sa.Unset, func(k string) bool { return k == name })
	e.setAttributes(attrs)
	e.attributesChanged()
	e.event(now, e.me(), e.name(), fmt.Sprintf("set attribute %s %s (was %s) by admin %s", name, nw, was, text.ShortPeer(call.author)))
	a.ok(now, call, fmt.Sprintf("attribute %s: %s → %s (queries see attrs.%s now; saved, kept across restarts)", name, was, nw, name))
}

// setUser is `set user NAME PEER[,PEER…]` (or, with unset, `unset user
// NAME`): the [users] table changes at once (a peer moves from any other
// user to NAME), is saved before the answer leaves, and is kept across
// restarts. Run with admin --all, it is the grid's users file.
func (a *admins) setUser(now time.Time, call *adminCall, name, peers string, unset bool) {
	e := a.e
	sa := e.savedAttrs()
	if sa.Users == nil {
		sa.Users = map[string][]string{}
	}
	if unset {
		if _, ok := e.conf().Users[name]; !ok {
			a.ok(now, call, fmt.Sprintf("user %s was not set", name))
			return
		}
		delete(sa.Users, name)
		if !slices.Contains(sa.UnsetUsers, name) {
			sa.UnsetUsers = append(sa.UnsetUsers, name)
			slices.Sort(sa.UnsetUsers)
		}
		e.applyUsers(sa)
		e.attributesChanged()
		e.event(now, e.me(), e.name(), fmt.Sprintf("unset user %s by admin %s", name, text.ShortPeer(call.author)))
		a.ok(now, call, fmt.Sprintf("user %s removed: its peers now state their own names%s; saved, kept across restarts", name, declaredNote(e.conf())))
		return
	}
	ids, msg := config.CheckUser(name, strings.Split(peers, ","))
	if msg != "" {
		a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, "set user "+name+": "+msg)
		return
	}
	// A peer is one user only: it leaves any user set at runtime before.
	for other, was := range sa.Users {
		if other != name {
			if rest := slices.DeleteFunc(slices.Clone(was), func(p string) bool { return slices.Contains(ids, p) }); len(rest) > 0 {
				sa.Users[other] = rest
			} else {
				delete(sa.Users, other)
			}
		}
	}
	sa.Users[name] = ids
	sa.UnsetUsers = slices.DeleteFunc(sa.UnsetUsers, func(k string) bool { return k == name })
	e.applyUsers(sa)
	e.attributesChanged()
	short := make([]string, len(ids))
	for i, id := range ids {
		short[i] = text.ShortPeer(id)
	}
	e.event(now, e.me(), e.name(), fmt.Sprintf("set user %s %s by admin %s", name, strings.Join(short, ","), text.ShortPeer(call.author)))
	a.ok(now, call, fmt.Sprintf("user %s: peer(s) %s (request.user is %s for them now, whatever they state; saved, kept across restarts)", name, strings.Join(short, ", "), name))
}

func declaredNote(cfg *config.Config) string {
	if cfg.AllowDeclaredUsers() {
		return ""
	}
	return " (here: peer:<id>, as users.allow_declared is false)"
}
