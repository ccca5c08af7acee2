// Package lazyre is a regular expression compiled when it is first used,
// not when its package is initialised.
//
// A pattern with a bounded repetition such as `[A-Z0-9_]{0,127}` compiles
// to a program with one instruction per repetition: the fifteen such
// patterns of the jobs, deploy, node, config and daemon packages
// allocated 1.1 MB in every gridmgr process at its start (GODEBUG=
// inittrace=1), an idle manager and a one-shot CLI command included,
// though they are used only when a job, an application, a glide-in or a
// private network is checked. New still parses the pattern at once, so a bad pattern fails
// when the package is initialised, as regexp.MustCompile does; only the
// compiled program waits for the first match, and is kept from then on.
//
// Its caller must only declare an RE as a package variable with New and
// match with it; an RE is safe for concurrent use.
package lazyre
