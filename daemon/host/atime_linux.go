package host

import (
	"os"
	"syscall"
	"time"
)

// accessTime is a file's last access time (the modification time where
// the system does not say).
func accessTime(fi os.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Atim.Sec, st.Atim.Nsec)
	}
	return fi.ModTime()
}
