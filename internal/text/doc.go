// Package text holds the small text helpers every layer of gridmgr shares:
// the edit distance behind every "did you mean", sizes such as "16GiB",
// where invalid UTF-8 starts, and short quoting for messages. It imports
// nothing of gridmgr; callers pass strings and get strings back.
package text
