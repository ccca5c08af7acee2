package host

import (
	"fmt"
	"os"
	"runtime"

	"github.com/shirou/gopsutil/v4/mem"
)

// Info is what Detect found.
type Info struct {
	CPUs     int
	Memory   uint64 // bytes
	Hostname string
	OS       string
	Arch     string
}

// Detect reads the host's values. CPUs counts the processors this process
// may use (runtime.NumCPU honours the affinity mask); Memory is the total
// physical memory. An error means memory could not be read; the other
// fields are still filled.
func Detect() (Info, error) {
	in := Info{CPUs: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	in.Hostname, _ = os.Hostname()
	vm, err := mem.VirtualMemory()
	if err != nil {
		return in, fmt.Errorf("host: memory: %w", err)
	}
	in.Memory = vm.Total
	return in, nil
}
