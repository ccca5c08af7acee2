// Package boltstore keeps a manager's reservation ledger durable in a bbolt
// file in its data dir. It implements reservation.Store.
//
// # On-disk layout
//
// One bbolt file (mode 0600), normally DATADIR/reservations.db, with two
// buckets:
//
//	reservations  key: reservation ID (the reservation number, e.g. "gm154-17-k3f9q2")
//	              value: JSON (encoding/json) of reservation.Reservation;
//	              the record's ID field equals its key
//	meta          "format"   = "1" (the layout version; any other value is refused)
//	              "next_seq" = 8-byte big-endian uint64, the sequence number the
//	                           next reservation takes (absent: 0, nothing was written)
//
// A new file gets both buckets and the format mark when it is first opened.
// A file without the meta bucket that already holds other buckets, or with a
// format other than "1", is refused: it is not ours, or it was written by a
// program whose layout we do not know.
//
// # Writing
//
// Write applies one reservation.Batch in one bbolt read-write transaction:
// every change of the batch becomes visible at once or not at all, and the
// transaction is fsynced before Write returns (bbolt with NoSync off), so a
// caller may answer its client as soon as Write returns nil. A caller that
// merges the batches of many concurrent requests into one Write (group
// commit) pays for one commit whatever the batch size. The stored next_seq
// only ever grows: a batch whose NextSeq is not larger leaves it alone. A
// batch with no changes and no larger NextSeq does not touch the disk.
//
// # Loading
//
// Load returns every record, sorted by ID, and next_seq. A record that does
// not decode, or whose ID differs from its key, is an error that names the
// file and the key: the manager must refuse to start rather than silently
// drop a reservation.
//
// # What the caller must do
//
//   - Open one Store per data dir, in one process. bbolt takes an flock on the
//     file (the manager also holds one on its data dir); a second Open of the
//     same file, from this or another process, fails after Options.Timeout
//     (default 2 s) with "reservation store PATH is in use by another
//     process" instead of hanging.
//   - Load once at start and Restore the snapshot into the ledger before
//     serving requests.
//   - Write each batch the ledger hands out, in order, before answering the
//     requests it holds. A Store is safe for concurrent use, but batches
//     written concurrently are applied in no particular order, so a caller
//     that cares about order (it must: a later batch may carry a newer
//     version of a record) writes from one goroutine.
//   - Close it on exit. After Close every method returns an error.
package boltstore
