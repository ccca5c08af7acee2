package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/daemon/host"
	"github.com/gridmgr/gridmgr/daemon/plugins"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/node/p2p/transfer"
	"github.com/gridmgr/gridmgr/reservation/boltstore"
	"github.com/gridmgr/gridmgr/wire"
)

// ErrDataDirInUse is returned when another manager holds the data dir.
var ErrDataDirInUse = errors.New("daemon: data dir in use")

// Files in a manager's data dir.
const (
	AddrFile  = client.AddrFile   // full multiaddrs of the running manager, one per line, loopback first
	LockFile  = "lock"            // flock held while a manager runs; holds its pid
	StoreFile = "reservations.db" // the reservation ledger (bbolt)
	// KeyFile names where the manager's identity key is when its
	// properties file keeps it outside the data dir (identity = …), so
	// that `gridmgr web-token -d DIR` finds it (IdentityIn).
	KeyFile = "identity.path"
)

// Manager is one running grid manager: its data dir, identity, libp2p host
// and driver.
type Manager struct {
	Cfg    config.Config
	Host   *p2p.Host
	Driver *node.Driver
	Key    crypto.PrivKey
	Store  *boltstore.Store

	storage *storage
	apps    *apps
	jobs    *jobRuntime
	mon     *monitoring
	// privnets are the manager's private networks (privnet.go).
	privnets *privnets
	// bundles serves the bundle stream (transfer) on the main host and
	// on every private network.
	bundles network.StreamHandler

	log    *slog.Logger
	lock   *os.File
	cancel context.CancelFunc
	runErr chan error
}

// IdentityPath is where cfg's identity key lives.
func IdentityPath(cfg *config.Config) string {
	if cfg.Identity != "" {
		return cfg.Identity
	}
	return filepath.Join(cfg.DataDir, "identity.key")
}

// StartOptions are optional settings of Start.
type StartOptions struct {
	// OnEvent sees every relation event, in the driver goroutine; it must
	// not block.
	OnEvent func(node.Event)
	// OnSend sees every mesh message the manager hands to libp2p, with
	// the peer it goes to (not client replies), in the driver goroutine;
	// it must not block, keep env or change it. Tests use it to count
	// messages.
	OnSend func(peer string, env *wire.Envelope)
	// LogLevel, if set, is the level of log, changed by `set log_level`.
	LogLevel *slog.LevelVar
	// WrapStorage, if set, wraps the manager's durable storage (the
	// reservation store, relations.json and the audit log): tests use it
	// for a slow or failing disk. The wrapper must keep node.Storage's
	// contract (Write never blocks; each write reported in order).
	WrapStorage func(node.Storage) node.Storage
}

// pluginRunner adapts plugins.Runner to node.PluginRunner.
type pluginRunner struct{ r plugins.Runner }

func (p pluginRunner) RunPlugin(ctx context.Context, name string, args []string, stdin []byte) (string, int, error) {
	res, err := p.r.Run(ctx, name, args, stdin)
	if errors.Is(err, plugins.ErrNotFound) || errors.Is(err, plugins.ErrBadName) || errors.Is(err, plugins.ErrNoDir) {
		return "", 0, fmt.Errorf("%w: %w", node.ErrPluginNotFound, err)
	}
	return res.Output, res.ExitCode, err
}

// Start brings a manager up: it locks the data dir, loads (or creates) the
// identity, reads the pre-shared key, listens, starts the driver and writes
// the addr file. cfg must have passed Validate. Stop it with Stop.
func Start(cfg config.Config, log *slog.Logger, opts ...StartOptions) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	m := &Manager{Cfg: cfg, log: log, lock: lock}
	ok := false
	defer func() {
		if !ok {
			m.unlock()
		}
	}()
	key, created, err := p2p.LoadOrCreateIdentity(IdentityPath(&cfg))
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if created {
		log.Info("created identity key", "file", IdentityPath(&cfg), "peer", p2p.PeerIDOf(key))
	}
	m.Key = key
	if err := writeKeyFile(&cfg); err != nil {
		log.Warn("cannot say in the data dir where the identity key is (gridmgr web-token -d will not find it)", "err", err)
	}
	m.mon = newMonitoring(m)
	m.privnets = newPrivnets(m)
	var psk pnet.PSK
	if cfg.PrivateNetworkKey != "" {
		if psk, err = p2p.ReadPSK(cfg.PrivateNetworkKey); err != nil {
			return nil, fmt.Errorf("private_network_key: %w", err)
		}
	}
	h, err := p2p.New(p2p.Options{
		Key:      key,
		Listen:   cfg.Listen,
		PSK:      psk,
		Log:      log.With("manager", cfg.Name),
		MeshIdle: 2*time.Duration(cfg.HeartbeatMisses)*cfg.HeartbeatInterval + 5*time.Second,
		// libp2p's metrics (resource manager, swarm) go to /metrics.
		Registerer: m.mon.metrics.Reg,
	})
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	m.Host = h
	fail := func(err error) (*Manager, error) {
		m.mon.close()
		_ = h.Close()
		if m.Store != nil {
			_ = m.Store.Close()
		}
		return nil, err
	}
	if m.Store, err = boltstore.Open(filepath.Join(cfg.DataDir, StoreFile), boltstore.Options{}); err != nil {
		return fail(fmt.Errorf("reservations: %w", err))
	}
	if err := m.mon.openArchive(); err != nil {
		return fail(err)
	}
	var o StartOptions
	for _, x := range opts {
		if x.OnEvent != nil {
			o.OnEvent = x.OnEvent
		}
		if x.OnSend != nil {
			o.OnSend = x.OnSend
		}
		if x.LogLevel != nil {
			o.LogLevel = x.LogLevel
		}
		if x.WrapStorage != nil {
			o.WrapStorage = x.WrapStorage
		}
	}
	m.storage = newStorage(m.Store, filepath.Join(cfg.DataDir, RelationsFile), filepath.Join(cfg.DataDir, AttributesFile), filepath.Join(cfg.DataDir, AuditFile))
	m.storage.observe = m.mon.metrics.Commit
	var st node.Storage = m.storage
	if o.WrapStorage != nil {
		st = o.WrapStorage(st)
	}
	dopts := node.DriverOptions{Storage: st, OnEvent: o.OnEvent, OnSend: o.OnSend, LogLevel: o.LogLevel,
		Publish: m.publish, Metrics: m.mon.metrics}
	if m.mon.arch != nil {
		dopts.Archive = m.mon
	}
	if cfg.PluginsDir != "" {
		dopts.Plugins = pluginRunner{plugins.Runner{Dir: cfg.PluginsDir}}
	}
	sampler := host.NewSampler()
	sampler.DiskPath = cfg.DataDir
	sampler.Disks = cfg.Disks
	dopts.Sample = func() node.HostValues {
		s := sampler.Sample()
		if len(s.Errors) > 0 {
			log.Debug("host values incomplete", "errors", strings.Join(s.Errors, "; "))
		}
		return node.HostValues{At: s.At, CPUs: s.CPUs, Mem: s.Memory, MemAvail: s.MemAvail, CPUUtil: s.CPUUtil,
			NetMbps: s.NetMbps, Hostname: s.Hostname, OS: s.OS, Arch: s.Arch,
			Load1: s.Load1, Load5: s.Load5, Load15: s.Load15, HaveLoad: s.HaveLoad,
			Uptime: s.Uptime, HaveUptime: s.HaveUptime, DiskFree: s.DiskFree, HaveDisk: s.HaveDisk,
			Idle: s.Idle, HaveIdle: s.HaveIdle, Disks: s.Disks}
	}
	// Applications: what a crash interrupted is finished and what kept
	// running is re-adopted before the manager answers anyone.
	ap, err := openApps(m)
	if err != nil {
		return fail(err)
	}
	dopts.Apps = ap
	if cfg.JobsEnabled {
		jr, err := openJobs(m)
		if err != nil {
			ap.ex.Close()
			return fail(err)
		}
		m.jobs = jr
		dopts.Jobs = jr
	}
	m.Driver = node.NewDriver(cfg, h.PeerID(), h.Addrs(), h, log, dopts)
	// An application call's answer is handed to the Core on the goroutine
	// that did the work, when the Core is free: the client has it before
	// that goroutine goes on to list the instances (apps.report).
	ap.deliver = m.Driver.DeliverNow
	if m.jobs != nil {
		m.jobs.deliver = m.Driver.Deliver
	}
	m.apps = ap
	// The Core starts from what the disk holds: the reservations it
	// granted, and the superiors failover or an admin gave it.
	snap, err := m.Store.Load()
	if err != nil {
		return fail(fmt.Errorf("reservations: %w", err))
	}
	if err := m.Driver.Core().Restore(time.Now(), snap); err != nil {
		return fail(fmt.Errorf("reservations: %w", err))
	}
	relFile := filepath.Join(cfg.DataDir, RelationsFile)
	sv, err := ReadRelations(relFile)
	if err != nil {
		return fail(fmt.Errorf("relations: %w", err))
	}
	log.Info(m.Driver.Core().RestoreRelations(sv), "file", relFile)
	attrFile := filepath.Join(cfg.DataDir, AttributesFile)
	sa, err := ReadAttributes(attrFile)
	if err != nil {
		return fail(fmt.Errorf("attributes: %w", err))
	}
	if sa != nil {
		log.Info(m.Driver.Core().RestoreAttributes(sa), "file", attrFile)
	}
	go m.storage.run(m.Driver.Deliver)
	m.bundles = (&transfer.Server{
		Store:          ap.store,
		MaxSize:        int64(cfg.AppsMaxBundle),
		LimitName:      "apps.max_bundle_size",
		MaxStore:       int64(cfg.AppsMaxStore),
		StoreLimitName: "apps.max_store_bytes",
		InUse:          ap.ex.Bundles, // never evicted
		Check:          m.checkUpload,
		Arriving:       ap.arriving,
		Log:            log.With("manager", cfg.Name),
	}).Handle
	// The sink answers private_network_request itself (privnet.go),
	// which may open a network that serves bundles too.
	h.Attach(privnetSink{m})
	h.LibP2P().SetStreamHandler(transfer.Protocol, m.bundles)
	h.LibP2P().SetStreamHandler(transfer.ProtocolTrailer, m.bundles)
	h.LibP2P().SetStreamHandler(transfer.ProtocolZstd, m.bundles)
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.mon.startBus(ctx); err != nil {
		cancel()
		return fail(fmt.Errorf("event bus: %w", err))
	}
	m.mon.metrics.SetSource(m.metricsSource())
	if cfg.HTTPListen != "" {
		if err := m.mon.startHTTP(m.httpHandler); err != nil {
			cancel()
			return fail(err)
		}
	}
	m.cancel = cancel
	m.runErr = make(chan error, 1)
	go func() { m.runErr <- m.Driver.Run(ctx) }()
	// The private networks the data dir keeps listen again, so their
	// inferiors (glide-ins) come back by themselves.
	m.privnets.restore()
	m.startGlidein(ctx) // glidein.go: a glide-in's retire and idle leave; nothing otherwise
	m.startTrim(ctx)    // memtrim.go: what only starting used goes back to the page cache
	if err := m.writeAddrFile(); err != nil {
		m.Stop()
		return nil, err
	}
	ok = true
	log.Info("manager up", "name", cfg.Name, "peer", h.PeerID(), "addrs", strings.Join(h.FullAddrs(), " "))
	if a := m.HTTPAddr(); a != "" {
		log.Info("web UI and /metrics", "url", "http://"+a+"/")
	}
	return m, nil
}

// publish is the driver's Publish hook: the main event bus and every
// private network's.
func (m *Manager) publish(ev *wire.Event) {
	m.mon.publish(ev)
	m.privnets.publish(ev)
}

// Addr is a full multiaddr of the manager, preferring loopback (for a CLI
// on the same host).
func (m *Manager) Addr() string { return m.localAddrs()[0] }

// Done is closed when the manager's driver stopped: after Stop, or when a
// shutdown command stopped it (then call Stop to release the rest).
func (m *Manager) Done() <-chan struct{} { return m.Driver.Done() }

func (m *Manager) localAddrs() []string {
	full := m.Host.FullAddrs()
	// FullAddrs lists loopback last; a local client wants it first.
	var lo, other []string
	for _, a := range full {
		if strings.HasPrefix(a, "/ip4/127.") || strings.HasPrefix(a, "/ip6/::1/") {
			lo = append(lo, a)
		} else {
			other = append(other, a)
		}
	}
	return append(lo, other...)
}

func (m *Manager) writeAddrFile() error {
	path := filepath.Join(m.Cfg.DataDir, AddrFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(m.localAddrs(), "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("addr file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("addr file: %w", err)
	}
	return nil
}

// Stop says goodbye to every relation, closes the host, removes the addr
// file and releases the data dir.
func (m *Manager) Stop() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	m.cancel = nil
	<-m.runErr
	if m.jobs != nil {
		m.jobs.close()
	}
	if m.apps != nil {
		m.apps.ex.Close()
	}
	m.storage.close()
	m.privnets.shutdown()
	m.mon.close()
	_ = m.Host.Close()
	if err := m.Store.Close(); err != nil {
		m.log.Error("closing the reservation store", "err", err)
	}
	_ = os.Remove(filepath.Join(m.Cfg.DataDir, AddrFile))
	m.unlock()
}

// Crash stops the manager the way kill -9 would, for demos and tests: the
// host closes first, so peers see their channels reset with no goodbye;
// then the driver stops and the store closes (as the kernel would close
// the file). What was acknowledged is on disk already.
func (m *Manager) Crash() {
	if m.cancel == nil {
		return
	}
	_ = m.Host.Close()
	m.cancel()
	m.cancel = nil
	<-m.runErr
	if m.jobs != nil {
		m.jobs.close()
	}
	if m.apps != nil {
		m.apps.ex.Close()
	}
	m.storage.close()
	m.privnets.shutdown()
	m.mon.close()
	_ = m.Store.Close()
	_ = os.Remove(filepath.Join(m.Cfg.DataDir, AddrFile))
	m.unlock()
}

func (m *Manager) unlock() {
	if m.lock != nil {
		_ = syscall.Flock(int(m.lock.Fd()), syscall.LOCK_UN)
		_ = m.lock.Close()
		m.lock = nil
	}
}

// lockDataDir takes an exclusive flock on DATA_DIR/lock so that two
// managers never share a data dir (and so an identity).
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("%w: %s is locked by another gridmgr (pid %s)", ErrDataDirInUse, dir, strings.TrimSpace(string(pid)))
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// writeKeyFile records in the data dir where cfg's identity key is, when
// that is elsewhere (and removes what an earlier start recorded when it
// is not).
func writeKeyFile(cfg *config.Config) error {
	path := filepath.Join(cfg.DataDir, KeyFile)
	key, err := filepath.Abs(IdentityPath(cfg))
	if err != nil {
		return err
	}
	if dir, err := filepath.Abs(cfg.DataDir); err == nil && key == filepath.Join(dir, "identity.key") {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(key+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// IdentityIn is where the manager that runs (or ran) with data dir
// dataDir keeps its identity key: where it recorded (KeyFile), else
// DATA_DIR/identity.key, the default.
func IdentityIn(dataDir string) string {
	if data, err := os.ReadFile(filepath.Join(dataDir, KeyFile)); err == nil {
		if p := strings.TrimSpace(string(data)); p != "" {
			return p
		}
	}
	return filepath.Join(dataDir, "identity.key")
}

// ReadAddrFile is client.ReadAddrFile (the reading side of the file
// writeAddrFile writes): how the CLI finds
// the manager running on this host.
func ReadAddrFile(dataDir string) (string, error) { return client.ReadAddrFile(dataDir) }
