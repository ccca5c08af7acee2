package transfer

import (
	"os"

	"golang.org/x/sys/unix"
)

// writeBack starts the writing back of f's dirty pages to the disk and
// does not wait for it (sync_file_range, SYNC_FILE_RANGE_WRITE): unlike
// an fsync it commits no journal and flushes no disk cache, so it costs
// the upload only the kernel's queueing. It makes nothing durable; the
// final fsync does. Where the file system refuses it, it syncs instead.
// (Send10MB: 26.3-28.8 ms against 30.8-33.2 ms with an fsync every
// 4 MiB, and 24.9-28.1 ms with none, three runs each, alternated.)
func writeBack(f *os.File) {
	rc, err := f.SyscallConn() // not Fd, which changes the file's mode
	if err == nil {
		cerr := rc.Control(func(fd uintptr) {
			err = unix.SyncFileRange(int(fd), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
		})
		if cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		_ = f.Sync()
	}
}
