// Package plugins runs admin commands that are not built into the manager
// as external executables ("plugins").
//
// A command NAME that the manager does not know is looked up, at the time
// it is called, as the executable file gridmgr-cmd-NAME (see [Prefix]) in
// the manager's plugins_dir (from its properties file). Nothing is cached:
// dropping a new file into the directory adds a command at once, removing
// it removes the command, and neither needs a restart.
//
// A plugin is run directly (no shell) with:
//
//   - argv[0] = the absolute path of the file, argv[1:] = the command's
//     arguments exactly as given;
//   - the working directory set to plugins_dir;
//   - a minimal environment, PATH=/usr/local/bin:/usr/bin:/bin and
//     GRIDMGR_PLUGIN=NAME, and nothing of the manager's own environment;
//   - a JSON description of the manager (supplied by the caller) on stdin;
//   - stdout and stderr combined into one reply, capped at
//     [Runner.MaxOutput] bytes and made valid UTF-8 (invalid bytes become
//     U+FFFD) so that it can go into a protobuf string;
//   - its own process group, which is killed with SIGKILL as a whole when
//     the timeout expires or the caller's context is cancelled, and also
//     once the plugin itself has exited, so that no process it started in
//     that group outlives [Runner.Run].
//
// A non-zero exit status is not a Go error: it is reported in
// [Result.ExitCode] and the caller turns it into a failed reply. Run returns
// an error only when the plugin cannot be found or started, when it times
// out ([ErrTimeout], with the Result still holding the output produced so
// far) or when the caller's context is cancelled.
//
// What the caller must do:
//
//   - Check that the requester is an admin before calling [Runner.Run];
//     this package does no authorisation of its own.
//   - Call Run from a goroutine of its own that may block for up to the
//     timeout (plus a fraction of a second for clean-up), never from the
//     protocol core or any other loop that must stay responsive, and post
//     the reply back when Run returns.
//   - Keep plugins_dir writable only by the manager's owner: whatever is
//     put there runs with the manager's privileges.
//
// A [Runner] is a small value with no state of its own; it is safe for
// concurrent use and may be built afresh for every call.
package plugins
