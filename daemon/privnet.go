package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/gridmgr/gridmgr/internal/atomicfile"
	"github.com/gridmgr/gridmgr/internal/lazyre"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/node/p2p/events"
	"github.com/gridmgr/gridmgr/node/p2p/transfer"
	"github.com/gridmgr/gridmgr/wire"
)

// Bounds of private networks.
const (
	// MaxPrivateNetworks is the most private networks one manager keeps.
	MaxPrivateNetworks = 16
	// MaxPrivateNetworksPerPeer is the most one client peer may open on
	// a manager over the wire (the manager itself is bound by
	// MaxPrivateNetworks only).
	MaxPrivateNetworksPerPeer = 4
	// PrivnetDir is where a manager keeps its private networks, under
	// its data dir: NAME.key (the pre-shared key, mode 0600) and
	// NAME.json (who opened it, where it listened).
	PrivnetDir = "privnets"
)

// Errors of private networks; each wraps ErrPrivateNetwork.
var (
	ErrPrivateNetwork   = errors.New("daemon: private network")
	ErrPrivnetName      = fmt.Errorf("%w: bad name", ErrPrivateNetwork)
	ErrPrivnetLimit     = fmt.Errorf("%w: limit reached", ErrPrivateNetwork)
	ErrPrivnetNotFound  = fmt.Errorf("%w: not found", ErrPrivateNetwork)
	ErrPrivnetForbidden = fmt.Errorf("%w: not allowed", ErrPrivateNetwork)
	ErrPrivnetConflict  = fmt.Errorf("%w: opened by another peer", ErrPrivateNetwork)
	ErrPrivnetClosed    = fmt.Errorf("%w: the manager is stopping", ErrPrivateNetwork)
)

var privnetNameRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// PrivateNetwork is one private network of a manager: a second libp2p
// listener with the manager's identity and a fresh pre-shared key, on
// which managers that hold the key join it as inferiors (glide-ins'
// --private).
type PrivateNetwork struct {
	Name  string
	PSK   []byte   // swarm.key format, what a private_network_key file holds
	Addrs []string // full multiaddrs, /ip4/…/tcp/N/p2p/ID
	Owner string   // the peer id that opened it (the manager's own: in-process)
	Peers int      // peers connected over it now
}

// privnets are a manager's private networks.
type privnets struct {
	m      *Manager
	mu     sync.Mutex // serialises open and close (each may take a while: a libp2p host)
	nets   map[string]*privnet
	closed bool
	// buses are the private networks' event buses, for the driver's
	// Publish hook, which must not wait on mu.
	buses atomic.Pointer[[]*events.Bus]
}

type privnet struct {
	name, owner string
	psk         []byte
	net         *p2p.Network
	bus         *events.Bus
	sub         *events.Sub
	subDone     chan struct{}
}

// privnetFile is NAME.json.
type privnetFile struct {
	Version int      `json:"version"`
	Owner   string   `json:"owner"`
	Listen  []string `json:"listen"` // the bound listen multiaddrs, ports included
}

func newPrivnets(m *Manager) *privnets {
	return &privnets{m: m, nets: map[string]*privnet{}}
}

func (p *privnets) dir() string { return filepath.Join(p.m.Cfg.DataDir, PrivnetDir) }

// OpenPrivateNetwork opens the private network name on behalf of the
// manager itself, or returns it if it is open already: a fresh pre-shared
// key, a second libp2p host with the manager's identity listening on the
// IPs of its listen addresses with a port of its own, serving the mesh
// and client protocols into the same Core. It is kept in the data dir
// (PrivnetDir): after a restart the manager opens it again with the same
// key and, when it is free, the same port.
func (m *Manager) OpenPrivateNetwork(name string) (PrivateNetwork, error) {
	return m.privnets.open(name, m.Host.PeerID(), true)
}

// ClosePrivateNetwork closes the private network name: its listener
// closes, its peers are disconnected, its key is deleted.
func (m *Manager) ClosePrivateNetwork(name string) error {
	_, err := m.privnets.close(name, m.Host.PeerID(), true)
	return err
}

// PrivateNetworks are the manager's private networks, sorted by name.
func (m *Manager) PrivateNetworks() []PrivateNetwork {
	return m.privnets.list("", true)
}

func (p *privnets) info(n *privnet, withKey bool) PrivateNetwork {
	pn := PrivateNetwork{Name: n.name, Addrs: localFirst(n.net.FullAddrs()), Owner: n.owner}
	if withKey {
		pn.PSK = slices.Clone(n.psk)
	}
	pn.Peers = len(n.net.LibP2P().Network().Peers())
	return pn
}

// open opens name for owner (admin: the asker is an admin, who may have
// any network back and is bound by the manager's limit only).
func (p *privnets) open(name, owner string, admin bool) (PrivateNetwork, error) {
	if !privnetNameRE.MatchString(name) {
		return PrivateNetwork{}, fmt.Errorf("%w %s: a name is 1 to 64 letters, digits, '.', '_' or '-', beginning with a letter or digit", ErrPrivnetName, text.QuoteShort(name))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return PrivateNetwork{}, ErrPrivnetClosed
	}
	if n := p.nets[name]; n != nil {
		if n.owner != owner && !admin {
			return PrivateNetwork{}, fmt.Errorf("%w: %s was opened by peer %s", ErrPrivnetConflict, name, text.ShortPeer(n.owner))
		}
		return p.info(n, true), nil
	}
	if len(p.nets) >= MaxPrivateNetworks {
		return PrivateNetwork{}, fmt.Errorf("%w: manager %s has %d private networks, the most it keeps (%d): close one first",
			ErrPrivnetLimit, p.m.Cfg.Name, len(p.nets), MaxPrivateNetworks)
	}
	if owner != p.m.Host.PeerID() {
		mine := 0
		for _, n := range p.nets {
			if n.owner == owner {
				mine++
			}
		}
		if mine >= MaxPrivateNetworksPerPeer {
			return PrivateNetwork{}, fmt.Errorf("%w: peer %s has %d private networks on manager %s, the most one client peer may open (%d): close one first",
				ErrPrivnetLimit, text.ShortPeer(owner), mine, p.m.Cfg.Name, MaxPrivateNetworksPerPeer)
		}
	}
	key, err := p2p.GeneratePSK()
	if err != nil {
		return PrivateNetwork{}, fmt.Errorf("%w %s: %w", ErrPrivateNetwork, name, err)
	}
	n, err := p.start(name, owner, key, privListen(p.m.Cfg.Listen))
	if err != nil {
		return PrivateNetwork{}, err
	}
	if err := p.save(n); err != nil {
		p.stop(n)
		p.removeFiles(name)
		return PrivateNetwork{}, fmt.Errorf("%w %s: keeping it in the data dir: %w", ErrPrivateNetwork, name, err)
	}
	p.nets[name] = n
	p.publishBuses()
	p.m.log.Info("private network opened", "name", name, "owner", owner, "addrs", strings.Join(n.net.FullAddrs(), " "))
	return p.info(n, true), nil
}

// start listens on listen with key and starts the network's event bus.
func (p *privnets) start(name, owner string, key []byte, listen []string) (*privnet, error) {
	psk, err := pnet.DecodeV1PSK(bytes.NewReader(key))
	if err != nil {
		return nil, fmt.Errorf("%w %s: key: %w", ErrPrivateNetwork, name, err)
	}
	net, err := p.m.Host.AddNetwork(name, psk, listen)
	if err != nil {
		return nil, err
	}
	n := &privnet{name: name, owner: owner, psk: key, net: net}
	if p.m.bundles != nil {
		net.LibP2P().SetStreamHandler(transfer.Protocol, p.m.bundles)
		net.LibP2P().SetStreamHandler(transfer.ProtocolTrailer, p.m.bundles)
		net.LibP2P().SetStreamHandler(transfer.ProtocolZstd, p.m.bundles)
	}
	if err := p.startBus(n); err != nil {
		p.m.Host.RemoveNetwork(name)
		return nil, fmt.Errorf("%w %s: event bus: %w", ErrPrivateNetwork, name, err)
	}
	return n, nil
}

// startBus runs an event bus on the private network, as on the main
// host: the manager hears its inferiors there (their utilisation samples
// reach the Core, their events the archive and the web UI) and publishes
// its own events there too. Events are not relayed from one network to
// another: each producer signs its own.
func (p *privnets) startBus(n *privnet) error {
	h := p.m.Host
	bus, err := events.New(context.Background(), n.net.LibP2P(), events.Options{
		Log:    p.m.log.With("private_network", n.name),
		Accept: func(from peer.ID) bool { return h.IsManager(from.String()) },
	})
	if err != nil {
		return err
	}
	topics := []string{events.UtilTopic(h.PeerID())}
	for _, k := range events.Kinds {
		topics = append(topics, events.KindTopic(k))
	}
	sub, err := bus.Subscribe(topics...)
	if err != nil {
		bus.Close()
		return err
	}
	n.bus, n.sub, n.subDone = bus, sub, make(chan struct{})
	go func() {
		defer close(n.subDone)
		for r := range sub.C {
			ev := r.Event
			if ev.Kind == wire.EventKind_EVENT_KIND_UTILIZATION {
				p.m.Driver.Deliver(node.Input{Kind: node.InputObserved, Event: ev})
			}
			p.m.mon.local(ev)
		}
	}()
	return nil
}

// stop ends the network's bus and its listener (its peers are lost).
func (p *privnets) stop(n *privnet) {
	if n.bus != nil {
		n.bus.Close()
	}
	if n.sub != nil {
		n.sub.Close()
		<-n.subDone
	}
	p.m.Host.RemoveNetwork(n.name)
}

func (p *privnets) publishBuses() {
	var bs []*events.Bus
	for _, n := range p.nets {
		bs = append(bs, n.bus)
	}
	p.buses.Store(&bs)
}

// publish hands ev to every private network's bus (the driver's Publish
// hook calls it besides the main bus); it never blocks.
func (p *privnets) publish(ev *wire.Event) {
	if bs := p.buses.Load(); bs != nil {
		for _, b := range *bs {
			b.Publish(ev)
		}
	}
}

// close closes name for asker.
func (p *privnets) close(name, asker string, admin bool) (PrivateNetwork, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.nets[name]
	if n == nil {
		return PrivateNetwork{}, fmt.Errorf("%w: manager %s has no private network %s", ErrPrivnetNotFound, p.m.Cfg.Name, text.QuoteShort(name))
	}
	if n.owner != asker && !admin {
		return PrivateNetwork{}, fmt.Errorf("%w: private network %s was opened by peer %s; only it or an admin may close it", ErrPrivnetForbidden, name, text.ShortPeer(n.owner))
	}
	info := p.info(n, false)
	delete(p.nets, name)
	p.publishBuses()
	p.stop(n)
	if err := p.removeFiles(name); err != nil {
		return info, fmt.Errorf("%w %s: closed, but its key stays: %w", ErrPrivateNetwork, name, err)
	}
	p.m.log.Info("private network closed", "name", name)
	return info, nil
}

// list is the networks asker opened (admin: all), with their keys.
func (p *privnets) list(asker string, admin bool) []PrivateNetwork {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []PrivateNetwork
	for _, n := range p.nets {
		if admin || n.owner == asker {
			out = append(out, p.info(n, true))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// shutdown stops every network's bus before the monitoring closes; the
// listeners close with the Host (which says goodbye on them first), and
// the files stay, for the next start.
func (p *privnets) shutdown() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.buses.Store(nil)
	for _, n := range p.nets {
		n.bus.Close()
		n.sub.Close()
		<-n.subDone
	}
}

// save writes n's key (0600) and its record.
func (p *privnets) save(n *privnet) error {
	if err := os.MkdirAll(p.dir(), 0o700); err != nil {
		return err
	}
	var listen []string
	for _, a := range n.net.LibP2P().Network().ListenAddresses() {
		listen = append(listen, a.String())
	}
	rec, err := json.MarshalIndent(privnetFile{Version: 1, Owner: n.owner, Listen: listen}, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(p.dir(), n.name+".key"), bytes.NewReader(n.psk), 0o600); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(p.dir(), n.name+".json"), bytes.NewReader(append(rec, '\n')), 0o600)
}

func (p *privnets) removeFiles(name string) error {
	var errs []error
	for _, ext := range []string{".key", ".json"} {
		if err := os.Remove(filepath.Join(p.dir(), name+ext)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// restore opens again what the data dir keeps, on the same ports when
// they are free. A network that cannot be restored is logged and left on
// disk.
func (p *privnets) restore() {
	ents, err := os.ReadDir(p.dir())
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			p.m.log.Warn("private networks not restored", "dir", p.dir(), "err", err)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !privnetNameRE.MatchString(name) {
			continue
		}
		if len(p.nets) >= MaxPrivateNetworks {
			p.m.log.Warn("private network not restored: the manager keeps at most "+fmt.Sprint(MaxPrivateNetworks), "name", name)
			continue
		}
		if err := p.restoreOne(name); err != nil {
			p.m.log.Warn("private network not restored", "name", name, "err", err)
		}
	}
	p.publishBuses()
}

func (p *privnets) restoreOne(name string) error {
	data, err := os.ReadFile(filepath.Join(p.dir(), name+".json"))
	if err != nil {
		return err
	}
	var rec privnetFile
	if err := json.Unmarshal(data, &rec); err != nil || rec.Version != 1 {
		return fmt.Errorf("%s: not a private network record (version 1): %v", name+".json", err)
	}
	key, err := os.ReadFile(filepath.Join(p.dir(), name+".key"))
	if err != nil {
		return err
	}
	n, err := p.start(name, rec.Owner, key, rec.Listen)
	if err != nil {
		// The port was taken meanwhile: another one; the inferiors
		// need the new address.
		p.m.log.Warn("private network's port is not free: it listens on another", "name", name, "was", strings.Join(rec.Listen, " "), "err", err)
		if n, err = p.start(name, rec.Owner, key, privListen(p.m.Cfg.Listen)); err != nil {
			return err
		}
		if err := p.save(n); err != nil {
			p.stop(n)
			return err
		}
	}
	p.nets[name] = n
	p.m.log.Info("private network restored", "name", name, "addrs", strings.Join(n.net.FullAddrs(), " "))
	return nil
}

var tcpPortRE = regexp.MustCompile(`/tcp/[0-9]+`)

// privListen are the manager's listen addresses with port 0: the same
// IPs, a port of the private network's own.
func privListen(listen []string) []string {
	var out []string
	for _, a := range listen {
		out = append(out, tcpPortRE.ReplaceAllString(a, "/tcp/0"))
	}
	return slices.Compact(out)
}

// localFirst orders full addresses loopback first, as localAddrs does.
func localFirst(full []string) []string {
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

// The wire request (docs/wire.md 5.14). The Core does not see it: the
// host's sink answers it before the driver, as it is the runtime's own
// business (a listener of the manager), not the grid's.

// privnetSink is the Host's sink: the driver, except for
// private_network_request.
type privnetSink struct{ m *Manager }

func (s privnetSink) Deliver(in node.Input) bool {
	if in.Kind == node.InputClient && in.Env.GetPrivateNetworkRequest() != nil {
		select {
		case <-s.m.Driver.Done():
			return false
		default:
		}
		// On the client's own stream reader: a slow open delays that
		// session only.
		rep := s.m.answerPrivateNetwork(in.Peer, in.Env.GetPrivateNetworkRequest())
		rep.ReplyTo = in.Env.Id
		rep.TraceId = in.Env.TraceId
		s.m.Host.Send(in.Chan, rep)
		return true
	}
	return s.m.Driver.Deliver(in)
}

// DeliverNow is Deliver, but lets the driver handle the input on the
// stream reader's goroutine when it is free (p2p.NowSink).
func (s privnetSink) DeliverNow(in node.Input) bool {
	if in.Kind == node.InputClient && in.Env.GetPrivateNetworkRequest() != nil {
		return s.Deliver(in)
	}
	return s.m.Driver.DeliverNow(in)
}

// answerPrivateNetwork answers a client's private_network_request.
func (m *Manager) answerPrivateNetwork(client string, req *wire.PrivateNetworkRequest) *wire.Envelope {
	admin, user := m.privnetRights(client)
	var nets []PrivateNetwork
	var err error
	switch {
	case !admin && !user:
		err = fmt.Errorf("%w: peer %s is neither an admin of manager %s (admins) nor a user of its [users] table; only they may have private networks",
			ErrPrivnetForbidden, text.ShortPeer(client), m.Cfg.Name)
	case req.Op == wire.PrivateNetworkRequest_OP_OPEN:
		var n PrivateNetwork
		n, err = m.privnets.open(req.Name, client, admin)
		nets = []PrivateNetwork{n}
	case req.Op == wire.PrivateNetworkRequest_OP_CLOSE:
		var n PrivateNetwork
		n, err = m.privnets.close(req.Name, client, admin)
		nets = []PrivateNetwork{n}
	case req.Op == wire.PrivateNetworkRequest_OP_LIST:
		nets = m.privnets.list(client, admin)
	default:
		err = fmt.Errorf("%w: op %v: want OP_OPEN, OP_CLOSE or OP_LIST", ErrPrivateNetwork, req.Op)
		return errorEnv(wire.ErrorReply_CODE_BAD_REQUEST, m.Cfg.Name, err)
	}
	if err != nil {
		code := wire.ErrorReply_CODE_UNAVAILABLE
		switch {
		case errors.Is(err, ErrPrivnetName):
			code = wire.ErrorReply_CODE_BAD_REQUEST
		case errors.Is(err, ErrPrivnetForbidden):
			code = wire.ErrorReply_CODE_FORBIDDEN
		case errors.Is(err, ErrPrivnetLimit):
			code = wire.ErrorReply_CODE_REFUSED
		case errors.Is(err, ErrPrivnetNotFound):
			code = wire.ErrorReply_CODE_NOT_FOUND
		case errors.Is(err, ErrPrivnetConflict):
			code = wire.ErrorReply_CODE_CONFLICT
		}
		return errorEnv(code, m.Cfg.Name, err)
	}
	rep := &wire.PrivateNetworkReply{}
	for _, n := range nets {
		rep.Networks = append(rep.Networks, &wire.PrivateNetworkInfo{Name: n.Name, Psk: n.PSK, Addrs: n.Addrs, Owner: n.Owner, Peers: uint32(n.Peers)})
	}
	return &wire.Envelope{Body: &wire.Envelope_PrivateNetworkReply{PrivateNetworkReply: rep}}
}

func errorEnv(code wire.ErrorReply_Code, name string, err error) *wire.Envelope {
	msg := strings.TrimPrefix(err.Error(), ErrPrivateNetwork.Error()+": ")
	return &wire.Envelope{Body: &wire.Envelope_Error{Error: &wire.ErrorReply{Code: code, Message: name + ": " + msg}}}
}

// privnetRights says whether client is an admin of the manager (its
// properties file's admins, or the manager itself) and whether it is a
// user of its [users] table: the properties file's, with what was set
// and unset at run time over it (the attributes file, which the Core
// writes before it answers the change).
func (m *Manager) privnetRights(client string) (admin, user bool) {
	if client == m.Host.PeerID() || slices.Contains(m.Cfg.Admins, client) {
		return true, true
	}
	sa, err := ReadAttributes(filepath.Join(m.Cfg.DataDir, AttributesFile))
	if err != nil {
		m.log.Warn("private networks: the users set at run time are unknown", "err", err)
	}
	if sa == nil {
		sa = &node.SavedAttributes{}
	}
	for name, ids := range m.Cfg.Users {
		if slices.Contains(sa.UnsetUsers, name) || sa.Users[name] != nil {
			continue
		}
		if slices.Contains(ids, client) {
			return false, true
		}
	}
	for _, ids := range sa.Users {
		if slices.Contains(ids, client) {
			return false, true
		}
	}
	return false, false
}
