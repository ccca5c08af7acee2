// Package lazyre is a regular expression compiled when it is first used,
// not when its package is initialised.
//
// A pattern with a bounded repetition such as `[A-Z0-9_]{0,127}` compiles
// to a program with one instruction per repetition: the fourteen such
// patterns of the job, deploy, node and config packages held about
// 1.2 MB of heap in every gridmgr process from its start (GODEBUG=
// inittrace=1), an idle manager and a one-shot CLI command included,
// though most are used only when a job, an application or a glide-in is
// checked. New still parses the pattern at once, so a bad pattern fails
// when the package is initialised, as regexp.MustCompile does; only the
// compiled program waits for the first match, and is kept from then on.
//
// Its caller must only declare an RE as a package variable with New and
// match with it; an RE is safe for concurrent use.
package lazyre
