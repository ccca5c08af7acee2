//go:build linux

package plugins

import (
	"syscall"
	"unsafe"
)

// waitExited blocks until process pid has exited, without reaping it
// (waitid with WNOWAIT), and reports whether it did so. While the process
// is an unreaped zombie its pid, and so its process group id, cannot be
// reused, which makes killing the group afterwards safe.
func waitExited(pid int) bool {
	const pPID = 1     // P_PID
	var info [128]byte // siginfo_t
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch e {
		case 0:
			return true
		case syscall.EINTR:
			continue
		default:
			return false
		}
	}
}
