// Package transfer moves application bundles (zip files, up to hundreds of
// MB) from a client to the grid manager that holds its reservation, over
// libp2p on their own protocol, /gridmgr/bundle/1.0.0, into a
// content-addressed Store: a bundle is named by its sha256, stored once
// and shared by every instance that uses it, so a retry or a resumed
// upload is always safe.
//
// The protocol (frames are varint-delimited wire messages of at most
// MaxFrame bytes):
//
//	client → BundleOffer{sha256, size, reservation}
//	server ← BundleAccept{offset} or BundleAccept{error}
//	           offset = size: stored already; > 0: resume; 0: everything
//	client → size−offset raw bytes, then closes its side
//	server ← BundleStored{sha256} or BundleStored{error}
//	           (an error may come before the last byte: read while sending)
//
// On ProtocolTrailer (/gridmgr/bundle/1.1.0, served by the same Handle)
// the offer may name, instead of the sha256, an upload id (32 to 64 hex
// digits, the client's choice): the client then sends the bytes before
// it knows their hash, and the hash after them:
//
//	client → BundleOffer{upload_id, size, reservation}
//	server ← BundleAccept{offset} (0 ≤ offset ≤ size) or the error
//	client → size−offset raw bytes, BundleTrailer{sha256}, closes its side
//	server ← BundleStored{sha256} or BundleStored{error}
//
// Such an upload is resumed by its id and size (DIR/partial/up-ID-SIZE.part),
// never found "stored already" before its bytes, and stored under the
// trailer's hash only if the server's own hash of the bytes (the part
// kept from before included) is the same; a trailer that is not, or is
// not a BundleTrailer (more bytes than offered), refuses the upload and
// drops its bytes. Two ids with the same bytes are both stored, as one
// bundle. Send uses it when it does not know the file's hash already
// (see SendOptions) and the server speaks it, so that the client does
// not read the whole file before its first byte.
//
// On ProtocolZstd (/gridmgr/bundle/1.2.0, the same Handle again) the
// stream is 1.1.0's; the id says the manager installs bundles whose files
// are compressed with Zstandard. Send opens all three ids, and to a
// manager that chooses 1.1.0 or 1.0.0 (an older version) it sends a copy
// of a Zstandard bundle with those files deflated (deploy's
// WriteDeflated: the same bytes every time, offered under an upload id of
// the original file's, so a cut upload resumes), and Result.Deflated says
// so: the caller installs it by Result.SHA256, not by the original's hash.
// A copy sent before (in this process; keyed by the original's hash) is
// offered by its hash, and made again only if the manager lacks it.
// A Zstandard file that cannot be deflated (an entry whose window is too
// large, damaged data) is an error naming it, and nothing is sent.
//
// The server checks the offer (the hash's or the id's form, 0 < size ≤
// MaxSize, a reservation) and asks Check whether the peer holds the
// reservation before anything is written. It hashes the bytes as they
// arrive (on a goroutine of its own while the next ones are read) into
// DIR/partial/SHA.part (after rehashing what an earlier attempt left
// there), syncs the file, and renames it to DIR/SHA.gapp only if the
// hash and size match. Nothing a refusal concerns is kept: a hash
// mismatch or more bytes than offered discard the partial file (its
// bytes are proven wrong), and so does a disk error, which is answered
// at once, before the last byte (the client reads the answer while it
// sends). A stream that breaks or sends nothing for Idle is reset and
// its partial file kept for a resume, for Store's PartialAge (default 1
// hour) after its last write: an older one is abandoned and deleted, at
// the next offer of another bundle or when the store is opened. Only one
// stream writes a hash at a time: a second one is refused with
// CODE_UNAVAILABLE ("being uploaded"; it may retry, and then finds the
// bundle stored). At most MaxUploads uploads run at once and MaxPartial
// bytes of partial files are kept (idle ones evicted oldest first);
// beyond that offers get CODE_OVERLOADED.
//
// The store holds at most MaxStore bytes, bundles and partial uploads
// (those being written counted at their full size). An offer that would
// pass it first evicts, least recently stored or used first, idle
// partial uploads and the bundles that InUse does not name and no
// Store.Hold holds; if it still would not fit, it evicts nothing and is
// refused naming StoreLimitName and the sizes: CODE_OVERLOADED if the
// other uploads under way hold the room (retry), else CODE_REFUSED.
//
// Send is the client side: it offers the file (by its hash if it knows
// it, else by an upload id derived from the file's path, inode, size and
// times, hashing while it sends), sends from the accepted offset and
// waits for BundleStored; a refusal comes back as a *RemoteError whose
// message says what was wrong. An old server (Protocol only) is offered
// the hash first, as before.
//
// The caller (the manager) must:
//   - register the handler on the three ids: host.SetStreamHandler(Protocol,
//     srv.Handle), and the same for ProtocolTrailer and ProtocolZstd;
//   - give Server.Check, which checks that the peer holds the reservation
//     (return Refuse(code, ...) to choose the refusal's code);
//   - set MaxSize and LimitName, MaxStore and StoreLimitName from its
//     properties file;
//   - give Server.InUse, the bundles its instances use (without it no
//     complete bundle is evicted, and a full store refuses uploads), and
//     hold a bundle (Store.Hold, released when done) while installing
//     from it, since InUse names it only once the instance exists;
//   - optionally, follow the bytes of uploads as they arrive
//     (Server.Arriving; the manager unpacks bundles early): an upload
//     from its first byte is given, once written, in order, and then
//     the sha256 it was stored as, or "", before the client is told;
//   - garbage-collect: Store.Remove the bundles no instance uses any
//     more, and those an install found bad (they will never install).
//     The store removes a complete bundle itself only to make room for
//     an upload.
package transfer
