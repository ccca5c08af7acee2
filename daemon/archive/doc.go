// Package archive is a manager's event archive: the archiver of the Grid
// Monitoring Architecture. A manager with [archive] enabled stores the
// monitoring events (wire.Event) it receives on the grid's event topics
// in a bbolt file, keeps them for a bounded time and number, and answers
// EventsRequest from them (Query, with a filter compiled by
// query.CompileEventFilter).
//
// # On-disk layout
//
// One bbolt file (mode 0600), normally DATADIR/events.db, with two
// buckets:
//
//	events  key:   8 bytes  time_unix_ms, big-endian, sign bit flipped
//	                        (so that negative times sort first)
//	               n bytes  the producer's peer id, each 0x00 written as
//	                        0x00 0xFF, then 0x00 0x01 (so that peers
//	                        sort as strings, whatever bytes they hold)
//	               8 bytes  seq, big-endian
//	        value: the event in protobuf wire form (proto.Marshal)
//	meta    "format" = "1" (the layout version; any other value is refused)
//
// bbolt iterates keys in byte order, which is (time, peer, seq) order, so
// a scan from a time on is a scan in time order. Two events with the same
// time, peer and seq have the same key: the first one stored is kept and
// later copies are ignored (an event heard twice, over two paths or after
// a reconnection, is stored once). A new file gets both buckets and the
// format mark; a file with other buckets and no meta, or with another
// format, is refused.
//
// # Retention
//
// Options.MaxAge and Options.MaxEvents bound what is kept: events older
// than MaxAge (by the producer's clock, against Options.Now) and the
// oldest beyond MaxEvents are deleted. Prune applies both at once. Append
// applies them in its own transaction when cheap enough to do often:
// after every 1000 events appended since the last pruning, or when the
// archive holds more than MaxEvents by 10% (so between prunings it may
// hold up to 10% more than MaxEvents). Append does not store an event
// already older than MaxAge, and Query does not return one.
//
// # Damaged records
//
// A stored value that does not decode is skipped by Query and counted
// (BadRecords); it is never a panic nor an error of the whole query.
// Retention deletes it in its turn, as its key still orders it.
//
// # What the caller must do
//
//   - Open one Archive per file, in one process. bbolt locks the file; a
//     second Open fails after DefaultTimeout with "event archive PATH is in
//     use by another process".
//   - Validate events before Append (the producer signed the gossipsub
//     message and its peer is the signer's): Append stores what it is
//     given. Events without a peer are stored under the empty peer.
//   - Batch: each Append is one transaction, fsynced before it returns,
//     so appending events one by one costs a disk sync each. Gather the
//     events of, say, a second and Append them together.
//   - Compile the filter of an EventsRequest once (query.CompileEventFilter)
//     and pass a match function that treats an evaluation error as no
//     match; bound limit (EventsRequest says 10000 at most).
//   - Call Prune now and then if Appends are rare (a quiet archive is not
//     pruned otherwise), e.g. every minute.
//   - Close it on exit. After Close every method but Len, BadRecords and
//     Close returns an error.
//
// An Archive is safe for concurrent use: Appends and Prunes are
// serialized, Queries run alongside them, each on a consistent snapshot
// (one bbolt read transaction).
package archive
