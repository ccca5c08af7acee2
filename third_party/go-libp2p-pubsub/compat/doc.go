// Package compat_pb is part of go-libp2p-pubsub v0.17.0, copied unchanged into
// gridmgr's third_party tree (see PATCHED.md at its top). Its callers are
// the rest of that copy; gridmgr does not call it directly.
package compat_pb
