// Package jobs is the job layer's pure core: the job description
// (job.toml), read and checked by Parse or ParseAt, and expanded for one
// index of an array by Description.Expand. The queue state machine comes
// next.
//
// It is pure (docs/design.md §2): no network, no disk, no clock, no
// goroutines. The caller reads the job file and passes its bytes; the
// paths it names are checked lexically here (relative, inside the job's
// directory), and the caller opens them under the job's directory (an
// os.Root) and finds out what they are. A relative begin or deadline
// ("+2h") counts from the submission: ParseAt takes that time, Parse
// leaves it unresolved (Description.BeginIn, DeadlineIn) for Resolve.
// docs/jobs.md is the user's reference of the file.
package jobs
