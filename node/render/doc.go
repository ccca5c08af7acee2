// Package render turns replies (status, tree, resources, reservations)
// into the text the CLI prints and admin commands return, so that every
// front end shows the same thing. It is pure: times arrive as durations in
// the replies or as a now argument.
package render
