// Package render turns replies (status, tree, resources, reservations)
// into the text the CLI prints and admin commands return, so that every
// front end shows the same thing. It is pure: times arrive as durations in
// the replies or as a now argument.
//
// It is the one package of text for people, and only front ends import
// it: cmd/gridmgr (the CLI), daemon/web (the web UI) and node/admin.go
// (the admin commands status, tree and reservations answer in its text).
// A transport, a store or a protocol module that needs a size, a duration,
// a clipped string or a short peer id in a message uses internal/text,
// which render builds on, not render.
package render
