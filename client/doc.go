// Package client is the gridmgr client library: what the CLI, the web UI,
// tests and outside Go programs use to talk to managers over the client
// protocol (/gridmgr/client/1.0.0). A program does what a gridmgr command
// does with one call after its own input is read; the CLI is its first
// user (flags, one call here, print).
//
// # Reaching a manager
//
// Options name the manager (Addr, a full multiaddr ending in /p2p/<peer
// id>, or DataDir, the data dir of a manager on this host, whose AddrFile
// it reads), the grid's pre-shared key (PSKFile) and the client identity
// (KeyFile, default DefaultKeyPath(): $GRIDMGR_CLIENT_KEY, else
// ~/.config/gridmgr/client.key, created if missing; OneOff for a program
// that holds nothing). Connect dials over a libp2p client host of its own;
// the identity is the peer id that holds the reservations it makes, so
// reuse one key file to commit, renew or release them later. An identity
// that cannot be kept is not an error: Connect uses a one-off one and
// IdentityErr says why (warn the user). SelfID is the identity's peer id,
// to list among a manager's admins. Errors name what was wrong:
// ErrNoManager, ErrTwoManagers, *OptionError (the field, and why),
// *DialError (the address, wrapping ErrAddr, ErrLimit or the dialer's
// error).
//
// # Requests
//
// A Client runs over one Conn to one manager and matches replies to
// requests by id, so calls may be made from several goroutines; typed
// methods cover every request (Status, Tree, Ping, Query, Resources,
// Calendar, Reserve, ReservationOp, Reservations, Events, Admin,
// AdminAll...). limits.go has the bounds managers apply and the checks of
// reservation numbers and instance ids, to check input before sending it.
//
// # Queries
//
// Find sends a query from a QuerySpec (a CEL requirement and rank, how far
// to look: Down, Up (AllLevels: everywhere), Want, Limit; who asks and
// how much; a window to look at, or Earliest: the earliest window of a
// duration in which Want managers have the amounts free) and returns what
// was Found: the reply and how long it took; Window is the window an
// earliest search found. A spec that cannot be sent says why
// (ErrNoRequirement, ErrEarliestNoDuration, ErrEarliestNoAmount).
// QueryVariables and QueryUnits list what expressions read, for help.
//
// # Admin commands
//
// RunAdmin sends an admin command from an AdminSpec: its words (one word
// is a whole command string, several are joined shell-like, at most
// MaxAdminWords), to one manager or with All to every manager of the
// grid. With All, Each sees every manager's answer once (repeats and
// duplicates dropped), as they arrive and then the rest by name; the
// AdminResult counts the managers that answered and failed, and its Reply
// is the manager's as sent (Missing: who did not answer in time). A
// command that ran and failed is in the result, not an error.
//
// # Reservations
//
// A Reserver makes reservations across a grid: Make takes a ReserveSpec
// (amounts, where: the best offer with fallback, one named manager, or a
// co-reservation on several managers, all or nothing; how long; who) and
// builds the query and the request (the requirement from the amounts is
// query.Need's, the same text the simulator writes); the lower calls
// (ReserveBest, ReserveAt, CoReserve, Op, OwnerOf) are there for programs
// that build their own requests. ListApps lists the applications of a
// subtree or of the whole grid, through the same sessions.
//
// # Events
//
// Subscribe watches the grid's events live (gossipsub, through the manager
// dialled, from a host of its own with a one-off identity): WatchOptions
// choose the kinds, a subtree (Under) and a CEL filter; call Next until it
// returns nil, and Close the Watch. Client.Events reads back what a
// manager archived.
//
// # Errors in plain words
//
// PlainWords is an error's text with the sentinels it wraps, those of
// this package and of the packages under it (a manager address, a key
// file, a closed stream, properties, saved relations, expressions, a
// manager's protocol), said in plain words, for a program to show users.
//
// # What the caller must do
//
// Close every Client, Reserver, Watch and Dialer when done. A program
// that brings its own transport supplies a Dialer that opens Conns
// (node/p2p's ClientHost through Host is the libp2p one). An ErrorReply
// from a manager comes back as a *RemoteError; a lost stream as an error
// wrapping ErrClosed.
package client
