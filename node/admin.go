package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/internal/keys"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node/admincmd"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/peeraddr"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// Limits of admin commands.
const (
	adminWait       = 10 * time.Second // add-superior, reparent, add-inferior wait this long for the other side
	adminAllBudget  = 5 * time.Second  // --all without a budget
	maxAdminPending = 256              // commands waiting for another manager or a plugin
)

// AuditRecord is one admin command that asked for a change, accepted or
// refused: the runtime appends it to the audit log in the data dir.
type AuditRecord struct {
	At      time.Time `json:"at"`
	Author  string    `json:"author"`  // the client's peer id
	Via     string    `json:"via"`     // "" or "all" (received through a grid-wide command)
	Command string    `json:"command"` // as given
	OK      bool      `json:"ok"`
	Result  string    `json:"result"` // the reply's text, first line
}

// PluginCall is the request of a CallPlugin: run plugin Name
// (gridmgr-cmd-NAME in plugins_dir) with Args and Stdin, and report a
// PluginResult.
type PluginCall struct {
	Name  string
	Args  []string
	Stdin []byte
}

// admins is the module of admin command strings: commands waiting for
// another manager (add-superior, reparent, add-inferior and its invite),
// --all commands collecting answers (floods), and plugins running in the
// runtime.
type admins struct {
	e          adminEnv
	seen       seenSet // --all request ids seen lately
	floods     []*adminFlood
	floodByEnv map[uint64]*adminFlood
	waits      map[string]*adminCall // peer waited on → command (add-superior, reparent, add-inferior)
	invites    map[string]*adminCall // peer invited (add-inferior) → command
	plugins    map[uint64]*adminCall // plugin calls running in the runtime
	nextPlugin uint64
}

// adminEnv is what the admin module sees of the Core besides env. An
// admin command is the operator's hand on the whole manager, so it is the
// widest: the status and resources it renders, the relations it adds and
// removes (and what must follow: dials, the saved superiors, the chain
// pushed down, the modules told), the config, drain and shutdown, the
// audit log, and the attributes and users set at runtime.
type adminEnv interface {
	env
	isAdmin(peer string) bool
	randomID() uint64
	listenAddrs() []string
	// lifecycle says when the manager started and whether it is
	// stopping.
	lifecycle() (started time.Time, stopping bool)
	status(now time.Time) *wire.StatusReply
	resources(now time.Time) *wire.ResourcesReply
	// ask makes a request in-process, as a client would (Core.ask).
	ask(now time.Time, o origin, env *wire.Envelope)
	// event records a relation event.
	event(now time.Time, peer, name, what string)
	closeChan(peer, reason string)
	// dial opens a channel to peer (an invite).
	dial(peer string, addrs []string)
	// dialDue dials the superiors due.
	dialDue(now time.Time)
	backoff() relations.Backoff
	// relationsChanged: the superiors are to be saved.
	relationsChanged()
	// removeRelation forgets r and tells every module.
	removeRelation(now time.Time, r *relations.Relation, why string)
	// pushChain sends the ancestor chain down if it changed.
	pushChain(now time.Time)
	// drain sets whether new reservations are refused; was: before.
	drain(on bool) (was bool)
	// shutdown asks the runtime to stop the manager.
	shutdown(reason string)
	// audit appends rec to the audit log.
	audit(rec AuditRecord)
	// config is the whole config in force, own fields included (Core.Config).
	config() config.Config
	// setConfig puts cfg in force and tells the runtime.
	setConfig(cfg config.Config)
	// savedAttrs are the attributes and users set at runtime (made
	// empty if none); admin edits them, then calls attributesChanged.
	savedAttrs() *SavedAttributes
	attributesChanged()
	// setAttributes makes attrs the attributes queries see.
	setAttributes(attrs map[string]any)
	// applyUsers puts the users table with sa over it in force.
	applyUsers(sa *SavedAttributes) int
}

func newAdmins(e adminEnv) *admins {
	return &admins{
		e:    e,
		seen: newSeenSet(seenTreeTTL, maxSeenTrees),
	}
}

// handle takes admin requests (from clients, or --all from relations),
// the relations' answers to --all, and their errors.
func (a *admins) handle(now time.Time, o origin, env *wire.Envelope) (bool, error) {
	switch b := env.Body.(type) {
	case *wire.Envelope_AdminRequest:
		a.onAdmin(now, o, b.AdminRequest, o.peer)
		return true, nil
	case *wire.Envelope_AdminReply:
		return true, a.onReply(now, o.peer, env.ReplyTo, b.AdminReply)
	case *wire.Envelope_Error:
		// A relation that cannot run --all (an older or newer version
		// answering UNSUPPORTED) is listed with its reason at once.
		f := a.floodByEnv[env.ReplyTo]
		if f == nil || f.done || f.waiting[env.ReplyTo] == nil || f.waiting[env.ReplyTo].Peer != o.peer {
			return false, nil
		}
		r := f.waiting[env.ReplyTo]
		delete(f.waiting, env.ReplyTo)
		delete(a.floodByEnv, env.ReplyTo)
		f.missing = append(f.missing, &wire.Silent{Peer: r.Peer, Name: r.DisplayName(), Why: "error: " + b.Error.Message})
		a.maybeFinishFlood(f, "")
		return true, nil
	}
	return false, nil
}

// relationEnded ends what waits on the relation: a flood lists it as
// missing at once instead of waiting for its deadline.
func (a *admins) relationEnded(_ time.Time, r *relations.Relation, why string) {
	a.failFloods(r.Peer, why)
}

// deadline is the earliest end of a flood or of a wait for another manager.
func (a *admins) deadline(time.Time) time.Time {
	var next time.Time
	at := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, f := range a.floods {
		if !f.done {
			at(f.deadline)
		}
	}
	for _, call := range a.waits {
		at(call.deadline)
	}
	return next
}

// invited reports whether an Invite to peer is in progress.
func (a *admins) invited(peer string) bool { return a.invites[peer] != nil }

// inviteChannelLost: the channel an invite went out on closed. The command
// then completes with the invitee's hello (on a new channel), or times out.
func (a *admins) inviteChannelLost(peer string) { delete(a.invites, peer) }

// inviteDialFailed: the invitee could not be reached.
func (a *admins) inviteDialFailed(now time.Time, peer, reason string) {
	if call := a.invites[peer]; call != nil {
		delete(a.invites, peer)
		delete(a.waits, peer)
		a.abandonWait(now, call, "dial failed: "+firstLine(reason))
	}
}

// adminCall is one admin command being carried out here: replies to it are
// rendered into an AdminReply for its asker.
type adminCall struct {
	o        origin      // who asked: a client session or a peer (--all)
	flood    *adminFlood // not nil: the command is this manager's part of a flood, answered to it
	author   string      // the client's peer id, as authenticated (by us or, for --all, the entry manager)
	via      string
	command  string
	name     string // command name
	mutating bool
	done     bool
	deadline time.Time

	// waiting on another manager
	peer     string // add-superior, reparent: the new superior; add-inferior: the invitee
	reparent bool
	invite   bool
	plugin   uint64
}

// adminFlood collects the answers to a --all command at one manager: its
// own and those of the relations it forwarded the command to.
type adminFlood struct {
	o        origin // asker: a client session (entry) or the peer we got it from
	entry    bool
	replies  []*wire.AdminReply
	missing  []*wire.Silent
	waiting  map[uint64]*relations.Relation // our envelope id → relation asked
	own      bool                           // our own answer is in
	deadline time.Time
	done     bool
}

// onAdmin handles an admin request from a client (peer == "") or, for
// --all, from a related manager.
func (a *admins) onAdmin(now time.Time, o origin, req *wire.AdminRequest, peer string) {
	e := a.e
	author := o.client
	if peer != "" {
		author = req.Author
	}
	if !req.All {
		a.run(now, &adminCall{o: o, author: author, command: req.Command})
		return
	}
	budget := adminAllBudget
	if req.BudgetMs > 0 {
		budget = min(time.Duration(req.BudgetMs)*time.Millisecond, time.Minute)
	}
	id := req.RequestId
	if peer == "" {
		id = e.randomID() | 1
	} else if a.seen.Has(id) {
		e.reply(o, &wire.Envelope{Body: &wire.Envelope_AdminReply{AdminReply: &wire.AdminReply{Name: e.name(), Peer: e.me(), Ok: true, Duplicate: true}}})
		return
	}
	a.seen.Add(now, id)
	f := &adminFlood{o: o, entry: peer == "", waiting: map[uint64]*relations.Relation{}, deadline: now.Add(budget * waitBudgetPct / 100)}
	a.floods = append(a.floods, f)
	for _, r := range e.relations().All() {
		if r.Peer == peer {
			continue
		}
		if !r.State.Live() {
			if r.Role == relations.Inferior || r.Trial == "" {
				f.missing = append(f.missing, &wire.Silent{Peer: r.Peer, Name: r.DisplayName(), Why: "down"})
			}
			continue
		}
		cb := ChildBudget(budget, r.RTT)
		if cb < minHopBudget {
			f.missing = append(f.missing, &wire.Silent{Peer: r.Peer, Name: r.DisplayName(), Why: "no budget"})
			continue
		}
		eid := e.newID()
		f.waiting[eid] = r
		if a.floodByEnv == nil {
			a.floodByEnv = make(map[uint64]*adminFlood)
		}
		a.floodByEnv[eid] = f
		e.send(r.Peer, &wire.Envelope{Id: eid, Body: &wire.Envelope_AdminRequest{AdminRequest: &wire.AdminRequest{
			Command: req.Command, All: true, BudgetMs: uint32(cb / time.Millisecond), RequestId: id, Author: author,
		}}})
	}
	a.run(now, &adminCall{o: origin{id: 1}, flood: f, author: author, via: "all", command: req.Command})
}

// onAdminReply takes a --all answer from a relation we forwarded to.
func (a *admins) onReply(now time.Time, peer string, replyTo uint64, rep *wire.AdminReply) error {
	e := a.e
	f := a.floodByEnv[replyTo]
	if f == nil || f.done {
		return nil
	}
	if f.waiting[replyTo] == nil || f.waiting[replyTo].Peer != peer {
		return fmt.Errorf("%w: admin reply %d from %s answers nothing asked of it", ErrProtocol, replyTo, peerName(e.relations(), peer))
	}
	delete(f.waiting, replyTo)
	delete(a.floodByEnv, replyTo)
	if !rep.Duplicate {
		got := rep.Replies
		if len(got) == 0 && rep.Name != "" {
			got = []*wire.AdminReply{rep}
		}
		f.replies = append(f.replies, got...)
		f.missing = append(f.missing, rep.Missing...)
		if f.entry && len(got) > 0 {
			e.reply(f.o, &wire.Envelope{Body: &wire.Envelope_AdminReply{AdminReply: &wire.AdminReply{
				Name: e.name(), Peer: e.me(), Ok: true, Partial: true, Replies: got,
			}}})
		}
	}
	a.maybeFinishFlood(f, "")
	return nil
}

// floodOwn takes this manager's own answer to a --all command.
func (a *admins) floodOwn(f *adminFlood, rep *wire.AdminReply) {
	e := a.e
	if f.done {
		return
	}
	f.own = true
	f.replies = append(f.replies, rep)
	if f.entry {
		e.reply(f.o, &wire.Envelope{Body: &wire.Envelope_AdminReply{AdminReply: &wire.AdminReply{
			Name: e.name(), Peer: e.me(), Ok: true, Partial: true, Replies: []*wire.AdminReply{rep},
		}}})
	}
	a.maybeFinishFlood(f, "")
}

// maybeFinishFlood answers once everything is in, or (why != "") at the
// deadline or when relations went down, listing those not heard.
func (a *admins) maybeFinishFlood(f *adminFlood, why string) {
	e := a.e
	if f.done || (why == "" && (len(f.waiting) > 0 || !f.own)) {
		return
	}
	for id, r := range f.waiting {
		f.missing = append(f.missing, &wire.Silent{Peer: r.Peer, Name: r.DisplayName(), Why: why})
		delete(a.floodByEnv, id)
	}
	// A manager listed as down by one neighbour (its old superior) but
	// answering through another is not missing.
	answered := map[string]bool{}
	for _, r := range f.replies {
		answered[r.Peer] = true
	}
	f.missing = slices.DeleteFunc(f.missing, func(s *wire.Silent) bool { return answered[s.Peer] })
	if !f.own {
		f.replies = append(f.replies, &wire.AdminReply{Name: e.name(), Peer: e.me(), Ok: false,
			Code: wire.ErrorReply_CODE_TIMEOUT, Output: "no answer before the deadline"})
	}
	f.waiting, f.done = nil, true
	slices.SortStableFunc(f.missing, func(a, b *wire.Silent) int { return strings.Compare(a.Name, b.Name) })
	ok := true
	for _, r := range f.replies {
		ok = ok && r.Ok
	}
	e.reply(f.o, &wire.Envelope{Body: &wire.Envelope_AdminReply{AdminReply: &wire.AdminReply{
		Name: e.name(), Peer: e.me(), Ok: ok, Replies: f.replies, Missing: f.missing,
	}}})
}

// expireAdmin answers floods and waiting commands whose time is up.
func (a *admins) tick(now time.Time) {
	live := a.floods[:0]
	for _, f := range a.floods {
		if !f.done && !now.Before(f.deadline) {
			a.maybeFinishFlood(f, "timeout")
		}
		if !f.done {
			live = append(live, f)
		}
	}
	clear(a.floods[len(live):])
	a.floods = live
	for _, key := range keys.Sorted(a.waits) {
		call := a.waits[key]
		if !now.Before(call.deadline) {
			delete(a.waits, key)
			a.abandonWait(now, call, fmt.Sprintf("no answer from %s within %s", text.ShortPeer(call.peer), text.FormatDuration(adminWait)))
		}
	}
}

// failAdmin ends what waits on a relation that went down.
func (a *admins) failFloods(peer, why string) {
	for _, f := range a.floods {
		if f.done {
			continue
		}
		for id, r := range f.waiting {
			if r.Peer == peer {
				delete(f.waiting, id)
				delete(a.floodByEnv, id)
				f.missing = append(f.missing, &wire.Silent{Peer: r.Peer, Name: r.DisplayName(), Why: why})
			}
		}
		a.maybeFinishFlood(f, "")
	}
}

// runAdmin parses, authorises and carries out one command.
func (a *admins) run(now time.Time, call *adminCall) {
	e := a.e
	cmd, err := admincmd.Parse(call.command)
	if err != nil {
		a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, err.Error())
		return
	}
	call.name = cmd.Name
	if cmd.Spec == nil {
		a.runPlugin(now, call, cmd)
		return
	}
	call.mutating = cmd.Spec.Mutating
	if call.mutating && !e.isAdmin(call.author) {
		a.fail(now, call, wire.ErrorReply_CODE_FORBIDDEN, fmt.Sprintf(
			"%s: %q changes the manager; only the peers in its admins list may run it (you are %s)",
			e.name(), cmd.Name, call.author))
		return
	}
	args := cmd.Args
	switch cmd.Name {
	case "help":
		out, err := admincmd.Help(args, nil)
		if err != nil {
			a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, err.Error())
			return
		}
		if len(args) == 0 && e.conf().PluginsDir != "" {
			out += fmt.Sprintf("\nAdmins may also run plugins: executables named %sNAME in %s.\n", admincmd.PluginPrefix, e.conf().PluginsDir)
		}
		a.ok(now, call, out)
	case "status":
		n := render.DefaultEvents
		if len(args) == 1 {
			v, err := strconv.ParseUint(args[0], 10, 16)
			if err != nil {
				a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, fmt.Sprintf("status: %q is not a number of events (0 for all)", args[0]))
				return
			}
			n = int(v)
		}
		a.ok(now, call, render.StatusEvents(e.status(now), n, "status 0 shows all"))
	case "relations":
		a.ok(now, call, render.Relations(e.status(now)))
	case "resources":
		a.ok(now, call, render.Resources(e.resources(now)))
	case "reservations":
		req := &wire.ReservationsRequest{}
		if len(args) == 1 {
			switch args[0] {
			case "all":
				req.All = true
			case "mine":
				req.Mine = true
			default:
				a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, fmt.Sprintf("reservations: %q is not all or mine", args[0]))
				return
			}
		}
		e.ask(now, origin{client: call.author, id: 1, answer: func(env *wire.Envelope) { a.result(call, env) }},
			&wire.Envelope{Body: &wire.Envelope_ReservationsRequest{ReservationsRequest: req}})
	case "tree":
		req := &wire.TreeRequest{BudgetMs: 4000}
		if len(args) == 1 {
			d, err := strconv.ParseUint(args[0], 10, 8)
			if err != nil {
				a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, fmt.Sprintf("tree: depth %q is not a number from 0 to 255", args[0]))
				return
			}
			req.MaxDepth = uint32(d)
		}
		e.ask(now, origin{id: 1, answer: func(env *wire.Envelope) { a.result(call, env) }},
			&wire.Envelope{Body: &wire.Envelope_TreeRequest{TreeRequest: req}})
	case "add-superior", "reparent":
		a.addSuperior(now, call, args[0], cmd.Name == "reparent")
	case "remove-superior":
		a.removeSuperior(now, call, args[0])
	case "add-inferior":
		a.addInferior(now, call, args[0])
	case "remove-inferior":
		a.removeInferior(now, call, args[0])
	case "set":
		switch {
		case args[0] == "attribute" && len(args) == 3:
			a.setAttribute(now, call, args[1], args[2], false)
		case args[0] == "user" && len(args) == 3:
			a.setUser(now, call, args[1], args[2], false)
		case args[0] == "user":
			a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, "set user: give NAME and PEER_ID[,PEER_ID…], e.g. set user alice 12D3KooW…")
		case args[0] == "attribute":
			a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, "set attribute: give NAME and VALUE, e.g. set attribute zone eu-2")
		case len(args) == 3:
			a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, fmt.Sprintf("set: give KEY VALUE (quote a VALUE with spaces), or attribute NAME VALUE; got %d words", len(args)))
		default:
			a.set(now, call, args[0], args[1])
		}
	case "unset":
		switch args[0] {
		case "attribute":
			a.setAttribute(now, call, args[1], "", true)
		case "user":
			a.setUser(now, call, args[1], "", true)
		default:
			a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, fmt.Sprintf("unset: give attribute NAME or user NAME (got %q)", args[0]))
		}
	case "drain", "undrain":
		drained := cmd.Name == "drain"
		was := e.drain(drained)
		state := map[bool]string{true: "drained: new reservations are refused and queries get no offer from it, existing ones are kept", false: "not drained: new reservations are accepted"}
		if was == drained {
			a.ok(now, call, fmt.Sprintf("%s was already %s", e.name(), state[was]))
			return
		}
		e.event(now, e.me(), e.name(), fmt.Sprintf("%s by %s", cmd.Name, text.ShortPeer(call.author)))
		a.ok(now, call, fmt.Sprintf("%s is now %s", e.name(), state[drained]))
	case "shutdown":
		a.ok(now, call, fmt.Sprintf("%s is shutting down; its inferiors are told and move at once", e.name()))
		e.shutdown(fmt.Sprintf("shutdown by admin %s", text.ShortPeer(call.author)))
	default:
		a.fail(now, call, wire.ErrorReply_CODE_UNSUPPORTED, fmt.Sprintf("%s: %q is built in but not handled by this version", e.name(), cmd.Name))
	}
}

// adminOK and adminFail answer a command (and audit it if it changes
// anything).
func (a *admins) ok(now time.Time, call *adminCall, out string) {
	e := a.e
	a.done(now, call, &wire.AdminReply{Name: e.name(), Peer: e.me(), Ok: true, Output: out})
}

func (a *admins) fail(now time.Time, call *adminCall, code wire.ErrorReply_Code, msg string) {
	e := a.e
	a.done(now, call, &wire.AdminReply{Name: e.name(), Peer: e.me(), Code: code, Output: msg})
}

func (a *admins) done(now time.Time, call *adminCall, rep *wire.AdminReply) {
	e := a.e
	if call.done {
		return
	}
	call.done = true
	if call.mutating || rep.Code == wire.ErrorReply_CODE_FORBIDDEN || call.plugin != 0 {
		first, _, _ := strings.Cut(strings.TrimSpace(rep.Output), "\n")
		rec := AuditRecord{At: now, Author: call.author, Via: call.via, Command: call.command, OK: rep.Ok, Result: first}
		e.audit(rec)
		publishAdmin(e, now, rec)
	}
	if rep.Ok {
		e.logger().Info("admin command", "author", text.ShortPeer(call.author), "command", call.command, "via", call.via)
	} else {
		e.logger().Warn("admin command failed", "author", text.ShortPeer(call.author), "command", call.command, "via", call.via, "err", rep.Output)
	}
	if f := call.flood; f != nil {
		a.floodOwn(f, rep)
		return
	}
	e.reply(call.o, &wire.Envelope{Body: &wire.Envelope_AdminReply{AdminReply: rep}})
}

// adminResult turns what a read-only command's operation answered (a
// tree, reservations, an error) into the command's text.
func (a *admins) result(call *adminCall, env *wire.Envelope) {
	e := a.e
	now := e.clock()
	switch b := env.Body.(type) {
	case *wire.Envelope_TreeReply:
		a.ok(now, call, render.Tree(b.TreeReply.GetRoot()))
	case *wire.Envelope_ReservationsReply:
		a.ok(now, call, render.Reservations(b.ReservationsReply, now, nil))
	case *wire.Envelope_Error:
		a.fail(now, call, b.Error.Code, b.Error.Message)
	default:
		a.fail(now, call, wire.ErrorReply_CODE_UNSUPPORTED, fmt.Sprintf("unexpected %T", env.Body))
	}
}

// wait registers a command that waits for another manager.
func (a *admins) wait(now time.Time, call *adminCall, peer string) bool {
	e := a.e
	if len(a.waits) >= maxAdminPending {
		a.fail(now, call, wire.ErrorReply_CODE_OVERLOADED, fmt.Sprintf("%s has %d admin commands waiting", e.name(), len(a.waits)))
		return false
	}
	if old := a.waits[peer]; old != nil {
		a.fail(now, call, wire.ErrorReply_CODE_CONFLICT, fmt.Sprintf("%s is already waiting on %s for %q", e.name(), text.ShortPeer(peer), old.command))
		return false
	}
	call.peer, call.deadline = peer, now.Add(adminWait)
	if a.waits == nil {
		a.waits = make(map[string]*adminCall)
	}
	a.waits[peer] = call
	return true
}

// adminAddSuperior dials the new superior and answers once it welcomed us
// (or refused: a cycle, …). With reparent, the other superiors are left
// once it did.
func (a *admins) addSuperior(now time.Time, call *adminCall, addr string, reparent bool) {
	e := a.e
	pa, err := peeraddr.ParsePeerMaddr(addr)
	if err != nil {
		a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, err.Error())
		return
	}
	if r := e.relations().Get(pa.Peer); r != nil {
		switch {
		case r.Role == relations.Inferior:
			a.fail(now, call, wire.ErrorReply_CODE_REFUSED, fmt.Sprintf(
				"refused: %s is an inferior of %s; taking it as a superior would close a cycle", r.DisplayName(), e.name()))
			return
		case r.State.Live() && !reparent:
			a.ok(now, call, fmt.Sprintf("%s is already a superior of %s", r.DisplayName(), e.name()))
			return
		case r.State.Live():
			call.reparent = true
			a.leaveOthers(now, r, call)
			a.ok(now, call, fmt.Sprintf("%s is now the only superior of %s", r.DisplayName(), e.name()))
			return
		}
	}
	if pa.Peer == e.me() {
		a.fail(now, call, wire.ErrorReply_CODE_REFUSED, fmt.Sprintf("refused: %s cannot be its own superior", e.name()))
		return
	}
	if e.relations().IsAncestor(pa.Peer) && !reparent {
		a.ok(now, call, fmt.Sprintf("%s is already an ancestor of %s", text.ShortPeer(pa.Peer), e.name()))
		return
	}
	if !a.wait(now, call, pa.Peer) {
		return
	}
	call.reparent = reparent
	r := e.relations().Get(pa.Peer)
	if r == nil {
		r, err = e.relations().AddSuperior(now, pa, false, e.backoff())
		if err != nil {
			delete(a.waits, pa.Peer)
			a.fail(now, call, wire.ErrorReply_CODE_REFUSED, "refused: "+text.Human(err))
			return
		}
	}
	r.Origin = relations.FromAdmin
	r.SetNextDial(now)
	e.dialDue(now)
}

// adminSuperiorUp answers an add-superior/reparent whose superior welcomed us.
func (a *admins) superiorUp(now time.Time, r *relations.Relation) {
	e := a.e
	call := a.waits[r.Peer]
	if call == nil || call.invite {
		return
	}
	delete(a.waits, r.Peer)
	r.Origin = relations.FromAdmin
	if call.reparent {
		a.leaveOthers(now, r, call)
		a.ok(now, call, fmt.Sprintf("%s is now the only superior of %s", r.DisplayName(), e.name()))
	} else {
		a.ok(now, call, fmt.Sprintf("%s took %s as an inferior", r.DisplayName(), e.name()))
	}
	e.event(now, r.Peer, r.DisplayName(), fmt.Sprintf("superior added by admin %s (%s)", text.ShortPeer(call.author), call.name))
	e.relationsChanged()
}

// adminSuperiorFailed answers an add-superior/reparent whose superior
// could not be reached or refused; the relation is dropped.
func (a *admins) superiorFailed(now time.Time, r *relations.Relation) bool {
	call := a.waits[r.Peer]
	if call == nil || call.invite || r.Role != relations.Superior {
		return false
	}
	delete(a.waits, r.Peer)
	a.abandonWait(now, call, r.LastError)
	return true
}

// abandonWait fails a waiting command and undoes what it started.
func (a *admins) abandonWait(now time.Time, call *adminCall, why string) {
	e := a.e
	if call.invite {
		delete(a.invites, call.peer)
		e.closeChan(call.peer, "invite abandoned")
		a.fail(now, call, wire.ErrorReply_CODE_REFUSED, fmt.Sprintf("%s did not take %s as a superior: %s", text.ShortPeer(call.peer), e.name(), why))
		return
	}
	if r := e.relations().Get(call.peer); r != nil && r.Role == relations.Superior && !r.State.Live() {
		e.closeChan(r.Peer, "add-superior abandoned")
		e.removeRelation(now, r, "removed")
	}
	a.fail(now, call, wire.ErrorReply_CODE_REFUSED, fmt.Sprintf("%s did not take %s as an inferior: %s", text.ShortPeer(call.peer), e.name(), why))
}

// leaveOthers leaves every superior but keep (reparent).
func (a *admins) leaveOthers(now time.Time, keep *relations.Relation, call *adminCall) {
	e := a.e
	for _, r := range slices.Clone(e.relations().Superiors()) {
		if r.Peer != keep.Peer {
			a.leaveSuperior(now, r, fmt.Sprintf("reparented to %s by admin %s", keep.DisplayName(), text.ShortPeer(call.author)))
		}
	}
}

// leaveSuperior ends a superior relation on purpose: goodbye, close,
// forget, no failover.
func (a *admins) leaveSuperior(now time.Time, r *relations.Relation, reason string) {
	e := a.e
	if r.State.Live() {
		e.send(r.Peer, &wire.Envelope{Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: reason}}})
	}
	e.closeChan(r.Peer, reason)
	e.removeRelation(now, r, "removed")
	e.event(now, r.Peer, r.DisplayName(), "superior left: "+reason)
	e.relationsChanged()
	e.pushChain(now)
}

func (a *admins) removeSuperior(now time.Time, call *adminCall, key string) {
	e := a.e
	r := findRelation(e.relations(), key)
	if r == nil || r.Role != relations.Superior {
		a.fail(now, call, wire.ErrorReply_CODE_NOT_FOUND, fmt.Sprintf("%s has no superior %q", e.name(), key))
		return
	}
	name := r.DisplayName()
	a.leaveSuperior(now, r, "removed by admin "+text.ShortPeer(call.author))
	out := fmt.Sprintf("%s left its superior %s", e.name(), name)
	if len(e.relations().Superiors()) == 0 {
		out += fmt.Sprintf("; %s has no superior now: it is a root", e.name())
	}
	a.ok(now, call, out)
}

func (a *admins) removeInferior(now time.Time, call *adminCall, key string) {
	e := a.e
	r := findRelation(e.relations(), key)
	if r == nil || r.Role != relations.Inferior {
		a.fail(now, call, wire.ErrorReply_CODE_NOT_FOUND, fmt.Sprintf("%s has no inferior %q", e.name(), key))
		return
	}
	name := r.DisplayName()
	reason := "removed by admin " + text.ShortPeer(call.author)
	if r.State.Live() {
		e.send(r.Peer, &wire.Envelope{Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: reason, Removed: true}}})
	}
	e.closeChan(r.Peer, reason)
	e.removeRelation(now, r, "removed")
	e.event(now, r.Peer, name, "inferior "+reason)
	a.ok(now, call, fmt.Sprintf("%s is no longer an inferior of %s; it looks for a new superior among %s's ancestors", name, e.name(), e.name()))
}

// adminAddInferior asks the manager at addr to take us as a superior:
// we open a channel and send an Invite; it agrees (if the author is one of
// its admins and no cycle results) and dials us back with a Hello.
func (a *admins) addInferior(now time.Time, call *adminCall, addr string) {
	e := a.e
	pa, err := peeraddr.ParsePeerMaddr(addr)
	if err != nil {
		a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, err.Error())
		return
	}
	if pa.Peer == e.me() {
		a.fail(now, call, wire.ErrorReply_CODE_REFUSED, fmt.Sprintf("refused: %s cannot be its own inferior", e.name()))
		return
	}
	if r := e.relations().Get(pa.Peer); r != nil {
		if r.Role == relations.Inferior && r.State.Live() {
			a.ok(now, call, fmt.Sprintf("%s is already an inferior of %s", r.DisplayName(), e.name()))
			return
		}
		if r.Role == relations.Superior {
			a.fail(now, call, wire.ErrorReply_CODE_REFUSED, fmt.Sprintf("refused: %s is a superior of %s; taking it as an inferior would close a cycle", r.DisplayName(), e.name()))
			return
		}
	}
	if e.relations().IsAncestor(pa.Peer) {
		a.fail(now, call, wire.ErrorReply_CODE_REFUSED, fmt.Sprintf("refused: %s is an ancestor of %s; taking it as an inferior would close a cycle", text.ShortPeer(pa.Peer), e.name()))
		return
	}
	call.invite = true
	if !a.wait(now, call, pa.Peer) {
		return
	}
	if a.invites == nil {
		a.invites = make(map[string]*adminCall)
	}
	a.invites[pa.Peer] = call
	e.dial(pa.Peer, pa.Addrs)
}

// inviteConnected sends the Invite on a channel we opened for it.
func (a *admins) inviteConnected(peer string) bool {
	e := a.e
	call := a.invites[peer]
	if call == nil {
		return false
	}
	e.send(peer, &wire.Envelope{Body: &wire.Envelope_Invite{Invite: &wire.Invite{
		Name: e.name(), Addrs: e.listenAddrs(), Ancestors: ancestorsToPB(e.relations().Ancestors()), Author: call.author,
	}}})
	return true
}

// onInviteReply: the invitee agreed (it will dial us) or refused.
func (a *admins) onInviteReply(now time.Time, peer string, rep *wire.InviteReply) {
	e := a.e
	call := a.invites[peer]
	if call == nil {
		return
	}
	delete(a.invites, peer)
	e.closeChan(peer, "invite answered")
	if !rep.Accepted {
		delete(a.waits, peer)
		a.fail(now, call, wire.ErrorReply_CODE_REFUSED, fmt.Sprintf("%s refused to take %s as a superior: %s", text.ShortPeer(peer), e.name(), rep.Reason))
	}
	// Accepted: the command is answered when its hello arrives.
}

// adminInferiorUp answers an add-inferior once the invitee's hello came.
func (a *admins) inferiorUp(now time.Time, r *relations.Relation) {
	e := a.e
	call := a.waits[r.Peer]
	if call == nil || !call.invite {
		return
	}
	delete(a.waits, r.Peer)
	delete(a.invites, r.Peer)
	e.event(now, r.Peer, r.DisplayName(), "inferior added by admin "+text.ShortPeer(call.author))
	a.ok(now, call, fmt.Sprintf("%s took %s as a superior", r.DisplayName(), e.name()))
}

// onInvite is the invitee's side: agree if the author is one of our admins
// and the inviter is not below us, then dial it as a new superior.
func (a *admins) onInvite(now time.Time, peer string, inv *wire.Invite) {
	e := a.e
	refuse := func(why string) {
		e.send(peer, &wire.Envelope{Body: &wire.Envelope_InviteReply{InviteReply: &wire.InviteReply{Reason: why}}})
		e.closeChan(peer, "invite refused")
		e.event(now, peer, inv.Name, "invitation refused: "+why)
	}
	_, stopping := e.lifecycle()
	switch {
	case stopping:
		refuse(e.name() + " is shutting down")
		return
	case !e.isAdmin(inv.Author):
		refuse(fmt.Sprintf("%s asked on behalf of %s, who is not in %s's admins", inv.Name, text.ShortPeer(inv.Author), e.name()))
		return
	}
	if r := e.relations().Get(peer); r != nil && r.Role == relations.Inferior {
		refuse(fmt.Sprintf("%s is an inferior of %s; taking it as a superior would close a cycle", inv.Name, e.name()))
		return
	}
	for _, a := range ancestorsFromPB(inv.Ancestors) {
		if a.Peer == e.me() {
			refuse(fmt.Sprintf("%s is an ancestor of %s (depth %d); taking it as a superior would close a cycle", e.name(), inv.Name, a.Depth))
			return
		}
	}
	e.send(peer, &wire.Envelope{Body: &wire.Envelope_InviteReply{InviteReply: &wire.InviteReply{Accepted: true}}})
	e.closeChan(peer, "invite accepted")
	if _, err := e.relations().AddSuperior(now, peeraddr.PeerAddrs{Peer: peer, Addrs: inv.Addrs}, false, e.backoff()); err != nil {
		return
	}
	r := e.relations().Get(peer)
	r.Name, r.Origin = inv.Name, relations.FromAdmin
	r.SetNextDial(now)
	e.event(now, peer, inv.Name, "invited by admin "+text.ShortPeer(inv.Author)+": taking it as a superior")
	e.relationsChanged()
	e.dialDue(now)
}

func (a *admins) set(now time.Time, call *adminCall, key, value string) {
	e := a.e
	cfg, old, nw, err := config.Set(e.config(), key, value)
	if err != nil {
		a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, "set: "+err.Error())
		return
	}
	e.setConfig(cfg)
	e.event(now, e.me(), e.name(), fmt.Sprintf("set %s %s (was %s) by admin %s", key, nw, old, text.ShortPeer(call.author)))
	a.ok(now, call, fmt.Sprintf("%s: %s → %s (live now; the properties file is unchanged, so a restart goes back to it)", key, old, nw))
}

// runPlugin hands a command that is not built in to the runtime, which
// looks up gridmgr-cmd-NAME in plugins_dir at call time.
func (a *admins) runPlugin(now time.Time, call *adminCall, cmd admincmd.Command) {
	e := a.e
	unknown := admincmd.Unknown(cmd.Name).Error()
	switch {
	case e.conf().PluginsDir == "":
		a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, unknown)
		return
	case !admincmd.ValidPluginName(cmd.Name):
		a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, unknown)
		return
	case !e.isAdmin(call.author):
		call.mutating = true // audited as refused
		a.fail(now, call, wire.ErrorReply_CODE_FORBIDDEN, fmt.Sprintf(
			"%s: %q is not built in; plugins may be run only by the peers in its admins list (you are %s)", e.name(), cmd.Name, call.author))
		return
	case len(a.plugins) >= maxAdminPending:
		a.fail(now, call, wire.ErrorReply_CODE_OVERLOADED, fmt.Sprintf("%s has %d plugins running", e.name(), len(a.plugins)))
		return
	}
	a.nextPlugin++
	call.plugin = a.nextPlugin
	call.mutating = true
	if a.plugins == nil {
		a.plugins = make(map[uint64]*adminCall)
	}
	a.plugins[call.plugin] = call
	desc, _ := json.Marshal(map[string]any{
		"name": e.name(), "peer": e.me(), "addrs": e.listenAddrs(), "author": call.author, "command": call.command,
		"status": e.status(now), "resources": e.resources(now),
	})
	e.call(CallPlugin, call.plugin, PluginCall{Name: cmd.Name, Args: cmd.Args, Stdin: desc})
}

// ErrPluginNotFound is what the runtime reports (wrapped) as a
// CallPlugin's error when the plugin file does not exist, so the Core can
// answer "unknown command" with a suggestion.
var ErrPluginNotFound = errors.New("node: plugin not found")

// callDone is the end of a CallPlugin: its output and exit code, or an
// error if it could not be run (ErrPluginNotFound: no such file).
func (a *admins) callDone(now time.Time, d CallDone) {
	r, _ := d.Result.(PluginResult)
	a.pluginDone(now, d.ID, r.Output, r.ExitCode, d.Err)
}

func (a *admins) pluginDone(now time.Time, id uint64, output string, exitCode int, err error) {
	e := a.e
	call := a.plugins[id]
	if call == nil {
		return
	}
	delete(a.plugins, id)
	switch {
	case errors.Is(err, ErrPluginNotFound):
		cmd, _ := admincmd.Parse(call.command)
		a.fail(now, call, wire.ErrorReply_CODE_BAD_REQUEST, admincmd.Unknown(cmd.Name).Error()+" (and there is no plugin "+admincmd.PluginPrefix+cmd.Name+" in "+e.conf().PluginsDir+")")
	case err != nil:
		a.fail(now, call, wire.ErrorReply_CODE_UNAVAILABLE, fmt.Sprintf("plugin %s: %v\n%s", call.name, err, output))
	case exitCode != 0:
		a.fail(now, call, wire.ErrorReply_CODE_REFUSED, fmt.Sprintf("%splugin %s exited with status %d", output, call.name, exitCode))
	default:
		a.ok(now, call, output)
	}
}
