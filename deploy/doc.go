// Package deploy is what runs applications on reserved hosts: the bundle
// and its manifest, the journal of changes an installation makes, the
// shares (class setups and reservation uids, reference counted), Host
// (which installs a bundle's files as an instance and removes them
// again), and the Executor, which a manager's runtime drives: it installs
// a bundle on a reservation as the instance RESERVATION.APP (files,
// ports, its class's shared setup, install commands, a durable record),
// starts, stops, pauses and resumes it through package runner, answers
// status, logs, idle, operations, put and get, watches its disk use, and
// removes it — on request, when its reservation ends (Ended) or, at a
// start, when it ended while the manager was down (Reconcile). Opening an
// Executor undoes an installation a crash cut short and re-adopts what
// kept running. The bundle itself travels on node/p2p/transfer.
//
// Every process of an application runs confined (runner.Sandbox): the
// host read-only, only its instance's directory writable (its class's
// readable), a private /tmp, its own processes only, the manager's data
// dir (ExecutorOptions.Hide) invisible; as a uid of its reservation's
// own from ExecutorOptions.UIDFirst…UIDLast (each class's shared setup as
// another); in one cgroup per reservation with its cpus, memory and
// MaxPids. So the journal's promise — removal gives the host back as it
// was — holds by construction: nothing outside the instance's directory
// can change. docs/sandbox.md is the user's account of it.
//
// A bundle is a zip archive of the application's files with app.toml at
// its root. Pack writes one from a directory, the same bytes for the same
// files (so its sha256 names it), deflated with klauspost/compress (a plain
// zip that any tool reads; written 2.4 times as fast as with the standard
// library's deflate, and read back 1.3 times as fast), or with PackWith's
// Zstd option compressed with Zstandard (zip method 93, a window of at
// most 8 MiB; an install inflates it about 2.5 times as fast again, but
// managers before bundle protocol 1.2.0 cannot read it: Bundle.WriteDeflated
// gives them a copy, byte for byte what Pack writes deflated). A file
// compressed with Zstandard is written as independent frames of 1 MiB,
// which installing decodes on up to four cores at once (zstdframes.go);
// any other Zstandard stream is read too, on one. Open checks one before anything is
// written — every entry a relative path inside the application, only
// files and directories, within Limits of count, expanded size and
// compression ratio, the manifest valid and every file it places there —
// and ExtractTo writes it under a directory through an os.Root.
// OpenChecked is Open for bytes whose sha256 the caller checked already
// (the manager's bundle store, as they arrived): it does not hash them
// again; Executor.Install uses it when ExecutorOptions.BundleChecked
// says so, and otherwise refuses a bundle whose bytes do not hash to the
// name it is installed by.
// An EarlyCache unpacks bundles while they arrive (early.go): the
// manager's bundle store gives each upload's bytes, as they are written,
// to an Early (EarlyCache.Begin), whose decoder reads the local file
// headers in order and decodes the Zstandard files made of frames it
// splits off, within a budget of memory; the upload's end keeps it under
// the bundle's sha256 for EarlyTTL. Executor.Install (ExecutorOptions.Early)
// takes it and writes a file from it only if the central directory says
// the same of the file as the bytes decoded (where its data starts, its
// method, sizes and CRC-32, and its data descriptor's CRC-32): exactly
// what decoding it then would write. Anything else is decoded as before.
// PackProgram makes one for a plain program (a file, or a directory and
// its executable) with a manifest made for it, whose run command a start
// may extend: Executor.StartWith appends a start's arguments and adds its
// environment when the manifest allows it ([run] args, env), checks them
// (reserved names, bounds) and records them for every restart. A start
// writes the instance's record (started, with those) while its processes
// start: a manager killed in between leaves a record asking for them to
// run, and its next start re-adopts them or starts them (Reconcile), as
// after the host restarted; a start that fails writes the record back.
//
// A Journal records each change to the host (directories, files created
// or replaced with their old content kept, anything else the caller
// allocates) and syncs the record before the change is made (changes
// made one after the other are announced together, one sync); Undo
// reverts them newest first, whatever a crash left, so a removal gives
// the host back as it was (Digest checks it). Shares counts the users of
// each class's shared setup (the first does it, the last undoes it) and
// of each reservation's uid (given back with the last). Host.Install
// places an instance's directories and files (and its class's shared
// ones for the first of the class) inside directories that are wholly
// the instance's or the class's, hands them to their uids and records
// each step; Host.Remove undoes it, also after a crash in the middle.
//
// The manifest, app.toml, says what the application is, how to install
// it (files, directories, commands, ports, environment), what its class
// shares once per host, how to run, stop and restart it, how to ask
// whether it is idle or healthy, its own operations, the values it
// reports, and where data goes in and out. deploy/examples/hello/app.toml
// has every key.
//
// Parse is strict and safe on hostile input: every problem is reported at
// once as FILE:LINE: KEY: what is wrong (a TOML syntax error alone stops
// the reading, and says so), paths must stay inside the
// application's directory, commands are word lists (no shell), and sizes
// are bounded. The caller must open bundles with Open (never unzip them
// itself), run the manifest's commands only through the Executor (never
// unconfined), and call Executor.Close when the manager stops.
package deploy
