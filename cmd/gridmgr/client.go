package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/node/render"
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

// opts are the client library's options for the target.
func (t *target) opts() client.Options {
	return client.Options{Addr: *t.addr, DataDir: *t.dataDir, PSKFile: *t.psk}
}

// dial connects to the target manager.
func (t *target) dial(ctx context.Context) (*client.Client, error) {
	c, err := client.Connect(ctx, t.opts())
	if err != nil {
		return nil, t.dialError(err)
	}
	t.keyErr = c.IdentityErr()
	return c, nil
}

// dialError is the CLI's account of an error of client.Connect (or of
// Options.Address): bad flags are usage errors naming the flag.
func (t *target) dialError(err error) error {
	var oe *client.OptionError
	switch {
	case errors.Is(err, client.ErrTwoManagers):
		return usageErr("give -n ADDR or -d DIR, not both")
	case errors.Is(err, client.ErrNoManager):
		return usageErr("which manager? give -n ADDR (full multiaddr with /p2p/<peer id>) or -d DATA_DIR")
	case errors.As(err, &oe) && oe.Field == "DataDir":
		return usageErr("-d: %v", oe.Err)
	case errors.As(err, &oe) && oe.Field == "PSKFile":
		return usageErr("--psk: %s", plainError(oe.Err))
	}
	var de *client.DialError
	if !errors.As(err, &de) {
		return err
	}
	switch {
	case isAddrErr(de.Err):
		return usageErr("-n: %s", plainError(de.Err))
	case errors.Is(de.Err, client.ErrLimit):
		return limitDialErr(de.Addr, de.Err)
	}
	return dialErr(de.Addr, *t.timeout, de.Err)
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
	key := client.DefaultKeyPath()
	if key == "" {
		key = "(none: set GRIDMGR_CLIENT_KEY)"
	}
	return "Every command that uses the client key " + key + " is the same peer id to the manager: " +
		"run fewer of them at once, give them a longer --timeout to wait their turn, " +
		"or give each job a key of its own (GRIDMGR_CLIENT_KEY=FILE, created if missing; a reservation belongs to the key that made it)"
}

func isAddrErr(err error) bool { return errors.Is(err, client.ErrAddr) }

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
	depth := countVar[uint](fs, "depth", 0, 0, client.MaxTreeDepth, "levels below the manager to show (0: all)")
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
