// Package tomlpos finds where keys are written in a TOML document, so that
// problems found after decoding (a value out of range, a key an entry does
// not take) can name their line. It reads lines as text: the caller must
// have decoded the document already (a syntax error has its own position).
package tomlpos
