//go:build !linux

package transfer

import "os"

// writeBack syncs f: other systems have no sync_file_range.
func writeBack(f *os.File) { _ = f.Sync() }
