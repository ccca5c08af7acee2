// Package memtrim lets a long-running process of this executable give
// back the pages of the executable itself that it no longer uses.
//
// A Go process maps its whole executable, and starting it touches code
// and read-only data all over it: every package's initialisers run,
// and the kernel maps the neighbours of each page faulted in with it
// (fault-around, 64 KiB). An idle manager kept about 27 MiB of its
// 58 MB executable resident that way, against 16 MiB for a bare libp2p
// host, most of it touched only while starting. The kernel also keeps
// a process's mapped code in memory ahead of other file pages, so that
// memory was not given back under pressure either.
//
// Executable drops the process's read-only mappings of its executable
// (code and read-only data; never writable data, which would lose what
// the process wrote there) with madvise(MADV_DONTNEED). The pages stay
// in the page cache: what the process uses again is mapped again at its
// next use by a minor fault (no disk read while the page cache holds
// it; a few microseconds for each 64 KiB), and what it does not is no
// longer its own but cache the kernel may reclaim. Nothing else
// changes: the code that runs and the data it reads are the same.
//
// The manager calls it at start and then every memory_trim (daemon); an
// application's supervisor (deploy/runner's shim) and its standby call
// it once they have nothing left to start.
//
// The caller must call it only when a pause of a millisecond or two in
// the next work does not matter, and must not rely on it for
// anything but memory: on a kernel or filesystem where madvise fails it
// returns the error and nothing has changed.
package memtrim
