// Package deploy is what runs applications on reserved hosts (issue 13,
// being built). So far it holds the application's manifest: app.toml,
// at the root of a bundle, says what the application is, how to install
// it (files, directories, commands, ports, environment), what its class
// shares once per host, how to run, stop and restart it, how to ask
// whether it is idle or healthy, its own operations, the values it
// reports, and where data goes in and out. deploy/examples/hello/app.toml
// has every key.
//
// Parse is strict and safe on hostile input: every problem is reported at
// once as FILE:LINE: KEY: what is wrong, paths must stay inside the
// application's directory, commands are word lists (no shell), and sizes
// are bounded. The caller must still check the bundle's files against it
// before writing anything.
package deploy
