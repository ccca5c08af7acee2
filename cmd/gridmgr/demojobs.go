package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/jobs"
	"github.com/gridmgr/gridmgr/wire"
)

// demoJobsAt is the manager the demo's user submits to (the one on "their
// host"); its jobs run anywhere in the grid.
const demoJobsAt = "gm160"

// demoJobCount is the size of the demo's array.
const demoJobCount = 20

// demoJobProgram sums 1..N for N = (index+1) × 1000 and writes it to
// out/sum-INDEX.txt.
const demoJobProgram = `#!/bin/sh
# sum.sh INDEX: the sum of 1..N for N = (INDEX+1) * 1000, into out/sum-INDEX.txt
n=$(( ($1 + 1) * 1000 ))
mkdir -p out
echo $(( n * (n + 1) / 2 )) > out/sum-$1.txt
echo "index $1: summed 1..$n on $(hostname)"
`

const demoJobFile = `# A job array: 20 indexes, each sums a range and writes a file.
name = "sums"
program = "sum.sh"
args = ["${INDEX}"]
count = 20
cpus = 1
memory = "64MiB"
runtime = "1m"
outputs = ["sum-${INDEX}.txt"]
output_dir = "results"
max_retries = 2
`

// demoJobs submits an array of 20 jobs at gm160, waits for them, brings
// their results back and says where they ran and where the results are.
func demoJobs(c *cli, g *demoGrid) error {
	out := c.stdout
	fmt.Fprintf(out, "\njobs: a user at %s submits an array of %d jobs (each sums a range and writes a file) and walks away\n", demoJobsAt, demoJobCount)
	if os.Geteuid() != 0 {
		fmt.Fprintf(out, "  skipped: jobs run as confined applications, which need root here (cgroups, namespaces)\n")
		return nil
	}
	dir := filepath.Join(g.dir, "jobs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sum.sh"), []byte(demoJobProgram), 0o755); err != nil {
		return err
	}
	file := filepath.Join(dir, "sums.toml")
	if err := os.WriteFile(file, []byte(demoJobFile), 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := client.Connect(ctx, client.Options{Addr: g.mgrs[demoJobsAt].Addr(), OneOff: true})
	if err != nil {
		return err
	}
	defer cl.Close()
	start := time.Now()
	sub, err := cl.SubmitJobFile(ctx, file, client.SubmitOptions{User: "demo"})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  %s submitted as %s (%s … %s), written to %s's queue before the answer\n",
		filepath.Base(file), sub.Cluster, sub.IDs[0], sub.IDs[len(sub.IDs)-1], demoJobsAt)
	infos, err := cl.WaitJobs(ctx, []string{sub.Cluster}, 100*time.Millisecond, nil)
	if err != nil {
		var open []string
		for _, in := range infos {
			if !client.JobEnded(in.State) {
				open = append(open, fmt.Sprintf("%s %s at %q (%s)", in.Id, jobStateWord(in.State), in.Manager, in.Reason))
			}
		}
		return fmt.Errorf("waiting for the jobs (%d of %d not ended: %s): %w", len(open), len(infos), strings.Join(open, "; "), err)
	}
	took := time.Since(start)
	where := map[string]int{}
	done, reservations := 0, map[string]bool{}
	for _, in := range infos {
		if in.State == wire.JobState_JOB_STATE_COMPLETED {
			done++
		}
		where[in.Manager]++
		reservations[in.Reservation] = true
		if _, err := cl.FetchResults(ctx, in, in.OutputDir); err != nil {
			return fmt.Errorf("bringing back %s: %w", in.Id, err)
		}
	}
	var spread []string
	for _, m := range slices.Sorted(maps.Keys(where)) {
		spread = append(spread, fmt.Sprintf("%s %d", m, where[m]))
	}
	reused := ""
	if len(reservations) < len(infos) {
		reused = fmt.Sprintf(" (%d jobs ran on a reservation a job before them had: it was kept for the same user's next job)", len(infos)-len(reservations))
	}
	fmt.Fprintf(out, "  %d of %d completed in %s, on %s, using %d reservations%s\n",
		done, len(infos), fmtDur(took), strings.Join(spread, ", "), len(reservations), reused)
	for _, in := range infos {
		if in.State != wire.JobState_JOB_STATE_COMPLETED {
			fmt.Fprintf(out, "  %s %s: %s\n", in.Id, jobs.StateName(in.State), in.Reason)
		}
	}
	ex := infos[7]
	data, err := os.ReadFile(filepath.Join(ex.OutputDir, "out", fmt.Sprintf("sum-%d.txt", ex.Index)))
	if err != nil {
		return err
	}
	rel, _ := filepath.Rel(dir, ex.OutputDir)
	fmt.Fprintf(out, "  results landed in %s/{0..%d}/ (stdout, stderr, exit_status, out/sum-N.txt); %s/out/sum-%d.txt holds %s",
		filepath.Join(dir, "results"), demoJobCount-1, rel, ex.Index, data)
	if done != len(infos) {
		return fmt.Errorf("%d of %d jobs did not complete", len(infos)-done, len(infos))
	}
	return nil
}
