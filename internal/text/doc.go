// Package text holds the small text helpers every layer of gridmgr shares:
// the edit distance behind every "did you mean", sizes such as "16GiB",
// durations such as "7d" and counts such as "10k" as the CLI's flags read
// them, the form in which messages name times (MessageTime) and its
// rewriting for a reader, where invalid UTF-8 starts, and the one way a
// message clips a long string (Clip, which never cuts a UTF-8 rune and
// marks the cut with "…") and quotes one (QuoteShort), and the one short
// form of a peer id that people see (ShortPeer, "12D3…SkJYjv"). It
// imports nothing of gridmgr; callers pass strings and get strings back.
package text
