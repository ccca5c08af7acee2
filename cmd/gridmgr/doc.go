// Command gridmgr is the grid manager: one binary per host that runs the
// manager (run), a local six-manager grid (demo), and the client commands
// that talk to any manager (tree, status, ping, ...). `gridmgr help` lists
// them.
//
// Each client command is thin: it parses its flags, makes one call to the
// client library (package client: dialling from -n/-d/--psk, requests,
// Find, RunAdmin, Reserver.Make, Subscribe; errors in PlainWords) and
// prints the answer, as text or with --json as JSON. What is not flag
// parsing or printing belongs in client (or, for the manager's own files,
// in daemon; for a simulation, in sim).
package main
