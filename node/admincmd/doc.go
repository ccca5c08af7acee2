// Package admincmd is the grammar and the command table of admin command
// strings: the one string an administrator sends to a manager, such as
// "remove-inferior gm162", "set heartbeat.interval 500ms" or "help set".
// The CLI, the client protocol and the test scenario files all send these
// strings, so they are split, checked and explained here and nowhere else.
//
// The package is pure: no I/O, no clock, no randomness, no global state
// that changes. It does not run commands.
//
// What the caller must do with a command string:
//
//  1. Call Parse. An error is for the person who typed the string: show
//     it as is (it names what is wrong and at which byte). errors.Is tells
//     ErrSyntax (the string does not split, or the command name is
//     malformed) from ErrUsage (a built-in got the wrong number of
//     arguments).
//  2. If Command.Spec is nil the name is not built in. If the manager runs
//     plugins, and ValidPluginName(name) holds, and the program
//     PluginPrefix+name exists in plugins_dir, run it; otherwise reply
//     with Unknown(name).
//  3. Before running a built-in whose Spec.Mutating is set, or any
//     plugin, check that the peer asking is an admin.
//  4. Check the argument values. Parse checks only how many arguments a
//     built-in got; the handler parses MADDR, PEER|NAME, KEY, VALUE,
//     DEPTH and all|mine and says clearly what is wrong with them.
//  5. Answer "help" with Help(cmd.Args, plugin names).
//
// To build a command string from words (CLI, tests, scenario files) use
// Join, or Quote for one word, rather than gluing strings with spaces.
//
// Builtins, and the Spec that Lookup and Parse point to, are shared: do not
// modify them.
//
// (The package was node/admin; it is admincmd, "admin command", so that it
// is not confused with node/admin.go, the Core's module that runs the
// commands.)
package admincmd
