package node

import (
	"fmt"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/internal/keys"
	"github.com/gridmgr/gridmgr/internal/lazyre"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// Grant is what a reservation gives the applications installed on it:
// their limits and how long they may run.
type Grant struct {
	Reservation string
	Holder      string // the holder's peer id
	CPUs        int64  // cpus reserved (0: none)
	Mem         int64  // bytes of memory reserved (0: none)
	// Disk is bytes of disk each instance may hold, from the tokens of
	// kind "disk" reserved (counted in MiB); 0: none reserved (the
	// manager's apps.max_instance_bytes then).
	Disk int64
	End  time.Time
}

// DiskToken is the token kind a reservation holds disk with, in MiB
// (declared as [tokens] disk = N by a manager that lets users reserve
// disk for their applications).
const DiskToken = "disk"

// AppCall is the request of a CallApp: act on applications, and (for a
// Call with an ID) report a *wire.AppReply. The Core has checked the
// asker: Req comes from the holder of Grant's reservation or an admin
// (LIST and STATUS from anyone).
//
// Two calls come without a request: Ended names reservations that ended
// (released, expired): the runtime stops and removes their instances;
// with an ID (a release, whose answer waits for it) it reports what it
// removed, a []*wire.AppRemoval (maybe empty, never nil). Live, sent once
// when the Core starts,
// names every reservation live then: the runtime removes instances of any
// other (they ended while the manager was down), so nothing stays
// orphaned.
type AppCall struct {
	Req    *wire.AppRequest
	Client string // the asker's peer id
	Admin  bool
	Grant  Grant
	Ended  []string
	Live   []string
	// Reconcile marks the call that carries Live (Live may be empty).
	Reconcile bool
}

// ErrNoApps is what a runtime without applications reports.
const noAppsMsg = "this manager does not run applications"

// apps is the module of application requests: it checks who asks against
// the reservation the instance belongs to, and hands the work to the
// runtime (a CallApp), which answers through callDone.
type apps struct {
	e       appsEnv
	calls   map[uint64]origin
	next    uint64
	started bool
	// ending are the releases whose answer waits for the runtime to
	// remove the reservation's instances, by call.
	ending map[uint64]*ending
}

// ending is a release waiting for the runtime (at most until due).
type ending struct {
	o     origin
	r     reservation.Reservation
	known []*wire.AppRemoval // the instances here, as the runtime last reported them
	due   time.Time
}

// releaseWait bounds how long the answer to a release waits for the
// runtime to stop and remove the reservation's instances, well within a
// client's usual 5 s; past it the answer says which are still being
// removed.
const releaseWait = 3 * time.Second

// appsEnv is what the applications module sees of the Core besides env:
// who is an admin, and the reservations the instances belong to, as the
// reservations module keeps them.
type appsEnv interface {
	env
	isAdmin(peer string) bool
	// reservation is reservation id as it stands at now (a lease past
	// its time has lapsed: it gives no rights).
	reservation(now time.Time, id string) (reservation.Reservation, bool)
	// liveReservations are the ids of the reservations live now, sorted.
	liveReservations() []string
	// reservationPB is r as a client sees it.
	reservationPB(r *reservation.Reservation) *wire.Reservation
	// instances are the instances here as the runtime last reported them
	// (the monitor keeps them), by instance name.
	instances() map[string]appSeen
}

func newApps(e appsEnv) *apps {
	return &apps{e: e} // maps made at their first entry
}

// instanceRE is RESERVATION.APP: the reservation number, then the
// application's name.
var appNameRE = lazyre.New(`^[a-z][a-z0-9-]{0,62}$`)

// SplitInstance splits an instance name RESERVATION.APP.
func SplitInstance(id string) (res, app string, err error) {
	i := strings.LastIndexByte(id, '.')
	if i <= 0 {
		return "", "", fmt.Errorf("%q is not an instance name: write RESERVATION.APP, e.g. gm160-7-abcdef.hello", id)
	}
	res, app = id[:i], id[i+1:]
	if _, _, _, err := reservation.ParseID(res); err != nil {
		return "", "", fmt.Errorf("%q is not an instance name: %v", id, err)
	}
	if !appNameRE.MatchString(app) {
		return "", "", fmt.Errorf("%q is not an instance name: %q is not an application name (lower-case letters, digits, '-')", id, app)
	}
	return res, app, nil
}

func (m *apps) handle(now time.Time, o origin, env *wire.Envelope) (bool, error) {
	req := env.GetAppRequest()
	if req == nil || o.peer != "" {
		return false, nil
	}
	m.onRequest(now, o, req)
	return true, nil
}

// tick answers the releases that waited releaseWait for the runtime.
func (m *apps) tick(now time.Time) {
	for _, id := range keys.Sorted(m.ending) {
		if !now.Before(m.ending[id].due) {
			m.endDone(id, nil, false)
		}
	}
}

func (m *apps) deadline(time.Time) time.Time {
	var next time.Time
	for _, e := range m.ending {
		if next.IsZero() || e.due.Before(next) {
			next = e.due
		}
	}
	return next
}

func (m *apps) relationEnded(time.Time, *relations.Relation, string) {}

func (m *apps) onRequest(now time.Time, o origin, req *wire.AppRequest) {
	e, cfg := m.e, m.e.conf()
	bad := func(format string, args ...any) {
		e.replyErr(o, wire.ErrorReply_CODE_BAD_REQUEST, e.name()+": "+fmt.Sprintf(format, args...))
	}
	admin := e.isAdmin(o.client)
	call := AppCall{Req: req, Client: o.client, Admin: admin}
	resID := req.Reservation
	switch req.Op {
	case wire.AppRequest_OP_LIST:
		m.run(o, call)
		return
	case wire.AppRequest_OP_INSTALL, wire.AppRequest_OP_UPLOAD:
		if resID == "" {
			bad("name the reservation to install on")
			return
		}
		if req.Op == wire.AppRequest_OP_INSTALL && !validSHA256(req.BundleSha256) {
			bad("bundle_sha256 %q is not a sha256 (64 hex digits)", req.BundleSha256)
			return
		}
	case wire.AppRequest_OP_UNSPECIFIED:
		bad("the application request names no operation")
		return
	default:
		if _, ok := wire.AppRequest_Op_name[int32(req.Op)]; !ok {
			e.replyErr(o, wire.ErrorReply_CODE_UNSUPPORTED, fmt.Sprintf("%s (gridmgr %s) does not know application operation %d", e.name(), cfg.Version, req.Op))
			return
		}
		r, _, err := SplitInstance(req.Instance)
		if err != nil {
			bad("%v", err)
			return
		}
		resID = r
	}
	r, ok := e.reservation(now, resID)
	if !ok {
		if _, _, _, err := reservation.ParseID(resID); err != nil {
			bad("%v", err)
			return
		}
		if req.Op == wire.AppRequest_OP_STATUS || req.Op == wire.AppRequest_OP_REMOVE {
			// What a forgotten reservation left is still shown and removable
			// (by an admin); the runtime knows whether there is anything.
			if req.Op == wire.AppRequest_OP_STATUS || admin {
				m.run(o, call)
				return
			}
		}
		e.replyErr(o, wire.ErrorReply_CODE_NOT_FOUND, fmt.Sprintf("%s: no reservation %s here", e.name(), resID))
		return
	}
	call.Grant = Grant{Reservation: r.ID, Holder: r.Holder.Peer, CPUs: r.Amount(reservation.CPUs), Mem: r.Amount(reservation.Mem),
		Disk: r.Amount(DiskToken) << 20, End: r.Expires}
	if req.Op == wire.AppRequest_OP_STATUS {
		m.run(o, call)
		return
	}
	if r.Holder.Peer != o.client && !admin {
		e.replyErr(o, wire.ErrorReply_CODE_FORBIDDEN, fmt.Sprintf("%s: reservation %s is held by %s; only its holder or an admin may act on its applications", e.name(), r.ID, r.Holder.String()))
		return
	}
	if !r.State.Live() {
		if req.Op == wire.AppRequest_OP_REMOVE {
			m.run(o, call) // removed already at the end; says so
			return
		}
		e.replyErr(o, wire.ErrorReply_CODE_GONE, fmt.Sprintf("%s: reservation %s is %s (%s); its applications were removed", e.name(), r.ID, r.State, r.Reason))
		return
	}
	needsLease := req.Op == wire.AppRequest_OP_INSTALL || req.Op == wire.AppRequest_OP_START || req.Op == wire.AppRequest_OP_RESUME ||
		req.Op == wire.AppRequest_OP_EXEC || req.Op == wire.AppRequest_OP_PUT
	if needsLease && r.State != reservation.Committed {
		e.replyErr(o, wire.ErrorReply_CODE_CONFLICT, fmt.Sprintf("%s: reservation %s is only held; commit it first (gridmgr commit %s)", e.name(), r.ID, r.ID))
		return
	}
	if needsLease && !r.ActiveAt(now) {
		e.replyErr(o, wire.ErrorReply_CODE_CONFLICT, fmt.Sprintf("%s: reservation %s is for %s–%s: applications may be installed and run only within its window (it begins in %v)",
			e.name(), r.ID, text.MessageTime(r.Start), text.MessageTime(r.End), text.FormatDuration(r.Start.Sub(now).Round(time.Second))))
		return
	}
	if req.Op == wire.AppRequest_OP_UPLOAD {
		e.reply(o, &wire.Envelope{Body: &wire.Envelope_AppReply{AppReply: &wire.AppReply{Message: "upload allowed"}}})
		return
	}
	m.run(o, call)
}

func validSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// run hands call to the runtime; the answer comes back through callDone.
func (m *apps) run(o origin, call AppCall) {
	m.next++
	if m.calls == nil {
		m.calls = make(map[uint64]origin)
	}
	m.calls[m.next] = o
	m.e.call(CallApp, m.next, call)
}

// callDone is the end of a CallApp: what the runtime removed for an
// Ended call, or the reply, or an error (an *AppError gives the code;
// any other error is UNAVAILABLE).
func (m *apps) callDone(now time.Time, d CallDone) {
	if removed, ok := d.Result.([]*wire.AppRemoval); ok && removed != nil {
		m.endDone(d.ID, removed, true)
		return
	}
	if m.endDone(d.ID, nil, false) {
		return // an Ended call the runtime did not report on (none, or it failed)
	}
	o, ok := runtimeDone(m.e, m.calls, d.ID, d.Err)
	if !ok {
		return
	}
	rep, _ := d.Result.(*wire.AppReply)
	if rep == nil {
		rep = &wire.AppReply{}
	}
	m.e.reply(o, &wire.Envelope{Body: &wire.Envelope_AppReply{AppReply: rep}})
}

// SetApps tells the Core the application instances here, by application
// (queries see them as apps).
func (c *Core) SetApps(now time.Time, counts map[string]query.AppCount) {
	c.dl.ok = false // see NextDeadline
	c.now = now
	c.appsHere(now, counts)
}

// appsHere tells what queries see of the applications here (monitorEnv).
func (c *Core) appsHere(_ time.Time, counts map[string]query.AppCount) {
	c.res.appCounts = counts
	c.res.vals.Apps = counts
}

// AppError is an application runtime's refusal, with its code.
type AppError struct {
	Code wire.ErrorReply_Code
	Msg  string
}

func (e *AppError) Error() string { return e.Msg }

// AppErrorf makes an *AppError.
func AppErrorf(code wire.ErrorReply_Code, format string, args ...any) error {
	return &AppError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// released has the runtime remove what reservation r, just released,
// ran here, and answers o once it did (AppsRemoved), or after
// releaseWait with what is still being removed.
func (m *apps) released(now time.Time, o origin, r reservation.Reservation) {
	m.next++
	if m.ending == nil {
		m.ending = make(map[uint64]*ending)
	}
	m.ending[m.next] = &ending{o: o, r: r, known: m.instancesOf(r.ID), due: now.Add(releaseWait)}
	m.e.call(CallApp, m.next, AppCall{Ended: []string{r.ID}})
}

// instancesOf are the instances of reservation res here, as the runtime
// last reported them.
func (m *apps) instancesOf(res string) []*wire.AppRemoval {
	var out []*wire.AppRemoval
	seen := m.e.instances()
	for _, id := range keys.Sorted(seen) {
		if r, _, err := SplitInstance(id); err == nil && r == res {
			out = append(out, &wire.AppRemoval{Id: id, App: seen[id].app, State: seen[id].state})
		}
	}
	return out
}

// endDone answers the release that call id waits for, if it does: with
// what the runtime removed when it reported (reported), else with the
// instances known here, each removed if the runtime's reports no longer
// show it, else still being removed.
func (m *apps) endDone(id uint64, removed []*wire.AppRemoval, reported bool) bool {
	e, ok := m.ending[id]
	if !ok {
		return false
	}
	delete(m.ending, id)
	if !reported {
		removed = e.known
		for _, rm := range removed {
			_, still := m.e.instances()[rm.Id]
			rm.Removed = !still
		}
	}
	pb := m.e.reservationPB(&e.r)
	pb.AppsRemoved = removed
	m.e.reply(e.o, &wire.Envelope{Body: &wire.Envelope_ReservationReply{ReservationReply: &wire.ReservationReply{Reservation: pb}}})
	return true
}

// reservationsEnded tells the runtime to remove what ended reservations
// ran.
func (m *apps) reservationsEnded(rs []reservation.Reservation) {
	var ids []string
	for _, r := range rs {
		if r.State == reservation.Committed || !r.State.Live() {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) > 0 {
		m.e.call(CallApp, 0, AppCall{Ended: ids})
	}
}

// reconcile, once at start, names the reservations live now.
func (m *apps) reconcile() {
	if m.started {
		return
	}
	m.started = true
	live := m.e.liveReservations()
	m.e.call(CallApp, 0, AppCall{Live: live, Reconcile: true})
}

// validateAppRequest bounds an application request's fields.
func validateAppRequest(r *wire.AppRequest) error {
	if err := checkText("app_request.instance", r.Instance, reservation.MaxIDLen+64); err != nil {
		return err
	}
	if err := checkText("app_request.reservation", r.Reservation, reservation.MaxIDLen); err != nil {
		return err
	}
	if err := checkText("app_request.bundle_sha256", r.BundleSha256, 64); err != nil {
		return err
	}
	if err := checkText("app_request.operation", r.Operation, maxNameLen); err != nil {
		return err
	}
	if len(r.Args) > 256 {
		return fmt.Errorf("%w: app_request.args has %d words, limit 256", ErrBadMessage, len(r.Args))
	}
	for i, a := range r.Args {
		if err := checkText(fmt.Sprintf("app_request.args[%d]", i), a, 4096); err != nil {
			return err
		}
	}
	if len(r.Env) > 64 {
		return fmt.Errorf("%w: app_request.env has %d variables, limit 64", ErrBadMessage, len(r.Env))
	}
	for k, v := range r.Env {
		if err := checkText("app_request.env name", k, 128); err != nil {
			return err
		}
		if err := checkText("app_request.env."+k, v, 4096); err != nil {
			return err
		}
	}
	if err := checkText("app_request.path", r.Path, 4096); err != nil {
		return err
	}
	if len(r.Data) > maxAppData {
		return fmt.Errorf("%w: app_request.data is %d bytes, limit %d (send larger files in parts)", ErrBadMessage, len(r.Data), maxAppData)
	}
	return nil
}

// maxAppData bounds the data of one put (the frame limit is 4 MiB).
const maxAppData = 3 << 20
