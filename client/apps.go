package client

import (
	"context"
	"errors"

	"github.com/gridmgr/gridmgr/node/p2p/transfer"
	"github.com/gridmgr/gridmgr/wire"
)

// BundleSender uploads application bundles: node/p2p's client host is
// one (the bundle stream, /gridmgr/bundle/1.2.0, 1.1.0 or 1.0.0;
// package transfer).
type BundleSender interface {
	SendBundle(ctx context.Context, peer, file, reservation string, progress func(sent, total int64)) (sha string, err error)
}

// ProtocolChecker is a Dialer that can tell which protocols a manager it
// has a session with speaks (node/p2p's client host: what libp2p's
// identify exchange told it).
type ProtocolChecker interface {
	Speaks(peer, protocol string) bool
}

// readsZstd reports whether this manager reads bundles compressed with
// Zstandard (it speaks transfer.ProtocolZstd): a job's program is packed
// with it then, and the manager's stager deflates it for any manager of
// an older version that runs the job. A manager that does not say so
// (an older version, or a dialer that cannot tell) is given deflate.
func (c *Client) readsZstd() bool {
	pc, ok := c.d.(ProtocolChecker)
	return ok && pc.Speaks(c.Peer(), transfer.ProtocolZstd)
}

// App sends one application request to this manager (the owner of the
// reservation it names).
func (c *Client) App(ctx context.Context, req *wire.AppRequest) (*wire.AppReply, error) {
	return ask(ctx, c, "application", &wire.Envelope{Body: &wire.Envelope_AppRequest{AppRequest: req}},
		func(e *wire.Envelope) *wire.AppReply { return e.GetAppReply() })
}

// SendBundle uploads the bundle in file to this manager for reservation
// (which the client must hold), resuming an upload cut short; a bundle
// the manager has already is not sent again if the sender knows the
// file's hash (transfer.Send remembers those of unchanged files it sent
// before; otherwise it hashes while sending, and the manager finds it
// has the bundle only after the bytes). progress (may be nil) sees the
// bytes sent. It returns the bundle's sha256.
func (c *Client) SendBundle(ctx context.Context, file, reservation string, progress func(sent, total int64)) (string, error) {
	s, ok := c.d.(BundleSender)
	if !ok {
		return "", errors.New("this client cannot upload bundles (its dialer has no bundle stream)")
	}
	sha, err := s.SendBundle(ctx, c.Peer(), file, reservation, progress)
	var te *transfer.RemoteError
	if errors.As(err, &te) {
		// The manager refused: the same error as any other refusal.
		return "", &RemoteError{Code: te.Code, Message: te.Message}
	}
	return sha, err
}

// Install uploads the bundle in file to the owner of reservation and
// installs it there.
func (c *Client) Install(ctx context.Context, file, reservation string, progress func(sent, total int64)) (*wire.AppReply, error) {
	sha, err := c.SendBundle(ctx, file, reservation, progress)
	if err != nil {
		return nil, err
	}
	return c.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_INSTALL, Reservation: reservation, BundleSha256: sha})
}

// Start starts instance (RESERVATION.APP) with args appended to its run
// command and env added to its environment; both may be nil, and are
// refused unless its app.toml allows them ([run] args = true, env =
// true). They replace those of its previous start.
func (c *Client) Start(ctx context.Context, instance string, args []string, env map[string]string) (*wire.AppReply, error) {
	return c.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_START, Instance: instance, Args: args, Env: env})
}
