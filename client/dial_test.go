package client

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOptionsAddress(t *testing.T) {
	dir := t.TempDir()
	const addr = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"
	if err := os.WriteFile(filepath.Join(dir, AddrFile), []byte(addr+"\n/ip4/10.0.0.1/tcp/1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, AddrFile), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var oe *OptionError
	for _, c := range []struct {
		o    Options
		want string
		err  func(error) bool
	}{
		{Options{Addr: addr}, addr, nil},
		{Options{DataDir: dir}, addr, nil},
		{Options{}, "", func(err error) bool { return errors.Is(err, ErrNoManager) }},
		{Options{Addr: addr, DataDir: dir}, "", func(err error) bool { return errors.Is(err, ErrTwoManagers) }},
		{Options{DataDir: t.TempDir()}, "", func(err error) bool {
			return errors.As(err, &oe) && oe.Field == "DataDir" && strings.Contains(err.Error(), "no manager running with data dir")
		}},
		{Options{DataDir: empty}, "", func(err error) bool {
			return errors.As(err, &oe) && oe.Field == "DataDir" && strings.HasSuffix(err.Error(), "is empty")
		}},
	} {
		got, err := c.o.Address()
		if c.err == nil && (err != nil || got != c.want) {
			t.Errorf("%+v: got %q, %v; want %q", c.o, got, err, c.want)
		}
		if c.err != nil && !c.err(err) {
			t.Errorf("%+v: got %q, %v; want another error", c.o, got, err)
		}
	}
}

func TestOptionsHostOptions(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "sub", "client.key")
	opts, keyErr, err := Options{KeyFile: key}.HostOptions()
	if err != nil || keyErr != nil || opts.Key == nil {
		t.Fatalf("new key: %v, %v, %v", opts.Key, keyErr, err)
	}
	id, err := SelfID(key)
	if err != nil || id == "" {
		t.Fatalf("SelfID: %q, %v", id, err)
	}
	if opts, _, _ := (Options{KeyFile: key, OneOff: true}).HostOptions(); opts.Key != nil {
		t.Errorf("OneOff kept the key file's identity")
	}
	// A key that cannot be kept is a one-off identity and a reason, not a failure.
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	opts, keyErr, err = Options{KeyFile: filepath.Join(blocker, "client.key")}.HostOptions()
	if err != nil || keyErr == nil || opts.Key != nil {
		t.Errorf("unkeepable key: %v, %v, %v", opts.Key, keyErr, err)
	}
	var oe *OptionError
	_, _, err = Options{OneOff: true, PSKFile: filepath.Join(dir, "none.psk")}.HostOptions()
	if !errors.As(err, &oe) || oe.Field != "PSKFile" {
		t.Errorf("missing PSK file: %v", err)
	}
}
