// Package layout holds no code: its test checks that the package layout
// docs/design.md §2 describes holds in the source. Imports point one
// way, from the binary down to the wire types, and the pure packages
// (the Core, relations, query, reservation and the text packages the
// Core uses) reach no network, disk, clock, goroutine or global
// randomness. A change that breaks either fails the test, which names
// the file and the import or call that broke it.
//
// Its caller is CI (go test ./...). When a package is added, give it a
// room in the test's table: a package the table does not place fails
// the test too, so the drawing in design.md cannot drift.
package layout
