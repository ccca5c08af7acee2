//go:build !linux

package plugins

// waitExited is not available here: the process group is killed after the
// plugin has been reaped instead.
func waitExited(pid int) bool { return false }
