// Package layout holds no code: its test checks that the package layout
// docs/design.md §2 describes holds in the source. Imports point one
// way, from the binary down to the wire types, and the pure packages
// (the Core, relations, query, reservation and the text packages the
// Core uses) reach no network, disk, clock, goroutine or global
// randomness; every package has a doc.go; and docs/design.md's drawing of
// the levels shows each package where the test's table puts it. A change
// that breaks any of these fails the test, which names the file and the
// import, call or line that broke it.
//
// Its caller is CI (go test ./...). When a package is added, give it a
// room in the test's table: a package the table does not place fails
// the test too, so the drawing in design.md cannot drift.
package layout
