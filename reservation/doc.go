// Package reservation is the reservation ledger of one grid manager: a
// calendar per resource kind (cpus, mem, and the counted tokens the
// properties file declares) — a counting semaphore over time — the
// reservations that hold them, each over a window [Start, End), their life
// (held → committed → released or expired), access lists, and the pure
// coordinator of a co-reservation over several managers.
//
// A reservation is either a lease from now (its window ends with its
// lease; commit and renew move the end, if the calendar has room) or a
// window the client names ahead (begin, duration), which keeps its window.
// No instant is ever booked beyond a capacity; a request is granted only if
// every amount fits over its whole window (all or nothing), and a lease
// whose time is up counts as in use until Expire lapses it, as it did when
// the ledger was a plain semaphore.
//
// The package is pure, like the rest of the protocol core: time arrives as
// a now argument, nothing here starts a goroutine or touches a disk or a
// network. Durability is reached through the Store interface; boltstore
// implements it in the data dir.
//
// What a caller must do:
//   - Declare capacities (SetCapacity) and Restore the stored snapshot
//     before serving requests.
//   - Use a Ledger from one goroutine at a time (the Core's owner): it has
//     no lock of its own. Pass times that never go back: the calendar's
//     present is the latest time given.
//   - Call Expire when NextExpiry is due, so holds and leases lapse.
//   - After every call that may change the ledger, TakeBatch and write the
//     batch to the Store before telling anyone the result: an answer must
//     never promise what a crash could lose.
//   - Check Access before Reserve; the ledger itself checks amounts,
//     bounds, holders and retries.
//
// Reservation numbers look like "gm154-17-k3f9q2": the owner's name, a
// sequence number that never repeats at that manager (it is stored), and
// a tag derived from the owner's peer id (Tag). ParseID splits them, so a
// client can tell where to send a commit, renew or release.
package reservation
