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
//
// The server checks the offer (the hash's form, 0 < size ≤ MaxSize, a
// reservation) and asks Check whether the peer holds the reservation
// before anything is written. It hashes the bytes as they arrive into
// DIR/partial/SHA.part (after rehashing what an earlier attempt left
// there), syncs the file, and renames it to DIR/SHA.gapp only if the
// hash and size match; a mismatch discards the partial file. A stream
// that sends nothing for Idle is reset and its partial file kept for a
// resume. Only one stream writes a hash at a time: a second one is
// refused with CODE_UNAVAILABLE ("being uploaded"; it may retry, and
// then finds the bundle stored). At most MaxUploads uploads run at once
// and MaxPartial bytes of partial files are kept (idle ones evicted
// oldest first); beyond that offers get CODE_OVERLOADED.
//
// Send is the client side: it hashes the file, offers it, sends from the
// accepted offset and waits for BundleStored; a refusal comes back as a
// *RemoteError whose message says what was wrong.
//
// The caller (the manager) must:
//   - register the handler: host.SetStreamHandler(Protocol, srv.Handle);
//   - give Server.Check, which checks that the peer holds the reservation
//     (return Refuse(code, ...) to choose the refusal's code);
//   - set MaxSize and LimitName from its properties file;
//   - garbage-collect: Store.Remove the bundles no instance uses (List
//     gives them with their times). The store never removes a complete
//     bundle itself.
package transfer
