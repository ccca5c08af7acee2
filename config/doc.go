// Package config is the one schema of a manager's properties file (TOML):
// every key with its type, default, bounds, meaning and whether `admin
// set` may change it on a running manager (keys.go), and the one struct,
// Config, that the rest of gridmgr reads. Parse reads a file and reports
// every problem at once, each as FILE:LINE: KEY: MSG with "did you mean"
// for unknown keys; Validate fills the defaults of a Config made in code
// and rejects impossible values with the same bounds and messages; Set
// applies one `admin set KEY VALUE`; Render writes a Config back as a file;
// Keys and Settable describe the keys for help texts and docs.
//
// It is the only package that knows the file format: relations, query and
// reservation receive plain values from a Config. A caller parses (or
// builds and validates) a Config before handing it to node, and must not
// change it afterwards except through Set.
package config
