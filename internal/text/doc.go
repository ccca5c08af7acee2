// Package text holds the small text helpers every layer of gridmgr shares:
// the edit distance behind every "did you mean", sizes such as "16GiB",
// durations such as "7d" and counts such as "10k" as the CLI's flags read
// them, the form in which messages name times (MessageTime) and its
// rewriting for a reader, where invalid UTF-8 starts, and short quoting
// for messages. It imports nothing of gridmgr; callers pass strings and
// get strings back.
package text
