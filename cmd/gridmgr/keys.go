package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon"
)

func cmdID(c *cli, args []string) error {
	fs := c.newFlags("id", "-c FILE",
		"Print the manager's peer id and the full multiaddrs that an inferior's\n"+
			"superiors list should use. The identity key is created (0600) if missing,\n"+
			"so the id can be handed out before the manager first runs.")
	file := fs.String("c", "", "properties file (TOML)")
	self := fs.Bool("client", false, "print this CLI's own client peer id instead (the one to list in admins)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if *self {
		id, err := client.SelfID("")
		var oe *client.OptionError
		switch {
		case errors.Is(err, client.ErrNoKeyPath):
			return fmt.Errorf("no place for the client key: set GRIDMGR_CLIENT_KEY")
		case errors.As(err, &oe):
			return fmt.Errorf("client key %s: %w", client.DefaultKeyPath(), oe.Err)
		case err != nil:
			return err
		}
		fmt.Fprintf(c.stdout, "%s\n", id)
		return nil
	}
	cfg, err := loadConfig(*file)
	if err != nil {
		return err
	}
	path := daemon.IdentityPath(&cfg)
	id, created, err := daemon.ManagerID(path)
	if err != nil {
		return fmt.Errorf("identity %s: %w", path, err)
	}
	if created {
		fmt.Fprintf(c.stderr, "created a new identity key in %s\n", path)
	}
	fmt.Fprintf(c.stdout, "name     %s\npeer id  %s\n", cfg.Name, id)
	fmt.Fprintf(c.stdout, "addresses (put one in an inferior's superiors list):\n")
	ephemeral := false
	for _, a := range daemon.DialableAddrs(cfg.Listen) {
		if strings.HasSuffix(a, "/tcp/0") {
			ephemeral = true
			continue
		}
		fmt.Fprintf(c.stdout, "  %s/p2p/%s\n", a, id)
	}
	if ephemeral {
		fmt.Fprintf(c.stdout, "  (a listen address has port 0: the port is chosen at start; see %s/addr)\n", cfg.DataDir)
	}
	return nil
}

func cmdKeygen(c *cli, args []string) error {
	fs := c.newFlags("keygen", "[-o FILE] [--psk]",
		"Write a new Ed25519 identity key (mode 0600) and print its peer id, or with\n"+
			"--psk a new libp2p pre-shared key for a private grid (give the same file to\n"+
			"every manager as private_network_key, and to clients with --psk).\n"+
			"An existing file is never overwritten.")
	out := fs.String("o", "", "output file (default identity.key, or swarm.key with --psk)")
	psk := fs.Bool("psk", false, "write a pre-shared key instead of an identity key")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	path := *out
	if *psk {
		if path == "" {
			path = "swarm.key"
		}
		if err := daemon.NewPSKFile(path); err != nil {
			return keyWriteErr(path, err)
		}
		fmt.Fprintf(c.stdout, "wrote pre-shared key %s\n", path)
		return nil
	}
	if path == "" {
		path = "identity.key"
	}
	id, err := daemon.NewIdentityFile(path)
	if err != nil {
		return keyWriteErr(path, err)
	}
	fmt.Fprintf(c.stdout, "wrote identity key %s\npeer id  %s\n", path, id)
	return nil
}

func keyWriteErr(path string, err error) error {
	if errors.Is(err, fs.ErrExist) {
		return usageErr("%s exists; not overwriting a key (remove it first if you mean it)", path)
	}
	return err
}

func cmdWebToken(c *cli, args []string) error {
	fs := c.newFlags("web-token", "-c FILE | -d DIR",
		"Print the admin token of a manager's web UI (http_listen). It is derived\n"+
			"from the manager's identity key, so only who can read the key (its data\n"+
			"dir) can make it. Paste it into the web UI's Admin tab to run commands\n"+
			"that change the grid; without it the UI is read-only.")
	file := fs.String("c", "", "properties file (TOML)")
	dir := fs.String("d", "", "data dir of a manager that runs or ran on this host (finds its key where its properties file keeps it)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	var path string
	switch {
	case *file != "" && *dir != "":
		return usageErr("give -c FILE or -d DIR, not both")
	case *file != "":
		cfg, err := loadConfig(*file)
		if err != nil {
			return err
		}
		path = daemon.IdentityPath(&cfg)
	case *dir != "":
		if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
			return usageErr("-d %s: no such data dir", *dir)
		}
		path = daemon.IdentityIn(*dir)
	default:
		return usageErr("which manager? give -c FILE (its properties file) or -d DATA_DIR")
	}
	tok, err := daemon.WebTokenFile(path)
	if errors.Is(err, os.ErrNotExist) && *dir != "" {
		return usageErr("%s holds no identity key, and no manager started with this data dir has said where its key is: "+
			"give -c FILE, its properties file", *dir)
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("cannot read the identity key %s", fileErr(err))
	}
	if err != nil {
		return fmt.Errorf("identity %s: %s", path, plainError(err))
	}
	fmt.Fprintln(c.stdout, tok)
	return nil
}
