package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

// dagCommands are the subcommands of `gridmgr dag`.
var dagCommands = []subcommand{
	{"submit", "FILE [--wait]", "submit a workflow file (docs/jobs.md, Workflows): nodes of jobs that wait for the nodes they come after", cmdDagSubmit},
	{"status", "[DAG…]", "each workflow's state and its nodes': yours, --user's or --all; --ended adds those that ended", cmdDagStatus},
	{"wait", "DAG…", "wait until workflows end, then fetch their jobs' results", cmdDagWait},
	{"rerun", "DAG", "run again what did not complete of a workflow that failed or was removed", cmdDagRerun},
	{"rm", "DAG", "remove a workflow: every job of it not ended (one running is stopped)", cmdDagRm},
}

func cmdDag(c *cli, args []string) error {
	return runGroup(c, "dag", "A workflow is jobs that depend on each other: nodes, each a job file or a\n"+
		"job written in the node, that run once every node they come after has\n"+
		"completed (docs/jobs.md, Workflows). The manager you submit to holds it in\n"+
		"its durable queue, so it goes on after a crash of that manager, and after\n"+
		"a node failed for good, 'dag rerun' runs only what did not complete. DAG is\n"+
		"the id submit printed (gm152.17); 'gridmgr job q' lists its jobs, and 'job\n"+
		"hold', 'unhold', 'log' take it too.", dagCommands, args)
}

func cmdDagSubmit(c *cli, args []string) error {
	fs := c.newFlags("dag submit", "-n ADDR | -d DIR [flags] FILE",
		"Submit a workflow file: read and check it and every job file it names,\n"+
			"pack each program once, send what the manager does not hold yet, and\n"+
			"queue the workflow. Nothing outside the workflow file's directory is\n"+
			"read. Pre and post commands run at the manager you submit to. A submit\n"+
			"whose answer was lost is sent again with the same request id, and taken\n"+
			"once. With --wait, wait for it as 'gridmgr dag wait' does.")
	t := jobTarget(fs, true, 10*time.Minute)
	user := fs.String("user", "", "the user to submit as (default: the manager's account of this client)")
	reqID := fs.String("request-id", "", "the submit's request id, to submit again one whose answer was lost (default: a new one)")
	wait := fs.Bool("wait", false, "wait until the workflow ends and fetch its results (exit 1 unless it completed)")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageErr("say which workflow file to submit\n%s", fs.seeHelp())
	}
	file := pos[0]
	if st, err := os.Stat(file); err != nil {
		return usageErr("cannot read %s", fileErr(err))
	} else if st.IsDir() {
		return usageErr("%s is a directory: give the workflow file (flow.toml)", file)
	}
	if *wait && *t.json {
		return usageErr("--wait prints lines as they come: not with --json")
	}
	ctx, cancel := t.context()
	defer cancel()
	cl, err := t.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	st, err := cl.Status(ctx)
	if err != nil {
		return err
	}
	s, err := cl.SubmitFlowFile(ctx, file, st.Name, client.SubmitOptions{User: *user, RequestID: *reqID,
		Progress: func(s string) { fmt.Fprintln(c.stderr, s) },
		Redial: func(ctx context.Context) (*client.Client, error) {
			return client.Connect(ctx, t.opts())
		}})
	if err != nil {
		return submitErr(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "submitted %s as workflow %s", file, s.ID)
	if in := s.Info; in != nil {
		var names []string
		for _, n := range in.Nodes {
			names = append(names, n.Name)
		}
		fmt.Fprintf(&b, " %q: %d nodes (%s)", in.Name, len(in.Nodes), text.Clip(strings.Join(names, ", "), 200))
	}
	if s.Duplicate {
		b.WriteString("; a retry of a submit already taken: nothing new queued")
	}
	b.WriteString("\n")
	if !*wait {
		rep := &wire.JobReply{Cluster: s.ID, Duplicate: s.Duplicate, Message: s.Message}
		if s.Info != nil {
			rep.Dags = []*wire.DagInfo{s.Info}
		}
		t.show(c, rep, b.String())
		return nil
	}
	fmt.Fprint(c.stdout, b.String())
	return waitDags(ctx, c, cl, []string{s.ID}, time.Second, false, *t.timeout)
}

func cmdDagStatus(c *cli, args []string) error {
	fs := c.newFlags("dag status", "-n ADDR | -d DIR [flags] [DAG…]",
		"Show workflows: those named, else yours (those this client submitted),\n"+
			"--user's or --all users'; those that ended only with --ended or named. For\n"+
			"each, its state (running, held, completed, failed: a node failed and\n"+
			"nothing else can run, removed) and a line per node: its state, its jobs\n"+
			"by state, the nodes it comes after and why it waits or failed.")
	t := jobTarget(fs, true, 10*time.Second)
	user := fs.String("user", "", "this user's workflows")
	all := fs.Bool("all", false, "every user's workflows")
	ended := fs.Bool("ended", false, "also workflows that ended")
	if err := preJobArgs(fs, args, 0, 100, ""); err != nil {
		return err
	}
	return jobClient(fs, t, args, 0, 100, "", func(ctx context.Context, cl *client.Client, ids []string) error {
		rep, err := cl.Dags(ctx, ids, client.JobFilter{All: *all, User: *user, Ended: *ended})
		if err != nil {
			return err
		}
		out := renderDags(rep.Dags, time.Now())
		if len(rep.Dags) == 0 && len(ids) == 0 && !*ended {
			out = "no workflows running; --ended lists those that ended too\n"
		}
		t.show(c, rep, out)
		return nil
	})
}

// renderDags is each workflow's line, then its nodes' table.
func renderDags(ds []*wire.DagInfo, now time.Time) string {
	var b strings.Builder
	if len(ds) == 0 {
		return "no workflows\n"
	}
	for i, d := range ds {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s %q of %s: %s (%s), submitted %s\n", d.Id, d.Name, d.User, d.State, client.DagSummary(d), ago(d.SubmittedUnixMs, now))
		tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NODE\tSTATE\tJOBS\tCLUSTER\tAFTER\tREASON")
		for _, n := range d.Nodes {
			after := strings.Join(n.After, ",")
			if after == "" {
				after = "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.State, jobCounts(n.Jobs), n.Cluster, text.Clip(after, 40), text.Clip(strings.Join(strings.Fields(n.Reason), " "), 90))
		}
		tw.Flush()
	}
	return b.String()
}

// jobCounts is "3 completed, 1 running" from a node's jobs by state.
func jobCounts(m map[string]uint32) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

func cmdDagWait(c *cli, args []string) error {
	fs := c.newFlags("dag wait", "-n ADDR | -d DIR [flags] DAG…",
		"Wait until every workflow named has ended (completed; failed: a node failed\n"+
			"and nothing else can run; or removed), printing each change of its nodes,\n"+
			"then fetch the results of its jobs that ended into their output_dir\n"+
			"unless --no-fetch. Exit status: 0 if every workflow completed, 1 if any\n"+
			"failed or was removed, 2 on a usage error or when --timeout passed first.")
	t := jobTarget(fs, false, 24*time.Hour)
	noFetch := fs.Bool("no-fetch", false, "do not fetch the results")
	every := fs.duration("every", time.Second, positive, 0, "how often to ask")
	if err := preJobArgs(fs, args, 1, 100, "name the workflows (as 'gridmgr dag submit' printed them)"); err != nil {
		return err
	}
	pos, _ := parse(fs, args, 100)
	ctx, cancel := t.context()
	defer cancel()
	cl, err := t.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	return waitDags(ctx, c, cl, pos, *every, *noFetch, *t.timeout)
}

// waitDags waits for the workflows ids, prints how each ended and
// fetches its jobs' results.
func waitDags(ctx context.Context, c *cli, cl *client.Client, ids []string, every time.Duration, noFetch bool, timeout time.Duration) error {
	ds, err := cl.WaitDags(ctx, ids, every, func(d *wire.DagInfo) {
		fmt.Fprintf(c.stderr, "%s %s: %s\n", d.Id, d.State, client.DagSummary(d))
	})
	if errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(c.stderr, "gridmgr dag wait: %s passed (--timeout); the workflows go on ('gridmgr dag status')\n", text.FormatDuration(timeout))
		return exitCode(exitUsage)
	}
	if err != nil {
		var re *client.RemoteError
		if errors.As(err, &re) && re.Code == wire.ErrorReply_CODE_NOT_FOUND {
			return usageErr("%s", re.Message)
		}
		return err
	}
	failed := false
	for _, d := range ds {
		failed = failed || d.State != "completed"
		line := fmt.Sprintf("%s %q %s", d.Id, d.Name, d.State)
		if !noFetch {
			rep, err := cl.Jobs(ctx, client.JobFilter{IDs: []string{d.Id}, Ended: true})
			if err != nil {
				return err
			}
			files, dirs := 0, map[string]bool{}
			for _, j := range rep.Jobs {
				fetch := j.State == wire.JobState_JOB_STATE_COMPLETED || j.State == wire.JobState_JOB_STATE_FAILED
				if !fetch || len(j.Results) == 0 || j.OutputDir == "" {
					continue
				}
				got, err := cl.FetchResults(ctx, j, j.OutputDir)
				if err != nil {
					fmt.Fprintf(c.stdout, "%s: results of %s not fetched: %s\n", d.Id, j.Id, plainError(err))
					failed = true
					continue
				}
				files += len(got) - 1
				dirs[j.OutputDir] = true
			}
			if files > 0 {
				line += fmt.Sprintf("; %d result files fetched into %d directories", files, len(dirs))
			}
		}
		for _, n := range d.Nodes {
			if n.State == "failed" || n.State == "removed" {
				line += fmt.Sprintf("; node %s %s: %s", n.Name, n.State, text.Clip(n.Reason, 200))
				break
			}
		}
		if d.State == "failed" || d.State == "removed" {
			line += fmt.Sprintf(" ('gridmgr dag rerun %s' runs what did not complete)", d.Id)
		}
		fmt.Fprintln(c.stdout, line)
	}
	if failed {
		return errSilentFail
	}
	return nil
}

func cmdDagRerun(c *cli, args []string) error {
	fs := c.newFlags("dag rerun", "-n ADDR | -d DIR [flags] DAG",
		"Run again what did not complete of a workflow that failed or was removed\n"+
			"(DAGMan's rescue DAG): the failed and removed jobs of each node that did not\n"+
			"complete wait again for their turn, with their retries counted anew, and\n"+
			"the nodes after them run when it comes. Completed jobs are not run again.")
	t := jobTarget(fs, true, 30*time.Second)
	if err := preJobArgs(fs, args, 1, 1, "name the workflow (as 'gridmgr dag submit' printed it)"); err != nil {
		return err
	}
	return jobClient(fs, t, args, 1, 1, "name the workflow", func(ctx context.Context, cl *client.Client, ids []string) error {
		rep, err := cl.RerunDag(ctx, ids[0])
		if err != nil {
			var re *client.RemoteError
			if errors.As(err, &re) && (re.Code == wire.ErrorReply_CODE_BAD_REQUEST || re.Code == wire.ErrorReply_CODE_NOT_FOUND) {
				return usageErr("%s", re.Message)
			}
			return err
		}
		out := rep.Message + "\n"
		if len(rep.Dags) > 0 {
			out += renderDags(rep.Dags, time.Now())
		}
		t.show(c, rep, out)
		return nil
	})
}

func cmdDagRm(c *cli, args []string) error {
	fs := c.newFlags("dag rm", "-n ADDR | -d DIR [flags] DAG",
		"Remove a workflow: every job of it that has not ended is removed (one that\n"+
			"runs is stopped and its reservation released). 'gridmgr dag rerun' can run\n"+
			"it again later, from where it stood.")
	t := jobTarget(fs, false, 30*time.Second)
	if err := preJobArgs(fs, args, 1, 1, "name the workflow (as 'gridmgr dag submit' printed it)"); err != nil {
		return err
	}
	return jobClient(fs, t, args, 1, 1, "name the workflow", func(ctx context.Context, cl *client.Client, ids []string) error {
		st, err := cl.Dags(ctx, ids, client.JobFilter{})
		if err != nil {
			return err
		}
		if len(st.Dags) != 1 {
			return usageErr("%s is not a workflow", ids[0])
		}
		live, all := 0, 0
		for _, n := range st.Dags[0].Nodes {
			for state, k := range n.Jobs {
				all += int(k)
				if state != "completed" && state != "failed" && state != "removed" {
					live += int(k)
				}
			}
		}
		if _, err := cl.RemoveJobs(ctx, ids); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "workflow %s %q removed: %s removed, %s had ended before\n", ids[0], st.Dags[0].Name, plural(live, "job"), plural(all-live, "job"))
		return nil
	})
}

// plural is "1 job", "3 jobs".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
