// Package boltfile is what gridmgr's bbolt files share: a "meta" bucket
// whose "format" key says the file's layout, written when the file is
// created, and a refusal of files that hold something else. Callers open
// the file, then call Create on a new one (inside an update) or check
// Format on an existing one.
package boltfile
