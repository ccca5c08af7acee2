// Package jobs is the job layer's pure core: the job description
// (job.toml: Parse, ParseAt, Description.Expand), the workflow file
// (flow.toml: ParseFlow), and the queue (Queue), the state machine that
// holds a manager's jobs and workflows and decides what happens to each:
// match, reserve, stage, start, poll, fetch, retry, move, hold, release a
// workflow's node when the nodes it comes after have completed.
//
// It is pure (docs/design.md §2): no network, no disk, no clock, no
// goroutines. The caller reads the files and passes their bytes; the
// paths they name are checked lexically here (relative, inside the
// file's directory), and the caller opens them under that directory (an
// os.Root) and finds out what they are. A relative begin or deadline
// ("+2h") counts from the submission: ParseAt takes that time.
//
// The Queue's caller (node's jobs module) owns it alone: it passes time
// as now, writes every Ready.Saves before it starts Ready.Acts or answers
// a request that depends on them, does each Act and reports its Result
// through Done, and calls Tick at NextDeadline. docs/jobs.md is the
// user's reference of the files and of what happens to a job.
package jobs
