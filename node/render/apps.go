package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

// AppInstance renders one application instance with its process data.
func AppInstance(ai *wire.AppInstance, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %s %s (class %s) on %s: %s\n", ai.Id, ai.App, ai.Version, ai.Class, ai.Manager, ai.State)
	if len(ai.Pids) > 0 {
		var ps []string
		for _, p := range ai.Pids {
			ps = append(ps, fmt.Sprint(p))
		}
		fmt.Fprintf(&b, "  pids       %s\n", strings.Join(ps, " "))
	}
	if ai.StartedUnixMs > 0 && (ai.State == "running" || ai.State == "paused") {
		fmt.Fprintf(&b, "  up         %s\n", text.FormatDuration(now.Sub(time.UnixMilli(ai.StartedUnixMs)).Round(time.Second)))
	}
	// The limits are the reservation's, shared by all its applications.
	cpuLimit := "no limit"
	if ai.CpuLimit > 0 {
		cpuLimit = fmt.Sprintf("of the reservation's %g", ai.CpuLimit)
	}
	memLimit := "no limit"
	if ai.MemLimit > 0 {
		memLimit = "of the reservation's " + Bytes(uint64(ai.MemLimit))
	}
	fmt.Fprintf(&b, "  cpu        %.2f cpus now %s; %.1f s used\n", ai.CpuUtil, cpuLimit, ai.CpuSeconds)
	fmt.Fprintf(&b, "  memory     %s %s\n", Bytes(uint64(max(ai.MemBytes, 0))), memLimit)
	if ai.DiskLimit > 0 {
		fmt.Fprintf(&b, "  disk       %s of the %s it may hold\n", Bytes(uint64(max(ai.DiskBytes, 0))), Bytes(uint64(ai.DiskLimit)))
	}
	if ai.PidsLimit > 0 {
		fmt.Fprintf(&b, "  processes  %d of the reservation's %d\n", len(ai.Pids), ai.PidsLimit)
	}
	if len(ai.Ports) > 0 {
		var ps []string
		for _, k := range slices.Sorted(maps.Keys(ai.Ports)) {
			ps = append(ps, fmt.Sprintf("%s=%d", k, ai.Ports[k]))
		}
		fmt.Fprintf(&b, "  ports      %s\n", strings.Join(ps, " "))
	}
	if len(ai.Listening) > 0 {
		var ps []string
		for _, p := range ai.Listening {
			ps = append(ps, fmt.Sprint(p))
		}
		fmt.Fprintf(&b, "  listening  %s\n", strings.Join(ps, " "))
	}
	if ai.Restarts > 0 || ai.LastExit != "" {
		fmt.Fprintf(&b, "  restarts   %d (last exit: %s)\n", ai.Restarts, orNone(ai.LastExit))
	}
	if ai.Health != "" {
		fmt.Fprintf(&b, "  health     %s\n", ai.Health)
	}
	if ai.User != "" {
		fmt.Fprintf(&b, "  user       %s (its reservation's own)\n", ai.User)
	}
	switch ai.Network {
	case "none":
		fmt.Fprintf(&b, "  network    none (a namespace of its own, loopback only)\n")
	case "host":
		fmt.Fprintf(&b, "  network    the host's\n")
	}
	fmt.Fprintf(&b, "  changes    %d recorded (undone by remove)\n", ai.Changes)
	if len(ai.Operations) > 0 {
		fmt.Fprintf(&b, "  operations %s\n", strings.Join(ai.Operations, ", "))
	}
	for _, k := range slices.Sorted(maps.Keys(ai.Values)) {
		fmt.Fprintf(&b, "  value      %s = %s\n", k, ai.Values[k])
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// AppList renders instances as a table, one per line.
func AppList(list []*wire.AppInstance) string {
	if len(list) == 0 {
		return "no applications\n"
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tMANAGER\tAPP\tSTATE\tCPU\tMEMORY\tRESTARTS")
	for _, ai := range list {
		cpu := fmt.Sprintf("%.2f", ai.CpuUtil)
		if ai.CpuLimit > 0 {
			cpu += fmt.Sprintf("/%g", ai.CpuLimit)
		}
		mem := Bytes(uint64(max(ai.MemBytes, 0)))
		if ai.MemLimit > 0 {
			mem += "/" + Bytes(uint64(ai.MemLimit))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%s\t%s\t%d\n", ai.Id, ai.Manager, ai.App, ai.Version, ai.State, cpu, mem, ai.Restarts)
	}
	tw.Flush()
	return b.String()
}
