// Command hello is the example application whose manifest is app.toml in
// this directory: a tiny HTTP server that greets, with every hook the
// manifest names. It is one binary; a flag chooses what it does:
//
//	hello --init DIR        install time: create DIR and write DIR/initialized
//	hello --listen ADDR     the service: HTTP on ADDR, and batch work from
//	                        input/*.txt to output/ (relative to the working
//	                        directory, the instance's own)
//	hello --reload ADDR     ask the service at ADDR to re-read its greeting
//	hello --stats ADDR      print the service's values as "NAME VALUE" lines
//	hello --greet NAME...   print a greeting for each NAME
//
// The service answers GET /?name=NAME ("Hello, NAME!"), GET /healthz,
// GET /idle (200 when it greeted no one in the last 30 s, else 503),
// GET /stats and POST /reload. The greeting is read from the file named by
// $GREETING_FILE ("Hello" when it is not set). SIGTERM or SIGINT stops it
// gracefully.
//
// Build it (a static binary: the host may not have your C library) and
// pack the directory as a bundle, from the repository's root:
//
//	CGO_ENABLED=0 go build -o deploy/examples/hello/bin/hello ./deploy/examples/hello && go run ./cmd/gridmgr app pack deploy/examples/hello -o hello.gapp
package main
