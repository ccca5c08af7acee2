package host

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/disk"
	"github.com/shirou/gopsutil/v4/host"
	"github.com/shirou/gopsutil/v4/load"
	"github.com/shirou/gopsutil/v4/mem"
)

// Sample is one reading of the host's live values.
type Sample struct {
	At       time.Time
	Info             // cpus, total memory, host name, OS, arch
	MemAvail uint64  // memory available to new work (MemAvailable), bytes
	CPUUtil  float64 // processor utilisation 0..1, smoothed; -1 until two readings
	NetMbps  float64 // fastest up, non-loopback link, Mbit/s; 0 unknown
	// Load averages, uptime, free disk (of DiskPath) and console idle
	// time, each with whether it could be read.
	Load1, Load5, Load15 float64
	HaveLoad             bool
	Uptime               time.Duration
	HaveUptime           bool
	DiskFree             uint64
	HaveDisk             bool
	Disks                map[string]uint64 // bytes free on the filesystems of Disks, by name (those read)
	Idle                 time.Duration
	HaveIdle             bool
	Errors               []string // what could not be read this time
}

// Smoother is an exponentially weighted moving average with a time
// constant: a reading dt after the previous one weighs 1 - exp(-dt/Tau).
// It is pure: the caller supplies the elapsed times.
type Smoother struct {
	Tau   time.Duration
	value float64
	init  bool
}

// Observe folds in a reading taken dt after the previous one and returns
// the smoothed value.
func (s *Smoother) Observe(dt time.Duration, x float64) float64 {
	if !s.init || s.Tau <= 0 {
		s.value, s.init = x, true
		return x
	}
	a := 1 - math.Exp(-float64(dt)/float64(s.Tau))
	s.value += a * (x - s.value)
	return s.value
}

// Value is the smoothed value, and whether there is one.
func (s *Smoother) Value() (float64, bool) { return s.value, s.init }

// Sampler reads the host's live values; keep one per process and call
// Sample on an interval. Not safe for concurrent use.
type Sampler struct {
	// SysNet is the sysfs directory of network interfaces (tests change it).
	SysNet string
	// DiskPath is the directory whose filesystem's free space is
	// disk_free (the data dir); "" reads none.
	DiskPath string
	// Disks are more paths whose filesystems' free space is read, by name
	// (disks.NAME; the properties' [disks]).
	Disks map[string]string
	// Terminals are the globs of the devices whose last access time is
	// console or keyboard input (idle_s), as HTCondor reads KeyboardIdle.
	Terminals []string
	util      Smoother
	prev      cpu.TimesStat
	prevAt    time.Time
	have      bool
}

// UtilTau is the time constant of the processor-utilisation average: a
// burst moves it a little, sustained load moves it within a minute.
const UtilTau = 30 * time.Second

// NewSampler returns a sampler with the default smoothing.
func NewSampler() *Sampler {
	return &Sampler{SysNet: "/sys/class/net", util: Smoother{Tau: UtilTau},
		Terminals: []string{"/dev/tty[0-9]*", "/dev/pts/[0-9]*", "/dev/input/event*"}}
}

// Sample reads the host now. What cannot be read is reported in Errors
// and left at its "unknown" value; the rest is still filled.
func (s *Sampler) Sample() Sample {
	now := time.Now()
	info, err := Detect()
	out := Sample{At: now, Info: info, CPUUtil: -1}
	if err != nil {
		out.Errors = append(out.Errors, err.Error())
	}
	if vm, err := mem.VirtualMemory(); err == nil {
		out.MemAvail = vm.Available
	} else {
		out.Errors = append(out.Errors, "memory: "+err.Error())
	}
	if ts, err := cpu.Times(false); err == nil && len(ts) > 0 {
		t := ts[0]
		if s.have {
			if u, ok := busyFraction(s.prev, t); ok {
				s.util.Observe(now.Sub(s.prevAt), u)
			}
		}
		s.prev, s.prevAt, s.have = t, now, true
	} else if err != nil {
		out.Errors = append(out.Errors, "cpu: "+err.Error())
	}
	if v, ok := s.util.Value(); ok {
		out.CPUUtil = v
	}
	out.NetMbps = LinkSpeed(s.SysNet)
	if a, err := load.Avg(); err == nil {
		out.Load1, out.Load5, out.Load15, out.HaveLoad = a.Load1, a.Load5, a.Load15, true
	} else {
		out.Errors = append(out.Errors, "load: "+err.Error())
	}
	if up, err := host.Uptime(); err == nil {
		out.Uptime, out.HaveUptime = time.Duration(up)*time.Second, true
	} else {
		out.Errors = append(out.Errors, "uptime: "+err.Error())
	}
	if s.DiskPath != "" {
		if u, err := disk.Usage(s.DiskPath); err == nil {
			out.DiskFree, out.HaveDisk = u.Free, true
		} else {
			out.Errors = append(out.Errors, "disk: "+err.Error())
		}
	}
	for name, p := range s.Disks {
		if u, err := disk.Usage(p); err == nil {
			if out.Disks == nil {
				out.Disks = make(map[string]uint64, len(s.Disks))
			}
			out.Disks[name] = u.Free
		} else {
			out.Errors = append(out.Errors, "disk "+name+": "+err.Error())
		}
	}
	out.Idle, out.HaveIdle = TerminalIdle(s.Terminals, now)
	return out
}

// TerminalIdle is the time since the most recent access to any device
// matching globs (terminals, input devices): the console or keyboard idle
// time. false when none can be read (a host without terminals).
func TerminalIdle(globs []string, now time.Time) (time.Duration, bool) {
	var latest time.Time
	for _, g := range globs {
		paths, _ := filepath.Glob(g)
		for _, p := range paths {
			fi, err := os.Stat(p)
			if err != nil {
				continue
			}
			if at := accessTime(fi); at.After(latest) {
				latest = at
			}
		}
	}
	if latest.IsZero() {
		return 0, false
	}
	return max(0, now.Sub(latest)), true
}

// busyFraction is the share of processor time not idle between two
// readings of the cumulative counters.
func busyFraction(a, b cpu.TimesStat) (float64, bool) {
	total := func(t cpu.TimesStat) float64 {
		return t.User + t.System + t.Idle + t.Nice + t.Iowait + t.Irq + t.Softirq + t.Steal
	}
	dt := total(b) - total(a)
	if dt <= 0 {
		return 0, false
	}
	idle := (b.Idle + b.Iowait) - (a.Idle + a.Iowait)
	u := 1 - idle/dt
	return min(max(u, 0), 1), true
}

// LinkSpeed returns the speed in Mbit/s of the fastest interface under
// sysNet that is up and not loopback, or 0 when none reports one (virtual
// NICs often do not).
func LinkSpeed(sysNet string) float64 {
	ents, err := os.ReadDir(sysNet)
	if err != nil {
		return 0
	}
	best := 0.0
	for _, e := range ents {
		dir := filepath.Join(sysNet, e.Name())
		if e.Name() == "lo" {
			continue
		}
		state, err := os.ReadFile(filepath.Join(dir, "operstate"))
		if err != nil || strings.TrimSpace(string(state)) != "up" {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, "speed"))
		if err != nil {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(string(raw)), 64); err == nil && v > best {
			best = v
		}
	}
	return best
}
