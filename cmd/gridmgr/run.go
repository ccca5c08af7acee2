package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon"
)

// loadConfig reads and checks a properties file. Every problem with the
// file is a usage error (exit 2) naming file, line and key.
func loadConfig(path string) (config.Config, error) {
	if path == "" {
		return config.Config{}, usageErr("-c FILE is required (the manager's properties file; see configs/)")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return config.Config{}, usageErr("%v", err)
	}
	hostname, _ := os.Hostname()
	cfg, err := config.Parse(path, data, hostname)
	if err != nil {
		return config.Config{}, fmt.Errorf("%w: %s has errors:\n%v", errUsage, path, err)
	}
	return *cfg, nil
}

func newLogger(w io.Writer, level string, json bool) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return newLevelLogger(w, l, json, nil)
}

// newLevelLogger logs at lv's level if lv is set (so `set log_level`
// changes it), else at l.
func newLevelLogger(w io.Writer, l slog.Level, json bool, lv *slog.LevelVar) *slog.Logger {
	opts := &slog.HandlerOptions{Level: l}
	if lv != nil {
		lv.Set(l)
		opts.Level = lv
	}
	if json {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func cmdRun(c *cli, args []string) error {
	fs := c.newFlags("run", "-c FILE [flags]",
		"Run this host's grid manager. It dials the superiors named in the properties\n"+
			"file (retrying those not up yet), accepts its inferiors, and serves clients\n"+
			"until SIGINT or SIGTERM, when it says goodbye to every relation.")
	file := fs.String("c", "", "properties file (TOML)")
	dataDir := fs.String("data-dir", "", "override data_dir of the properties file")
	level := fs.String("log-level", "", "override log_level (debug, info, warn, error)")
	jsonLog := fs.Bool("log-json", false, "log as JSON lines instead of text")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	cfg, err := loadConfig(*file)
	if err != nil {
		return err
	}
	// A relative -c leaves its relative paths relative to the working
	// directory: make them absolute now, as the runner (a working
	// directory for each application) and a later chdir need. A
	// glide-in is run as `run -c in/…/glidein.toml` from its instance.
	for _, p := range []*string{&cfg.DataDir, &cfg.Identity, &cfg.PrivateNetworkKey, &cfg.PluginsDir} {
		if *p != "" && !filepath.IsAbs(*p) {
			if abs, err := filepath.Abs(*p); err == nil {
				*p = abs
			}
		}
	}
	if *dataDir != "" {
		abs, err := filepath.Abs(*dataDir)
		if err != nil {
			return usageErr("--data-dir: %v", err)
		}
		// The default identity lives in the data dir; follow the override.
		if cfg.Identity == filepath.Join(cfg.DataDir, config.DefaultIdentityFile) {
			cfg.Identity = filepath.Join(abs, config.DefaultIdentityFile)
		}
		cfg.DataDir = abs
	}
	if *level != "" {
		if cfg, _, _, err = config.Set(cfg, "log_level", *level); err != nil {
			var e *config.Error
			if errors.As(err, &e) {
				return usageErr("--log-level: %s", e.Msg)
			}
			return usageErr("--log-level: %v", err)
		}
	}
	var lv slog.LevelVar
	var l slog.Level
	_ = l.UnmarshalText([]byte(cfg.LogLevel))
	log := newLevelLogger(c.stderr, l, *jsonLog, &lv)
	m, err := daemon.Start(cfg, log, daemon.StartOptions{LogLevel: &lv})
	if err != nil {
		if errors.Is(err, daemon.ErrDataDirInUse) {
			return usageErr("%v", err)
		}
		return err
	}
	stopped := make(chan struct{})
	go func() { c.waitForSignal(); close(stopped) }()
	select {
	case <-stopped:
		log.Info("shutting down")
	case <-m.Done(): // a shutdown command
	}
	m.Stop()
	return nil
}

// waitForSignal blocks until SIGINT or SIGTERM (or the test's interrupt).
func (c *cli) waitForSignal() {
	if c.interrupt != nil {
		<-c.interrupt
		return
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	signal.Stop(sig)
}

// version prints the version.
func cmdVersion(c *cli, args []string) error {
	fs := c.newFlags("version", "", "Print the gridmgr version and the protocol it speaks.")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "gridmgr %s (mesh protocol %s, client protocol %s)\n", config.Version, daemon.MeshProtocol, daemon.ClientProtocol)
	return nil
}
