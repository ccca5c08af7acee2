// Package sim answers the questions operators ask before they roll a grid
// out — how long a whole-grid query takes at 100,000 managers, what it
// costs each manager, how fast the tree heals when a rack or a region
// goes — with the production manager code itself: every simulated manager
// is an unchanged node.Core, driven over node/memnet (one event queue, a
// virtual clock, each Core ticked only when its NextDeadline is due, the
// managers of each window of the smallest link delay run on all cores), so
// the figures are those of the code that ships, not of a model written
// beside it.
//
// A Scenario (Parse reads one from TOML; Quick builds the common one)
// gives the grid's shape, its hosts, a wide-area latency model (racks,
// regions, jitter, loss) and a timeline of actions: queries and
// reservations (at once or as streams), kills, partitions and heals,
// restarts, churn, admin commands, rewiring. Run carries it out and
// returns Figures per action — latencies with percentiles, managers
// visited, messages, reconvergence times, reservation outcomes, the cost
// at rest — each beside its analytic Model where there is one, and the
// invariants it checked throughout (no cycle in the hierarchy, no manager
// reserving more than it has) as Violations.
//
// A run is a function of the scenario and its seed: the same input gives
// the same figures, byte for byte (WriteCSV). Wall time and memory are
// reported apart (Result.Wall), as they depend on the machine.
//
// The caller must not share a Run's scenario with another goroutine (a
// Run starts its own workers, Options.Workers, and keeps what they do in
// the order one goroutine would), and should give the process room: about
// 6.6 KB of live heap per manager, and a quarter more for the collector
// (EstimateMemory says how much a scenario needs; `gridmgr sim` refuses a
// run the memory available cannot hold). While it runs, Run lowers the
// runtime's memory limit to what the run needs, unless GOMEMLIMIT is set
// (sim/run.go, bound); with Options.HugePages (Linux) it first has the
// runtime map that heap and asks the kernel to back it with transparent
// huge pages (sim/hugepages_linux.go).
// `gridmgr sim` is the command; sim/scenarios/README.md documents the file
// format and shows the shipped scenarios' figures.
package sim
