package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

// jobCommands are the subcommands of `gridmgr job`.
var jobCommands = []subcommand{
	{"submit", "FILE", "submit a job file (docs/jobs.md): its program, inputs and every index", cmdJobSubmit},
	{"q", "[JOB…]", "list jobs: yours, --user's or --all; --ended adds completed, failed and removed ones", cmdJobQ},
	{"why", "JOB", "why a job waits: its state, and what the grid answers its requirement now", cmdJobWhy},
	{"log", "JOB [-f]", "a job's history: matched, started, exited, retried … (-f follows until it ends)", cmdJobLog},
	{"hold", "JOB…", "hold jobs: they wait (a running one is stopped) until unhold", jobOpCommand("hold")},
	{"unhold", "JOB…", "let held jobs run again", jobOpCommand("unhold")},
	{"rm", "JOB…", "remove jobs (a running one is stopped)", jobOpCommand("rm")},
	{"wait", "JOB…", "wait until jobs end, then fetch their results into their output_dir", cmdJobWait},
	{"get", "JOB [-o DIR]", "fetch a job's results (stdout, stderr, outputs, exit status)", cmdJobGet},
}

func cmdJob(c *cli, args []string) error {
	return runGroup(c, "job", "A job is a program to run on the grid, once or as an array of indexes, with\n"+
		"the files it reads and writes, described by a job file (docs/jobs.md). The\n"+
		"manager you submit to keeps the queue: it matches each index, reserves,\n"+
		"stages, starts, retries and brings the results back. JOB is CLUSTER (every\n"+
		"index of a submit, as submit printed it) or CLUSTER[INDEX]; a workflow's id\n"+
		"names every job of it ('gridmgr dag').", jobCommands, args)
}

// jobTarget is the target of a job subcommand, with its own --timeout
// default.
func jobTarget(fs *flagSet, withJSON bool, timeout time.Duration) *target {
	t := addTarget(fs, withJSON)
	*t.timeout = timeout
	fs.Lookup("timeout").DefValue = text.FormatDuration(timeout)
	return t
}

// checkJobIDs says what is wrong with the JOB arguments: CLUSTER or
// CLUSTER[INDEX].
func checkJobIDs(ids []string) error {
	for _, id := range ids {
		cl, idx, indexed := strings.Cut(id, "[")
		ok := cl != "" && !strings.ContainsAny(cl, " /\\]")
		if indexed {
			n, err := strconv.ParseUint(strings.TrimSuffix(idx, "]"), 10, 32)
			ok = ok && strings.HasSuffix(idx, "]") && err == nil && strconv.FormatUint(n, 10)+"]" == idx
		}
		if !ok {
			return usageErr("%q is not a job: write CLUSTER or CLUSTER[INDEX], as 'gridmgr job submit' printed it (gm152.17, gm152.17[3])", id)
		}
	}
	return nil
}

// jobClient is withClient for the job subcommands: at least minArgs job
// ids, checked before the manager is asked.
func jobClient(fs *flagSet, t *target, args []string, minArgs, maxArgs int, missing string,
	fn func(ctx context.Context, cl *client.Client, pos []string) error) error {
	return withClient(fs, t, args, maxArgs, func(ctx context.Context, cl *client.Client, pos []string) error {
		if len(pos) < minArgs {
			return usageErr("%s\n%s", missing, fs.seeHelp())
		}
		if err := checkJobIDs(pos); err != nil {
			return err
		}
		return fn(ctx, cl, pos)
	})
}

// preJobArgs parses args for their count and ids before dialing (so a
// stranger learns what to give before being asked which manager).
func preJobArgs(fs *flagSet, args []string, minArgs, maxArgs int, missing string) error {
	pos, err := parse(fs, args, maxArgs)
	if err != nil {
		return err
	}
	if len(pos) < minArgs {
		return usageErr("%s\n%s", missing, fs.seeHelp())
	}
	return checkJobIDs(pos)
}

func cmdJobSubmit(c *cli, args []string) error {
	fs := c.newFlags("job submit", "-n ADDR | -d DIR [flags] FILE",
		"Submit a job file (docs/jobs.md): read and check it, pack its program (a\n"+
			"single executable or a directory; a .gapp bundle is sent as it is), send\n"+
			"the program and the inputs the manager does not hold yet (an interrupted\n"+
			"upload goes on where it stopped), then queue one job per index. Nothing\n"+
			"outside the job file's directory is read. A submit whose answer was lost is\n"+
			"sent again with the same request id, and taken once.")
	t := jobTarget(fs, true, 10*time.Minute)
	user := fs.String("user", "", "the user to submit as (default: the manager's account of this client)")
	reqID := fs.String("request-id", "", "the submit's request id, to submit again one whose answer was lost (default: a new one)")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageErr("say which job file to submit\n%s", fs.seeHelp())
	}
	file := pos[0]
	if st, err := os.Stat(file); err != nil {
		return usageErr("cannot read %s", fileErr(err))
	} else if st.IsDir() {
		return usageErr("%s is a directory: give the job file (job.toml)", file)
	}
	ctx, cancel := t.context()
	defer cancel()
	cl, err := t.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	s, err := cl.SubmitJobFile(ctx, file, client.SubmitOptions{User: *user, RequestID: *reqID,
		Progress: func(s string) { fmt.Fprintln(c.stderr, s) },
		Redial: func(ctx context.Context) (*client.Client, error) {
			return client.Connect(ctx, t.opts())
		}})
	if err != nil {
		return submitErr(err)
	}
	t.show(c, &wire.JobReply{Cluster: s.Cluster, Duplicate: s.Duplicate, Message: s.Message}, renderSubmitted(file, s))
	return nil
}

// submitErr is what a submit's error says to the user: what is wrong
// with a file, or a request the manager refused as bad, is a usage error
// (exit 2); anything else is as it came.
func submitErr(err error) error {
	var fe *client.JobFileError
	if errors.As(err, &fe) {
		return usageErr("%s", fe.Err.Error())
	}
	var re *client.RemoteError
	if errors.As(err, &re) && re.Code == wire.ErrorReply_CODE_BAD_REQUEST {
		return usageErr("%s", re.Message)
	}
	return err
}

// renderSubmitted is "submitted job.toml as gm152.17 (20 jobs: gm152.17[0]
// … gm152.17[19])".
func renderSubmitted(file string, s *client.Submitted) string {
	var b strings.Builder
	fmt.Fprintf(&b, "submitted %s as %s", file, s.Cluster)
	if s.Count > 1 {
		fmt.Fprintf(&b, " (%d jobs: %s … %s)", s.Count, s.IDs[0], s.IDs[len(s.IDs)-1])
	}
	if s.Duplicate {
		b.WriteString("; a retry of a submit already taken: nothing new queued")
	}
	b.WriteString("\n")
	return b.String()
}

func cmdJobQ(c *cli, args []string) error {
	fs := c.newFlags("job q", "-n ADDR | -d DIR [flags] [JOB…]",
		"List jobs of the manager's queue: those named, else yours (those this client\n"+
			"submitted), --user's or --all users'. Completed, failed and removed jobs\n"+
			"are left out unless --ended or named.")
	t := jobTarget(fs, true, 10*time.Second)
	user := fs.String("user", "", "this user's jobs")
	all := fs.Bool("all", false, "every user's jobs")
	ended := fs.Bool("ended", false, "also completed, failed and removed jobs")
	limit := countVar(fs, "limit", 0, 0, 5000, "most jobs to list (0: the manager's limit)")
	if err := preJobArgs(fs, args, 0, 10000, ""); err != nil {
		return err
	}
	return jobClient(fs, t, args, 0, 10000, "", func(ctx context.Context, cl *client.Client, ids []string) error {
		rep, err := cl.Jobs(ctx, client.JobFilter{IDs: ids, All: *all, User: *user, Ended: *ended, Limit: *limit})
		if err != nil {
			return err
		}
		out := renderJobs(rep, time.Now())
		if len(rep.Jobs) == 0 && len(ids) == 0 && !*ended {
			out = "no jobs waiting or running; --ended lists the completed, failed and removed ones too\n"
		}
		t.show(c, rep, out)
		return nil
	})
}

// jobStateWord is a job state in the word --json uses ("staging_out").
func jobStateWord(s wire.JobState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATE_"))
}

// ago is "12s ago" for a time in unix ms ("" for none).
func ago(ms int64, now time.Time) string {
	if ms <= 0 {
		return ""
	}
	d := now.Sub(time.UnixMilli(ms))
	if d < time.Second {
		return "now"
	}
	switch {
	case d < time.Minute:
		d = d.Round(time.Second)
	case d < time.Hour:
		d = d.Round(time.Minute)
	default:
		d = d.Round(time.Hour)
	}
	return text.FormatDuration(d) + " ago"
}

// renderJobs is the job table: JOB STATE WHERE SINCE TRIES EXIT REASON.
func renderJobs(rep *wire.JobReply, now time.Time) string {
	var b strings.Builder
	if len(rep.Jobs) == 0 {
		b.WriteString("no jobs\n")
		return b.String()
	}
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tWHERE\tSINCE\tTRIES\tEXIT\tREASON")
	dag := ""
	for i, j := range rep.Jobs {
		// A workflow's jobs as a tree under its id: node, then role.
		id := j.Id
		if j.Dag != "" {
			if j.Dag != dag {
				fmt.Fprintf(tw, "%s\tworkflow %q\t\t\t\t\t\n", j.Dag, j.DagName)
				dag = j.Dag
			}
			branch := "├─"
			if i == len(rep.Jobs)-1 || rep.Jobs[i+1].Dag != j.Dag {
				branch = "└─"
			}
			label := j.Node
			if j.Role != "" {
				label += " (" + j.Role + ")"
			}
			id = fmt.Sprintf("%s %s %s", branch, j.Id, label)
		} else {
			dag = ""
		}
		where := j.Manager
		if where == "" {
			where = "-"
		}
		exit := j.Exit
		if exit == "" && j.Exited {
			exit = fmt.Sprintf("exit %d", j.ExitCode)
		}
		if exit == "" {
			exit = "-"
		}
		reason := strings.Join(strings.Fields(j.Reason), " ")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", id, jobStateWord(j.State), where, ago(j.SinceUnixMs, now), j.Tries, exit, text.Clip(reason, 70))
	}
	tw.Flush()
	if rep.More > 0 {
		fmt.Fprintf(&b, "%d more not listed (--limit, or name them)\n", rep.More)
	}
	return b.String()
}

func cmdJobWhy(c *cli, args []string) error {
	fs := c.newFlags("job why", "-n ADDR | -d DIR [flags] JOB",
		"Say why a job waits: its state and the queue's reason, then its requirement\n"+
			"(with the amounts it reserves) asked of the grid now, with explain: the\n"+
			"managers that would offer, and for the others which clause was false, the\n"+
			"owner's policy, too little free, or drained.")
	t := jobTarget(fs, true, 20*time.Second)
	if err := preJobArgs(fs, args, 1, 1, "give one job (CLUSTER[INDEX])"); err != nil {
		return err
	}
	return jobClient(fs, t, args, 1, 1, "give one job (CLUSTER[INDEX])", func(ctx context.Context, cl *client.Client, ids []string) error {
		rep, err := cl.WhyJob(ctx, ids[0])
		if err != nil {
			return err
		}
		t.show(c, rep, renderWhy(ids[0], rep, time.Now()))
		return nil
	})
}

// renderWhy is the job's state and reason, then what the grid answers.
func renderWhy(id string, rep *wire.JobReply, now time.Time) string {
	var b strings.Builder
	for _, j := range rep.Jobs {
		fmt.Fprintf(&b, "%s: %s", j.Id, jobStateWord(j.State))
		if j.Manager != "" {
			fmt.Fprintf(&b, " at %s", j.Manager)
		}
		if s := ago(j.SinceUnixMs, now); s != "" {
			fmt.Fprintf(&b, " (since %s)", s)
		}
		if j.Reason != "" {
			fmt.Fprintf(&b, ": %s", j.Reason)
		}
		b.WriteString("\n")
	}
	if len(rep.Jobs) == 0 {
		fmt.Fprintf(&b, "%s:\n", id)
	}
	w := rep.Why
	if w == nil {
		b.WriteString("the grid was not asked\n")
		return b.String()
	}
	var names []string
	for _, o := range w.Offers {
		names = append(names, o.Name)
	}
	if len(names) > 0 {
		fmt.Fprintf(&b, "now %d manager(s) would offer what it asks: %s\n", len(names), strings.Join(names, ", "))
	} else {
		b.WriteString("now no manager offers what it asks\n")
	}
	lines := client.SummarizeVerdicts(w.Verdicts)
	if len(lines) > 0 {
		b.WriteString("why not:\n")
		for _, l := range lines {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	if w.VerdictsMore > 0 {
		fmt.Fprintf(&b, "  and %d more manager(s) not shown\n", w.VerdictsMore)
	}
	fmt.Fprintf(&b, "(%d managers looked)\n", w.Visited)
	return b.String()
}

func cmdJobLog(c *cli, args []string) error {
	fs := c.newFlags("job log", "-n ADDR | -d DIR [flags] JOB",
		"Show a job's history, a line per entry: time, what happened (submitted,\n"+
			"matched, reserved, staged, started, exited, retried, lost, held,\n"+
			"completed, failed …), where, and the detail. JOB may be a cluster: each\n"+
			"index's lines, after its id. -f follows until every job named has ended\n"+
			"(or Ctrl-C).")
	t := jobTarget(fs, true, 10*time.Second)
	follow := fs.Bool("f", false, "follow: keep printing new entries until the job ends")
	every := fs.duration("every", time.Second, positive, 0, "with -f: how often to ask")
	if err := preJobArgs(fs, args, 1, 1000, "give a job (CLUSTER or CLUSTER[INDEX])"); err != nil {
		return err
	}
	if *follow && *t.json {
		return usageErr("-f prints lines as they come: not with --json")
	}
	pos, _ := parse(fs, args, 1000)
	ctx, cancel := t.context()
	cl, err := t.dial(ctx)
	cancel()
	if err != nil {
		return err
	}
	defer cl.Close()
	stop := c.interrupt
	if stop == nil && *follow {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sig)
		done := make(chan struct{})
		go func() { <-sig; close(done) }()
		stop = done
	}
	shown := map[string]int{}
	for {
		ctx, cancel := t.context()
		rep, err := cl.JobLog(ctx, pos)
		cancel()
		if err != nil {
			var re *client.RemoteError
			if errors.As(err, &re) && re.Code == wire.ErrorReply_CODE_BAD_REQUEST {
				return usageErr("%s", re.Message)
			}
			return err
		}
		if !*follow {
			t.show(c, rep, renderJobLog(rep, nil))
			return nil
		}
		fmt.Fprint(c.stdout, renderJobLog(rep, shown))
		ended := true
		for _, j := range rep.Jobs {
			ended = ended && client.JobEnded(j.State)
		}
		if ended {
			return nil
		}
		select {
		case <-stop:
			return nil
		case <-time.After(*every):
		}
	}
}

// renderJobLog is the entries of each job not yet shown (shown: how many
// of each were; nil: all), a line each; with several jobs, each line
// starts with its job's id.
func renderJobLog(rep *wire.JobReply, shown map[string]int) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	for _, j := range rep.Jobs {
		from := 0
		if shown != nil {
			from = min(shown[j.Id], len(j.Log))
			shown[j.Id] = len(j.Log)
		}
		for _, e := range j.Log[from:] {
			if len(rep.Jobs) > 1 {
				fmt.Fprintf(tw, "%s\t", j.Id)
			}
			where := e.Manager
			if where == "" {
				where = "-"
			}
			detail := strings.Join(strings.Fields(e.Detail), " ")
			if e.Try > 0 && !strings.Contains(detail, "try ") {
				detail = strings.TrimSpace(fmt.Sprintf("try %d %s", e.Try, detail))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", time.UnixMilli(e.TimeUnixMs).Format("2006-01-02 15:04:05"), e.Type, where, detail)
		}
	}
	tw.Flush()
	return b.String()
}

// jobOpCommand is hold, unhold or rm.
func jobOpCommand(name string) func(c *cli, args []string) error {
	about := map[string]string{
		"hold": "Hold jobs: each waits, held, until 'gridmgr job unhold' (or is removed); one\n" +
			"that runs is stopped, and is run again from the start when unheld.",
		"unhold": "Let held jobs run again: each is matched anew (its tries count on).",
		"rm":     "Remove jobs from the queue: one that runs is stopped and its reservation\nreleased. Their results stay until the queue forgets them.",
	}[name]
	return func(c *cli, args []string) error {
		fs := c.newFlags("job "+name, "-n ADDR | -d DIR [flags] JOB…", about)
		t := jobTarget(fs, false, 10*time.Second)
		var reason *string
		if name == "hold" {
			reason = fs.String("reason", "", "why, for 'gridmgr job q' to show")
		}
		if err := preJobArgs(fs, args, 1, 10000, "name the jobs (CLUSTER or CLUSTER[INDEX])"); err != nil {
			return err
		}
		return jobClient(fs, t, args, 1, 10000, "name the jobs", func(ctx context.Context, cl *client.Client, ids []string) error {
			var rep *wire.JobReply
			var err error
			switch name {
			case "hold":
				rep, err = cl.HoldJobs(ctx, ids, *reason)
			case "unhold":
				rep, err = cl.UnholdJobs(ctx, ids)
			default:
				rep, err = cl.RemoveJobs(ctx, ids)
			}
			if err != nil {
				return err
			}
			for _, j := range rep.Jobs {
				fmt.Fprintf(c.stdout, "%s %s\n", j.Id, jobStateWord(j.State))
			}
			return nil
		})
	}
}

func cmdJobWait(c *cli, args []string) error {
	fs := c.newFlags("job wait", "-n ADDR | -d DIR [flags] JOB…",
		"Wait until every job named has ended (completed, failed, removed, or held),\n"+
			"then fetch each one's results into its output_dir (the directory its job\n"+
			"file named, on this host) unless --no-fetch, and print a line per job.\n"+
			"Exit status: 0 if every job completed, 1 if any failed, was held or\n"+
			"removed, 2 on a usage error or when --timeout passed first.")
	t := jobTarget(fs, false, 24*time.Hour)
	noFetch := fs.Bool("no-fetch", false, "do not fetch the results")
	every := fs.duration("every", time.Second, positive, 0, "how often to ask")
	if err := preJobArgs(fs, args, 1, 10000, "name the jobs (CLUSTER or CLUSTER[INDEX])"); err != nil {
		return err
	}
	pos, _ := parse(fs, args, 10000)
	ctx, cancel := t.context()
	defer cancel()
	cl, err := t.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	infos, err := cl.WaitJobs(ctx, pos, *every, func(j *wire.JobInfo) {
		fmt.Fprintf(c.stderr, "%s %s%s\n", j.Id, jobStateWord(j.State), atManager(j))
	})
	if errors.Is(err, context.DeadlineExceeded) {
		var left []string
		for _, j := range infos {
			if !client.JobEnded(j.State) {
				left = append(left, j.Id+" "+jobStateWord(j.State))
			}
		}
		fmt.Fprintf(c.stderr, "gridmgr job wait: %s passed (--timeout); %d job(s) not ended: %s\n",
			text.FormatDuration(*t.timeout), len(left), text.Clip(strings.Join(left, ", "), 300))
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
	for _, j := range infos {
		failed = failed || j.State != wire.JobState_JOB_STATE_COMPLETED
		line := fmt.Sprintf("%s %s", j.Id, jobStateWord(j.State))
		if x := exitText(j); x != "" {
			line += " " + x
		}
		if j.Blocked {
			failed = true
		}
		// A held or removed job's results are not accepted: nothing to
		// fetch (its reason says why it stopped).
		fetch := j.State == wire.JobState_JOB_STATE_COMPLETED || j.State == wire.JobState_JOB_STATE_FAILED
		if !*noFetch && fetch && len(j.Results) > 0 && j.OutputDir != "" {
			got, err := cl.FetchResults(ctx, j, j.OutputDir)
			if err != nil {
				fmt.Fprintf(c.stdout, "%s; results not fetched: %s\n", line, plainError(err))
				failed = true
				continue
			}
			line += fmt.Sprintf(" → %s (%d files)", j.OutputDir, len(got)-1)
		}
		if j.Reason != "" && j.State != wire.JobState_JOB_STATE_COMPLETED {
			line += ": " + text.Clip(strings.Join(strings.Fields(j.Reason), " "), 200)
		}
		fmt.Fprintln(c.stdout, line)
	}
	if failed {
		return errSilentFail
	}
	return nil
}

func atManager(j *wire.JobInfo) string {
	if j.Manager == "" {
		return ""
	}
	return " at " + j.Manager
}

// exitText is "exit 0", "signal KILL", or "".
func exitText(j *wire.JobInfo) string {
	if j.Exit != "" {
		return j.Exit
	}
	if j.Exited {
		return fmt.Sprintf("exit %d", j.ExitCode)
	}
	return ""
}

func cmdJobGet(c *cli, args []string) error {
	fs := c.newFlags("job get", "-n ADDR | -d DIR [flags] JOB",
		"Fetch the results of a job that has ended — stdout, stderr, the outputs its\n"+
			"job file names (under out/) and exit_status — into its output_dir, or -o\n"+
			"DIR (for a cluster: DIR/INDEX for each index). Each file is written whole\n"+
			"under a temporary name, then renamed.")
	t := jobTarget(fs, false, 10*time.Minute)
	out := fs.String("o", "", "directory to write into (default: the job's output_dir)")
	if err := preJobArgs(fs, args, 1, 1, "give a job (CLUSTER or CLUSTER[INDEX])"); err != nil {
		return err
	}
	return jobClient(fs, t, args, 1, 1, "give a job", func(ctx context.Context, cl *client.Client, ids []string) error {
		rep, err := cl.Jobs(ctx, client.JobFilter{IDs: ids, Ended: true})
		if err != nil {
			return err
		}
		failed := false
		for _, j := range rep.Jobs {
			dir := j.OutputDir
			if *out != "" {
				dir = *out
				if len(rep.Jobs) > 1 {
					dir = filepath.Join(*out, strconv.Itoa(int(j.Index)))
				}
			}
			if len(j.Results) == 0 {
				fmt.Fprintf(c.stdout, "%s %s: no results (yet)\n", j.Id, jobStateWord(j.State))
				failed = true
				continue
			}
			if dir == "" {
				return usageErr("job %s names no output_dir: give -o DIR", j.Id)
			}
			got, err := cl.FetchResults(ctx, j, dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "%s %s %s → %s (%d files)\n", j.Id, jobStateWord(j.State), exitText(j), dir, len(got)-1)
		}
		if failed {
			return errSilentFail
		}
		return nil
	})
}
