package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// target is how a client command finds its manager.
type target struct {
	addr    *string
	dataDir *string
	psk     *string
	timeout *time.Duration
	json    *bool
	keyErr  error // the client identity could not be kept: a one-off one is used
}

func addTarget(fs *flagSet, withJSON bool) *target {
	t := &target{
		addr:    fs.String("n", "", "manager address: a full multiaddr ending in /p2p/<peer id>"),
		dataDir: fs.String("d", "", "data dir of a manager running on this host (reads DIR/addr)"),
		psk:     fs.String("psk", "", "the grid's pre-shared key file, if it has one"),
		timeout: fs.duration("timeout", 5*time.Second, positive, 0, "how long to wait for the answer"),
	}
	for _, name := range []string{"n", "d", "psk", "timeout"} {
		fs.target[name] = true
	}
	if withJSON {
		t.json = fs.Bool("json", false, "print JSON instead of text")
	}
	return t
}

// dial connects to the target manager.
func (t *target) dial(ctx context.Context) (*client.Client, error) {
	addr := *t.addr
	switch {
	case addr != "" && *t.dataDir != "":
		return nil, usageErr("give -n ADDR or -d DIR, not both")
	case addr == "" && *t.dataDir == "":
		return nil, usageErr("which manager? give -n ADDR (full multiaddr with /p2p/<peer id>) or -d DATA_DIR")
	case addr == "":
		a, err := daemon.ReadAddrFile(*t.dataDir)
		if err != nil {
			return nil, usageErr("-d: %v", err)
		}
		addr = a
	}
	opts, err := t.options()
	if err != nil {
		return nil, err
	}
	c, err := client.DialNew(ctx, addr, opts)
	if err != nil {
		if isAddrErr(err) {
			return nil, usageErr("-n: %s", plainError(err))
		}
		if errors.Is(err, p2p.ErrLimit) {
			return nil, limitDialErr(addr, err)
		}
		return nil, dialErr(addr, *t.timeout, err)
	}
	return c, nil
}

// limitDialErr says that the manager at addr refused the CLI by one of its
// resource limits until the --timeout: which limit, and what to do.
func limitDialErr(addr string, err error) error {
	return fmt.Errorf("cannot reach the manager at %s: %v. %s", addr, err, limitAdvice())
}

// limitAdvice is what to do when a manager refuses the CLI by one of its
// resource limits: every process that uses one client key is one peer id
// to the manager, however many run at once.
func limitAdvice() string {
	key := clientKeyPath()
	if key == "" {
		key = "(none: set GRIDMGR_CLIENT_KEY)"
	}
	return "Every command that uses the client key " + key + " is the same peer id to the manager: " +
		"run fewer of them at once, give them a longer --timeout to wait their turn, " +
		"or give each job a key of its own (GRIDMGR_CLIENT_KEY=FILE, created if missing; a reservation belongs to the key that made it)"
}

// clientKeyPath is where the CLI keeps its client identity: the peer id
// that holds reservations, so that a later command may commit, renew or
// release them. $GRIDMGR_CLIENT_KEY, else $XDG_CONFIG_HOME/gridmgr/client.key,
// else ~/.config/gridmgr/client.key.
func clientKeyPath() string {
	if p := os.Getenv("GRIDMGR_CLIENT_KEY"); p != "" {
		return p
	}
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "gridmgr", "client.key")
}

// options are the client options of the target: PSK and identity.
func (t *target) options() (p2p.ClientHostOptions, error) {
	var opts p2p.ClientHostOptions
	if path := clientKeyPath(); path != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
			if key, _, err := p2p.LoadOrCreateIdentity(path); err == nil {
				opts.Key = key
			} else {
				t.keyErr = err
			}
		} else {
			t.keyErr = err
		}
	}
	if *t.psk != "" {
		psk, err := p2p.ReadPSK(*t.psk)
		if err != nil {
			return opts, usageErr("--psk: %s", plainError(err))
		}
		opts.PSK = psk
	}
	return opts, nil
}

func isAddrErr(err error) bool { return errors.Is(err, peeraddr.ErrAddr) }

func (t *target) context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), *t.timeout)
}

// printJSON prints m as --json does (jsonout.go, docs/cli-json.md),
// indented.
func printJSON(c *cli, m proto.Message) {
	fmt.Fprintf(c.stdout, "%s\n", plainJSONIndent(m))
}

// withClient parses a client command's flags (allowing at most maxArgs
// positional arguments), connects to the target manager and runs fn within
// the --timeout.
func withClient(fs *flagSet, t *target, args []string, maxArgs int,
	fn func(ctx context.Context, cl *client.Client, args []string) error) error {
	pos, err := parse(fs, args, maxArgs)
	if err != nil {
		return err
	}
	ctx, cancel := t.context()
	defer cancel()
	cl, err := t.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	err = fn(ctx, cl, pos)
	// The manager refused what we sent (a bad expression, say): that is
	// bad input, exit code 2, with the manager's explanation.
	var re *client.RemoteError
	if errors.As(err, &re) && re.Code == wire.ErrorReply_CODE_BAD_REQUEST {
		return usageErr("%s", re.Message)
	}
	return err
}

// show prints m as JSON with --json, else as text.
func (t *target) show(c *cli, m proto.Message, text string) {
	if t.json != nil && *t.json {
		printJSON(c, m)
		return
	}
	fmt.Fprint(c.stdout, text)
}

func cmdTree(c *cli, args []string) error {
	fs := c.newFlags("tree", "-n ADDR | -d DIR [flags]",
		"Show the subtree under a manager as an indented tree: each manager with the\n"+
			"state and round trip of the relation from its superior. Subtrees that did\n"+
			"not answer in time are marked; the answer always comes within --timeout.")
	t := addTarget(fs, true)
	depth := countVar[uint](fs, "depth", 0, 0, relations.MaxAncestors, "levels below the manager to show (0: all)")
	return withClient(fs, t, args, 0, func(ctx context.Context, cl *client.Client, _ []string) error {
		root, err := cl.Tree(ctx, uint32(*depth))
		if err != nil {
			return err
		}
		t.show(c, root, renderTree(root))
		return nil
	})
}

func cmdStatus(c *cli, args []string) error {
	fs := c.newFlags("status", "-n ADDR | -d DIR [flags]",
		"Show one manager: name, peer id, addresses, host, ancestors, every relation\n"+
			"with its state, last-heard time, round trip and dial attempts, and the\n"+
			"most recent relation events.")
	t := addTarget(fs, true)
	events := countVar(fs, "events", render.DefaultEvents, 0, 1000, "most recent relation events to show (0: all the manager keeps)")
	return withClient(fs, t, args, 0, func(ctx context.Context, cl *client.Client, _ []string) error {
		st, err := cl.Status(ctx)
		if err != nil {
			return err
		}
		t.show(c, st, render.StatusEvents(st, *events, "--events N shows more, 0 all"))
		return nil
	})
}

func cmdPing(c *cli, args []string) error {
	fs := c.newFlags("ping", "-n ADDR | -d DIR [flags] [PEER]",
		"Without PEER: measure the round trip from here to the manager. With PEER\n"+
			"(a peer id or name of one of its relations): ask the manager to ping that\n"+
			"relation over its channel and report the round trip it measured.")
	t := addTarget(fs, false)
	pings := countVar(fs, "count", 3, 1, 1000, "number of pings")
	return withClient(fs, t, args, 1, func(ctx context.Context, cl *client.Client, args []string) error {
		peer := ""
		if len(args) > 0 {
			peer = args[0]
		}
		for i := 0; i < *pings; i++ {
			start := time.Now()
			rep, err := cl.Ping(ctx, peer)
			if err != nil {
				return err
			}
			if peer == "" {
				fmt.Fprintf(c.stdout, "%s: round trip %s\n", rep.Name, fmtDur(time.Since(start)))
			} else {
				fmt.Fprintf(c.stdout, "%s: round trip %s over the relation (this client's round trip %s)\n", rep.Name,
					fmtDur(time.Duration(rep.RttUs)*time.Microsecond), fmtDur(time.Since(start)))
			}
		}
		return nil
	})
}
