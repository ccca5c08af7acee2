package client

import (
	"context"
	"fmt"

	"github.com/gridmgr/gridmgr/wire"
)

// OpenPrivateNetwork asks the manager for its private network name
// (docs/wire.md 5.14): opened now with a fresh pre-shared key, or the one
// this client opened before under that name. The reply carries the key
// (swarm.key format, what a private_network_key file holds) and the full
// multiaddrs a manager holding it joins as the manager's inferior. Only
// the manager's admins and the users of its [users] table may ask.
func (c *Client) OpenPrivateNetwork(ctx context.Context, name string) (*wire.PrivateNetworkInfo, error) {
	ns, err := c.privateNetwork(ctx, wire.PrivateNetworkRequest_OP_OPEN, name)
	if err != nil {
		return nil, err
	}
	if len(ns) != 1 || ns[0].Name != name || len(ns[0].Psk) == 0 {
		return nil, fmt.Errorf("the manager answered the opening of private network %q with %d networks, or without its key", name, len(ns))
	}
	return ns[0], nil
}

// ClosePrivateNetwork closes the manager's private network name (which
// this client opened, unless it is an admin); its key is deleted.
func (c *Client) ClosePrivateNetwork(ctx context.Context, name string) error {
	_, err := c.privateNetwork(ctx, wire.PrivateNetworkRequest_OP_CLOSE, name)
	return err
}

// PrivateNetworks lists the manager's private networks this client
// opened (an admin: all), with their keys, sorted by name.
func (c *Client) PrivateNetworks(ctx context.Context) ([]*wire.PrivateNetworkInfo, error) {
	return c.privateNetwork(ctx, wire.PrivateNetworkRequest_OP_LIST, "")
}

func (c *Client) privateNetwork(ctx context.Context, op wire.PrivateNetworkRequest_Op, name string) ([]*wire.PrivateNetworkInfo, error) {
	rep, err := ask(ctx, c, "private network", &wire.Envelope{Body: &wire.Envelope_PrivateNetworkRequest{
		PrivateNetworkRequest: &wire.PrivateNetworkRequest{Op: op, Name: name}}},
		(*wire.Envelope).GetPrivateNetworkReply)
	if err != nil {
		return nil, err
	}
	return rep.Networks, nil
}
