// Package deploy is what runs applications on reserved hosts: the bundle
// and its manifest, the journal of changes an installation makes, the
// class reference counts, Host (which installs a bundle's files as an
// instance and removes them again), and the Executor, which a manager's
// runtime drives: it installs a bundle on a reservation as the instance
// RESERVATION.APP (files, ports, install commands, a durable record),
// starts, stops, pauses and resumes it through package runner (a cgroup
// with the reservation's limits, a supervisor that outlives the
// manager), answers status, logs, idle, operations, put and get, and
// removes it — on request, when its reservation ends (Ended) or, at a
// start, when it ended while the manager was down (Reconcile). Opening an
// Executor undoes an installation a crash cut short and re-adopts what
// kept running. The bundle itself travels on node/p2p/transfer.
//
// A bundle is a zip archive of the application's files with app.toml at
// its root. Pack writes one from a directory, the same bytes for the same
// files (so its sha256 names it); Open checks one before anything is
// written — every entry a relative path inside the application, only
// files and directories, within Limits of count, expanded size and
// compression ratio, the manifest valid and every file it places there —
// and ExtractTo writes it under a directory through an os.Root.
//
// A Journal records each change to the host (directories, files created
// or replaced with their old content kept, anything else the caller
// allocates) and syncs the record before the change is made; Undo
// reverts them newest first, whatever a crash left, so a removal gives
// the host back as it was (Digest checks it). Classes counts the
// instances of each class: the first does the class's shared setup, the
// last undoes it. Host.Install places an instance's directories and
// files (and its class's shared ones for the first of the class) inside
// directories that are wholly the instance's or the class's, recording
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
// once as FILE:LINE: KEY: what is wrong, paths must stay inside the
// application's directory, commands are word lists (no shell), and sizes
// are bounded. The caller must open bundles with Open (never unzip them
// itself) and run the manifest's commands with the application's limits.
package deploy
