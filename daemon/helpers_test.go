package daemon_test

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/node/p2p"
)

func protoMarshal(m proto.Message) ([]byte, error) { return proto.Marshal(m) }

// dialClient connects a client to the manager at addr over a client host
// of its own, closed with the client.
func dialClient(t testing.TB, ctx context.Context, addr string, opts p2p.ClientHostOptions) (*client.Client, error) {
	return client.DialNew(ctx, addr, opts)
}
