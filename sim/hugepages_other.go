//go:build !linux

package sim

// Huge pages for the run's heap are asked for on Linux only
// (hugepages_linux.go); elsewhere Options.HugePages does nothing.

type hugePages struct{}

func reserveHugePages(uint64) *hugePages { return nil }

func (h *hugePages) grow() {}

func hugePagesResident() uint64 { return 0 }
