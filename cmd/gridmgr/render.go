package main

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gridmgr/gridmgr/node/pb"
)

// fmtDur prints a duration with precision that suits its size.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d/time.Microsecond)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	case d < time.Minute:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

func stateName(s pb.RelationState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "RELATION_STATE_"))
}

func shortPeer(p string) string {
	if len(p) <= 12 {
		return p
	}
	return p[:4] + "…" + p[len(p)-6:]
}

// renderTree draws a tree answer:
//
//	gm152  12D3…Xy9abc  /ip4/…
//	├── gm154  up  rtt 0.21ms
//	│   └── gm160  up  rtt 0.18ms
//	└── gm156  down  last heard 12s ago
func renderTree(root *pb.TreeNode) string {
	var b strings.Builder
	addr := ""
	if len(root.Addrs) > 0 {
		addr = "  " + root.Addrs[0]
	}
	fmt.Fprintf(&b, "%s  %s%s\n", root.Name, shortPeer(root.Peer), addr)
	if root.Incomplete != "" {
		fmt.Fprintf(&b, "  (%s)\n", incompleteText(root.Incomplete))
	}
	var walk func(n *pb.TreeNode, prefix string)
	walk = func(n *pb.TreeNode, prefix string) {
		for i, ch := range n.Children {
			branch, next := "├── ", "│   "
			if i == len(n.Children)-1 {
				branch, next = "└── ", "    "
			}
			fmt.Fprintf(&b, "%s%s%s\n", prefix, branch, nodeLine(ch))
			walk(ch, prefix+next)
		}
	}
	walk(root, "")
	if missing := countIncomplete(root); missing > 0 {
		fmt.Fprintf(&b, "\n%d subtree(s) not shown in full: see the notes in brackets.\n", missing)
	}
	return b.String()
}

func nodeLine(n *pb.TreeNode) string {
	name := n.Name
	if name == "" {
		name = shortPeer(n.Peer)
	}
	s := fmt.Sprintf("%s  %s", name, stateName(n.State))
	if n.State == pb.RelationState_RELATION_STATE_UP || n.State == pb.RelationState_RELATION_STATE_SUSPECT {
		s += "  rtt " + fmtDur(time.Duration(n.RttUs)*time.Microsecond)
	}
	if n.State != pb.RelationState_RELATION_STATE_UP && n.LastHeardMsAgo > 0 {
		s += "  last heard " + fmtDur(time.Duration(n.LastHeardMsAgo)*time.Millisecond) + " ago"
	}
	if n.Incomplete != "" && n.Incomplete != "down" {
		s += "  [" + incompleteText(n.Incomplete) + "]"
	}
	return s
}

func incompleteText(why string) string {
	switch why {
	case "timeout":
		return "subtree did not answer in time"
	case "depth limit":
		return "subtree below the depth limit"
	case "no budget":
		return "not asked: too little time left"
	case "duplicate":
		return "already counted elsewhere in this tree"
	}
	return why
}

func countIncomplete(n *pb.TreeNode) int {
	c := 0
	if n.Incomplete != "" && n.Incomplete != "down" {
		c++
	}
	for _, ch := range n.Children {
		c += countIncomplete(ch)
	}
	return c
}

func renderStatus(st *pb.StatusReply) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  (gridmgr %s, up %s)\n", st.Name, st.Version, fmtDur(time.Duration(st.UptimeMs)*time.Millisecond))
	fmt.Fprintf(&b, "peer id   %s\n", st.Peer)
	for i, a := range st.Addrs {
		label := "          "
		if i == 0 {
			label = "addrs     "
		}
		fmt.Fprintf(&b, "%s%s/p2p/%s\n", label, a, st.Peer)
	}
	fmt.Fprintf(&b, "host      %s (%s/%s), %d cpus, %s memory\n", st.Hostname, st.Os, st.Arch, st.Cpus, fmtBytes(st.MemoryBytes))
	if len(st.Ancestors) == 0 {
		fmt.Fprintf(&b, "ancestors none (a root)\n")
	} else {
		var names []string
		for _, a := range st.Ancestors {
			names = append(names, fmt.Sprintf("%s(%d)", a.Name, a.Depth))
		}
		fmt.Fprintf(&b, "ancestors %s\n", strings.Join(names, " "))
	}
	b.WriteString("\nrelations:\n")
	if len(st.Relations) == 0 {
		b.WriteString("  none\n")
	} else {
		rels := slices.Clone(st.Relations)
		slices.SortStableFunc(rels, func(a, b *pb.RelationInfo) int {
			if a.Role != b.Role {
				return int(b.Role) - int(a.Role) // superiors first
			}
			return strings.Compare(a.Name, b.Name)
		})
		tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ROLE\tNAME\tSTATE\tFOR\tLAST HEARD\tRTT\tPEER\tNOTE")
		for _, r := range rels {
			role := "inferior"
			if r.Role == pb.Role_ROLE_SUPERIOR {
				role = "superior"
				if r.Origin != "" && r.Origin != "configured" {
					role += " (" + r.Origin + ")"
				}
			} else if r.Configured {
				role = "inferior*"
			}
			heard := "never"
			if r.Heard {
				heard = fmtDur(time.Duration(r.LastHeardMsAgo)*time.Millisecond) + " ago"
			}
			rtt := "-"
			if r.RttUs > 0 {
				rtt = fmtDur(time.Duration(r.RttUs) * time.Microsecond)
			}
			note := r.LastError
			if r.NextDialMs > 0 || r.DialAttempts > 0 {
				note = fmt.Sprintf("%d failed attempt(s), next in %s; %s", r.DialAttempts, fmtDur(time.Duration(r.NextDialMs)*time.Millisecond), r.LastError)
			}
			if r.StandsFor != "" && r.State == pb.RelationState_RELATION_STATE_UP {
				note = "in place of " + r.StandsFor
			}
			if r.Standby {
				note = "failed, replaced; dialled to move back once it is up for failover.settle. " + note
			}
			name := r.Name
			if name == "" {
				name = "?"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", role, name, stateName(r.State),
				fmtDur(time.Duration(r.SinceMsAgo)*time.Millisecond), heard, rtt, shortPeer(r.Peer), oneLine(note))
		}
		tw.Flush()
		for _, r := range st.Relations {
			if r.Role == pb.Role_ROLE_INFERIOR && r.Configured {
				b.WriteString("  * named as a superior in the properties file, but it connected first as an inferior\n")
				break
			}
		}
	}
	if len(st.Failovers) > 0 {
		fmt.Fprintf(&b, "\nlooking for a superior in place of: %s (see the events)\n", strings.Join(st.Failovers, ", "))
	}
	if len(st.Events) > 0 {
		b.WriteString("\nrecent events:\n")
		for _, e := range st.Events {
			fmt.Fprintf(&b, "  %8s ago  %s: %s\n", fmtDur(time.Duration(e.MsAgo)*time.Millisecond), e.Name, e.What)
		}
	}
	return b.String()
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

func fmtBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
