package node

import (
	"fmt"
	"maps"
	"time"

	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// HostValues are this host's values as the runtime measured them. The Core
// applies the properties' overrides (the config) and, later, what is reserved.
type HostValues struct {
	At       time.Time // when sampled
	CPUs     int
	Mem      uint64  // total, bytes
	MemAvail uint64  // available to new work, bytes
	CPUUtil  float64 // 0..1 smoothed; < 0 unknown
	NetMbps  float64 // 0 unknown
	Hostname string
	OS, Arch string // Go's names (runtime.GOOS, GOARCH)
	// Live values, each with whether it was measured.
	Load1, Load5, Load15 float64
	HaveLoad             bool
	Uptime               time.Duration
	HaveUptime           bool
	DiskFree             uint64 // bytes free on the data dir's filesystem
	HaveDisk             bool
	Disks                map[string]uint64 // bytes free on the filesystems of [disks], by name (those read)
	Idle                 time.Duration     // since console or keyboard input
	HaveIdle             bool
}

// SetHost gives the Core fresh host values.
func (c *Core) SetHost(now time.Time, hv HostValues) {
	c.dl.ok = false // see NextDeadline
	c.now = now
	c.res.hostAt = 0
	if !hv.At.IsZero() {
		c.res.hostAt = hv.At.UnixNano()
	}
	c.res.vals = c.res.values(&hv)
}

// values computes the query attributes of this manager: the host values
// hv with the properties' overrides applied. The module keeps the result
// in vals, refreshed by SetHost.
func (m *reservations) values(hv *HostValues) query.Values {
	e := m.e
	v := query.Values{
		Name:     e.name(),
		Hostname: firstNonEmpty(e.ownFields().Hostname, hv.Hostname),
		OS:       firstNonEmpty(e.conf().OS, hv.OS),
		Arch:     firstNonEmpty(e.conf().Arch, hv.Arch),
		CPUs:     int64(hv.CPUs),
		Mem:      int64(hv.Mem),
		MemFree:  int64(hv.MemAvail),
		CPUUtil:  hv.CPUUtil,
		NetMbps:  hv.NetMbps,
		Attrs:    e.ownFields().Attributes,
		Apps:     m.appCounts,
		GoOS:     hv.OS,
		GoArch:   hv.Arch,
		Now:      e.clock(),
		Load1:    -1, Load5: -1, Load15: -1, UptimeS: -1, DiskFree: -1, IdleS: -1,
	}
	if hv.HaveLoad {
		v.Load1, v.Load5, v.Load15 = hv.Load1, hv.Load5, hv.Load15
	}
	if hv.HaveUptime {
		v.UptimeS = int64(hv.Uptime / time.Second)
	}
	if len(hv.Disks) > 0 {
		v.Disks = make(map[string]int64, len(hv.Disks))
		for k, n := range hv.Disks {
			v.Disks[k] = int64(min(n, 1<<62))
		}
	}
	if hv.HaveDisk {
		v.DiskFree = int64(min(hv.DiskFree, 1<<62))
	}
	if hv.HaveIdle {
		v.IdleS = hv.Idle.Seconds()
	}
	if hv.At.IsZero() {
		v.CPUUtil = -1 // never sampled: unknown
	}
	if e.conf().CPUs > 0 {
		v.CPUs = int64(e.conf().CPUs)
	}
	if e.conf().Memory > 0 {
		v.Mem = int64(e.conf().Memory)
		if v.MemFree == 0 || v.MemFree > v.Mem {
			v.MemFree = v.Mem
		}
	}
	if e.conf().MemoryFree > 0 {
		v.MemFree = int64(e.conf().MemoryFree)
	}
	if e.conf().CPUUtil != nil {
		v.CPUUtil = *e.conf().CPUUtil
	}
	if e.conf().NetMbps > 0 {
		v.NetMbps = e.conf().NetMbps
	}
	// The owner's declarations of the other live values ([resources]).
	for _, o := range []struct {
		decl *float64
		to   *float64
	}{{e.conf().Load1, &v.Load1}, {e.conf().Load5, &v.Load5}, {e.conf().Load15, &v.Load15}, {e.conf().IdleS, &v.IdleS}} {
		if o.decl != nil {
			*o.to = *o.decl
		}
	}
	if e.conf().UptimeS != nil {
		v.UptimeS = *e.conf().UptimeS
	}
	if e.conf().DiskFree != nil {
		v.DiskFree = int64(min(*e.conf().DiskFree, 1<<62))
	}
	if len(e.conf().DisksFree) > 0 {
		if v.Disks == nil {
			v.Disks = make(map[string]int64, len(e.conf().DisksFree))
		}
		for k, n := range e.conf().DisksFree {
			v.Disks[k] = int64(min(n, 1<<62))
		}
	}
	// Free amounts are net of reservations (refreshFree keeps them so).
	m.memAvail = v.MemFree
	m.ledger.SetCapacity(reservation.CPUs, v.CPUs)
	m.ledger.SetCapacity(reservation.Mem, v.Mem)
	v.CPUsFree = m.ledger.Free(reservation.CPUs)
	v.MemFree = min(m.memAvail, m.ledger.Free(reservation.Mem))
	v.Tokens = m.tokenFree()
	v.Prepare()
	return v
}

// tokenFree returns the free count, net of reservations, of each counted
// token this manager declares (the config's Tokens; a kind the ledger
// knows only from restored reservations is not offered), or nil if it
// declares none.
func (m *reservations) tokenFree() map[string]int64 {
	e := m.e
	if len(e.conf().Tokens) == 0 {
		return nil
	}
	out := make(map[string]int64, len(e.conf().Tokens))
	for _, u := range m.ledger.Usage() {
		if u.Kind == reservation.CPUs || u.Kind == reservation.Mem {
			continue
		}
		if _, ok := e.conf().Tokens[u.Kind]; ok {
			out[u.Kind] = u.Free()
		}
	}
	return out
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// offerOf is this manager's offer for the query, or nil if the requirement
// does not hold, the owner's policy refuses the requester, or an admin
// drained the manager.
func (m *reservations) offerOf(now time.Time, req *wire.QueryRequest, need, rank *query.Program) *wire.Offer {
	e := m.e
	if m.drained && !req.Locate {
		// It takes no new reservation: an offer would only send clients
		// to be refused (a client reserving through a query tried every
		// drained manager in turn). Finding it by name still works.
		return nil
	}
	v := &m.vals
	var starts []*wire.Span
	switch from, to := queryWindow(now, req); {
	case req.Earliest && !req.Locate:
		// Free amounts over this manager's own earliest window.
		if starts, v = m.earliestStarts(now, req); starts == nil {
			return nil
		}
	case !from.IsZero():
		v = m.valuesOver(from, to)
	}
	r := &query.Request{User: req.User, CPUs: req.Cpus, Mem: req.Mem, Attrs: req.Attrs}
	v, ownerRank, ownerRanked := m.forRequest(v, r)
	if !need.Match(v, r) {
		return nil
	}
	if req.Locate {
		// Finding a manager by name is not asking for its resources: the
		// policy does not apply, and only the identity is told.
		return &wire.Offer{Peer: e.me(), Name: e.name(), Addrs: e.listenAddrs(), Ranked: true}
	}
	if p := m.policy(); p != nil && !p.Match(v, r) {
		return nil
	}
	o := valuesOffer(v)
	o.Peer, o.Addrs, o.Starts = e.me(), e.listenAddrs(), starts
	o.OwnerRank, o.OwnerRanked = ownerRank, ownerRanked
	if refs := need.Refs(); len(refs) > 0 {
		o.Matched = make([]*wire.Attr, len(refs))
		for i, ref := range refs {
			o.Matched[i] = &wire.Attr{Key: ref, Value: v.Show(ref)}
		}
	}
	if rank != nil {
		o.Rank, o.Ranked = rank.Score(v, r)
	} else {
		o.Ranked = true // no rank: every offer ranks 0
	}
	return o
}

// forRequest returns the values that the expressions about request r see
// here: v with the owner's rank of r (owner_rank), computed first, so that
// the policy, the requirement and the asker's rank may read it; v itself
// when the owner has no rank. It also returns that rank, and whether it
// is defined. v is not changed: the rank is set on a copy.
func (m *reservations) forRequest(v *query.Values, r *query.Request) (_ *query.Values, rank float64, ranked bool) {
	e := m.e
	or := e.conf().RankProgram()
	if or == nil {
		return v, 0, false
	}
	rank, ranked = or.Score(v, r)
	w := *v
	w.OwnerRank, w.OwnerRanked = rank, ranked
	return &w, rank, ranked
}

func valuesOffer(v *query.Values) *wire.Offer {
	return &wire.Offer{
		Name:     v.Name,
		Cpus:     v.CPUs,
		CpusFree: v.CPUsFree,
		Mem:      v.Mem,
		MemFree:  v.MemFree,
		CpuUtil:  v.CPUUtil,
		NetMbps:  v.NetMbps,
		Hostname: v.Hostname,
		Os:       v.OS,
		Arch:     v.Arch,
	}
}

// resources describes this manager's live values.
func (m *reservations) resources(now time.Time) *wire.ResourcesReply {
	e := m.e
	v := &m.vals
	o := valuesOffer(v)
	o.Peer, o.Addrs = e.me(), e.listenAddrs()
	// Every variable an expression reads here, from the one list; the
	// owner's rank depends on the request, so its expression is told.
	o.Matched = v.Listing()
	for _, a := range o.Matched {
		if a.Key == query.OwnerRankVar {
			a.Value = "undefined: the owner has no rank"
			if or := e.conf().RankProgram(); or != nil {
				a.Value = "by request: " + or.Source()
			}
		}
	}
	rep := &wire.ResourcesReply{Values: o, Attributes: make(map[string]string, len(v.Attrs))}
	for k, a := range v.Attrs {
		rep.Attributes[k] = fmt.Sprint(a)
	}
	if p := m.policy(); p != nil {
		rep.Policy = p.Source()
	}
	if m.hostAt != 0 {
		rep.SampledMsAgo = msAgo(now, time.Unix(0, m.hostAt))
	}
	rep.Usage = m.usagePB()
	return rep
}

// localUse is this manager's own part of a utilization sample and what is
// free here, by kind (monitorEnv).
func (m *reservations) localUse() (*wire.Utilization, map[string]int64) {
	v := &m.vals
	u := &wire.Utilization{
		CpuUtil:      v.CPUUtil,
		Usage:        m.usagePB(),
		Reservations: uint32(m.ledger.Live()),
	}
	free := map[string]int64{"cpus": v.CPUsFree, "mem": v.MemFree}
	maps.Copy(free, m.tokenFree())
	for _, n := range m.appCounts {
		u.Instances += uint32(n.Instances)
		u.Running += uint32(n.Running)
	}
	return u, free
}

// offerOf, resources and localUse are the reservations module's answers
// for queries and the monitor (queriesEnv, monitorEnv).
func (c *Core) offerOf(now time.Time, req *wire.QueryRequest, need, rank *query.Program) *wire.Offer {
	return c.res.offerOf(now, req, need, rank)
}
func (c *Core) resources(now time.Time) *wire.ResourcesReply    { return c.res.resources(now) }
func (c *Core) localUse() (*wire.Utilization, map[string]int64) { return c.res.localUse() }
