package web

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

//go:embed static
var static embed.FS

// Backend is what the UI needs from the manager that serves it. Methods
// are called from HTTP handler goroutines, concurrently.
type Backend interface {
	// Self is the serving manager's name and peer id.
	Self() (name, peer string)
	// Tree is the whole grid, from the root above the serving manager.
	Tree(ctx context.Context) (*wire.TreeNode, error)
	// Status, Resources and Reservations are one manager's (peer id or
	// name; "" is the serving manager).
	Status(ctx context.Context, peer string) (*wire.StatusReply, error)
	Resources(ctx context.Context, peer string) (*wire.ResourcesReply, error)
	Reservations(ctx context.Context, peer string) (*wire.ReservationsReply, error)
	// Apps is every instance in the grid (AppInstance.manager names its
	// host).
	Apps(ctx context.Context) ([]*wire.AppInstance, error)
	// Query runs a query from the serving manager.
	Query(ctx context.Context, req *wire.QueryRequest) (*wire.QueryReply, error)
	// Subscribe gives the live events until ctx ends (the channel closes
	// then).
	Subscribe(ctx context.Context) (<-chan *wire.Event, error)
	// Utilization is the latest utilization sample known of each manager
	// of the grid (heard, or made by asking the manager).
	Utilization(ctx context.Context) ([]*wire.Event, error)
	// Recent is the latest events the serving manager archived, at most
	// limit, oldest first, utilization samples left out; ErrNoArchive (or
	// an error wrapping it) if it keeps no archive.
	Recent(ctx context.Context, limit int) ([]*wire.Event, error)
	// Admin runs an admin command as the serving manager (an admin); the
	// handler has checked the token.
	Admin(ctx context.Context, command string) (*wire.AdminReply, error)
	// Jobs is a manager's job queue (peer id or name; "" is the serving
	// manager): every user's jobs, ended ones too, as its OP_LIST answers
	// them (at most 5000; JobReply.more counts the rest).
	Jobs(ctx context.Context, peer string) (*wire.JobReply, error)
	// JobLog is one job of a manager's queue with its log (OP_LOG).
	JobLog(ctx context.Context, peer, id string) (*wire.JobInfo, error)
	// Dags is a manager's workflows (peer as Jobs): every user's, ended
	// ones too, as its OP_DAG_STATUS answers them.
	Dags(ctx context.Context, peer string) (*wire.JobReply, error)
	// Attributes is, by peer id, the attributes of the managers of the
	// tree that the grid browser marks them by (TreeAttributes: glide-ins'
	// glidein and glidein_owner); a manager with none of them is left out.
	Attributes(ctx context.Context) (map[string]map[string]string, error)
}

// TreeAttributes says which of a manager's attributes the grid browser
// shows (and Backend.Attributes gives): glidein, the name of a glide-in
// (a manager a launcher started on a reserved host, joined under the
// launcher), and glidein_*, what the launcher says of it (its owner).
func TreeAttributes(key string) bool {
	return key == "glidein" || strings.HasPrefix(key, "glidein_")
}

// Options configure Handler.
type Options struct {
	// Token is the admin token (AdminToken); "" makes the UI read-only:
	// every change is refused.
	Token string
	Log   *slog.Logger
	// Hosts is which Host headers requests may give (NewHostCheck); nil
	// is the zero HostCheck: the address each connection arrived at.
	Hosts *HostCheck
	// MaxStreams bounds the live event streams at once; default 64.
	// MaxStreamsPerClient bounds those of one client (one remote IP
	// address; for IPv6, one /64); default 8.
	MaxStreams, MaxStreamsPerClient int
	// StreamWriteTimeout is how long a live stream waits for its client
	// to take a message; one that does not is closed. Default 30 s.
	StreamWriteTimeout time.Duration
	// MaxCalls bounds the requests in progress that ask the grid (tree,
	// manager, apps, utilization, recent, jobs, job, dags, attributes,
	// query, admin), each of which may hold streams to
	// other managers for seconds; default 32. MaxCallsPerClient bounds
	// those of one client; default 8.
	MaxCalls, MaxCallsPerClient int
}

// AdminToken derives the admin token from a secret (the daemon passes its
// identity key's raw bytes): hex of HMAC-SHA256(secret, "gridmgr web
// admin v1").
func AdminToken(secret []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("gridmgr web admin v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// ErrNoArchive is Backend.Recent's error at a manager that keeps no event
// archive.
var ErrNoArchive = errors.New("no event archive")

// maxBody bounds a request body.
const maxBody = 64 << 10

type handler struct {
	b       Backend
	opts    Options
	log     *slog.Logger
	files   http.Handler
	streams *limiter // live event streams
	calls   *limiter // requests in progress that ask the grid
}

// Handler serves the UI and its JSON API over b.
func Handler(b Backend, opts Options) http.Handler {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Hosts == nil {
		opts.Hosts = &HostCheck{}
	}
	for _, d := range []struct {
		n   *int
		def int
	}{{&opts.MaxStreams, 64}, {&opts.MaxStreamsPerClient, 8}, {&opts.MaxCalls, 32}, {&opts.MaxCallsPerClient, 8}} {
		if *d.n <= 0 {
			*d.n = d.def
		}
	}
	if opts.StreamWriteTimeout <= 0 {
		opts.StreamWriteTimeout = 30 * time.Second
	}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	return &handler{b: b, opts: opts, log: opts.Log, files: http.StripPrefix("/static/", http.FileServerFS(sub)),
		streams: newLimiter(opts.MaxStreams, opts.MaxStreamsPerClient),
		calls:   newLimiter(opts.MaxCalls, opts.MaxCallsPerClient)}
}

// apiError is an error the client caused or may show, with its status.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func fail(status int, format string, args ...any) error {
	return &apiError{status: status, msg: fmt.Sprintf(format, args...)}
}

type route struct {
	method string // GET (HEAD too) or POST
	fn     func(h *handler, w http.ResponseWriter, r *http.Request) error
	// grid: the route asks the grid and may wait on it for seconds; it
	// counts against MaxCalls and MaxCallsPerClient.
	grid bool
}

var routes = map[string]route{
	"/":                {"GET", (*handler).index, false},
	"/api/self":        {"GET", (*handler).self, false},
	"/api/tree":        {"GET", (*handler).tree, true},
	"/api/manager":     {"GET", (*handler).manager, true},
	"/api/apps":        {"GET", (*handler).apps, true},
	"/api/utilization": {"GET", (*handler).utilization, true},
	"/api/recent":      {"GET", (*handler).recent, true},
	"/api/events":      {"GET", (*handler).events, false}, // counted as a stream
	"/api/query":       {"POST", (*handler).query, true},
	"/api/admin":       {"POST", (*handler).admin, true},
	"/api/jobs":        {"GET", (*handler).jobs, true},
	"/api/job":         {"GET", (*handler).job, true},
	"/api/dags":        {"GET", (*handler).dags, true},
	"/api/attributes":  {"GET", (*handler).attributes, true},
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			h.log.Error("web UI handler panicked", "path", r.URL.Path, "panic", fmt.Sprint(v))
			writeJSONError(w, http.StatusInternalServerError, "internal error; the manager logged it")
		}
	}()
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	if err := h.opts.Hosts.Check(r); err != nil {
		writeJSONError(w, http.StatusMisdirectedRequest, err.Error())
		return
	}
	path := r.URL.Path
	if strings.HasPrefix(path, "/static/") {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, "GET, HEAD")
			return
		}
		// The embedded files have plain ASCII names: a name that is not
		// valid UTF-8 cannot be one of them (and the file system would
		// call it invalid, which the file server reports as a 500).
		if !utf8.ValidString(path) {
			writeJSONError(w, http.StatusNotFound, "no such file here")
			return
		}
		h.files.ServeHTTP(w, r)
		return
	}
	rt, ok := routes[path]
	if !ok {
		writeJSONError(w, http.StatusNotFound, fmt.Sprintf("no page %q here; the UI is at /", text.Clip(path, maxQuoted)))
		return
	}
	switch {
	case rt.method == "GET" && r.Method != http.MethodGet && r.Method != http.MethodHead:
		methodNotAllowed(w, "GET, HEAD")
		return
	case rt.method == "POST" && r.Method != http.MethodPost:
		methodNotAllowed(w, "POST")
		return
	}
	if r.Method == http.MethodPost {
		if err := sameOrigin(r); err != nil {
			writeJSONError(w, http.StatusForbidden, err.Error())
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	}
	if rt.grid {
		client := clientOf(r)
		switch h.calls.take(client) {
		case errClient:
			w.Header().Set("Retry-After", "1")
			writeJSONError(w, http.StatusTooManyRequests, fmt.Sprintf(
				"this client (%s) already has %d requests to the grid in progress, the most one client may have at once (the per-client limit); "+
					"try again when they are answered", client, h.opts.MaxCallsPerClient))
			return
		case errTotal:
			w.Header().Set("Retry-After", "1")
			writeJSONError(w, http.StatusServiceUnavailable, fmt.Sprintf(
				"the manager is answering %d requests to the grid at once, its limit; try again in a moment", h.opts.MaxCalls))
			return
		}
		defer h.calls.release(client)
	}
	if err := rt.fn(h, w, r); err != nil {
		var ae *apiError
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &ae):
			writeJSONError(w, ae.status, ae.msg)
		case errors.As(err, &mbe):
			writeJSONError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d KiB", maxBody>>10))
		case errors.Is(err, context.DeadlineExceeded):
			writeJSONError(w, http.StatusGatewayTimeout, "the grid did not answer in time")
		default:
			writeJSONError(w, http.StatusBadGateway, err.Error())
		}
	}
}

// sameOrigin refuses cross-site requests: a browser says where a request
// comes from in Sec-Fetch-Site and Origin.
func sameOrigin(r *http.Request) error {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return errors.New("cross-site request refused")
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return errors.New("cross-origin request refused")
		}
	}
	return nil
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeJSONError(w, http.StatusMethodNotAllowed, "method not allowed here; use "+allow)
}

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// maxQuoted bounds a string from a request quoted in a message.
const maxQuoted = 80

var pj = protojson.MarshalOptions{UseProtoNames: true}

// writeJSON writes v, where proto messages (alone, in slices, or as
// values of a map) are in protojson.
func writeJSON(w http.ResponseWriter, v any) error {
	b, err := marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, err = w.Write(b)
	return err
}

func marshal(v any) ([]byte, error) {
	switch x := v.(type) {
	case proto.Message:
		return pj.Marshal(x)
	case map[string]any:
		out := map[string]json.RawMessage{}
		for k, e := range x {
			b, err := marshal(e)
			if err != nil {
				return nil, err
			}
			out[k] = b
		}
		return json.Marshal(out)
	case []*wire.Event:
		return marshalList(x)
	case []*wire.AppInstance:
		return marshalList(x)
	case []*wire.JobInfo:
		return marshalList(x)
	case []*wire.DagInfo:
		return marshalList(x)
	}
	return json.Marshal(v)
}

func marshalList[T proto.Message](xs []T) ([]byte, error) {
	parts := make([]json.RawMessage, len(xs))
	for i, x := range xs {
		b, err := pj.Marshal(x)
		if err != nil {
			return nil, err
		}
		parts[i] = b
	}
	return json.Marshal(parts)
}

func (h *handler) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 8*time.Second)
}

func (h *handler) index(w http.ResponseWriter, r *http.Request) error {
	b, err := static.ReadFile("static/index.html")
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, err = w.Write(b)
	return err
}

// self names the serving manager, and says whether the request carries
// the admin token (admin) and whether this UI takes changes at all
// (admin_enabled: it has a token).
func (h *handler) self(w http.ResponseWriter, r *http.Request) error {
	name, peer := h.b.Self()
	return writeJSON(w, map[string]any{"name": name, "peer": peer, "admin": h.authorized(r), "admin_enabled": h.opts.Token != ""})
}

// authorized: r carries the admin token in an Authorization: Bearer
// header (compared in constant time); never without a token set.
func (h *handler) authorized(r *http.Request) bool {
	if h.opts.Token == "" {
		return false
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(h.opts.Token)) == 1
}

func (h *handler) tree(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := h.ctx(r)
	defer cancel()
	t, err := h.b.Tree(ctx)
	if err != nil {
		return err
	}
	return writeJSON(w, t)
}

// peerParam is the request's peer= (a manager's peer id or name; ""
// the serving manager).
func peerParam(r *http.Request) (string, error) {
	peer := r.URL.Query().Get("peer")
	if len(peer) > 128 {
		return "", fail(http.StatusBadRequest, "peer: too long")
	}
	return peer, nil
}

// remoteErr is an error a manager answered, as the API gives it: its
// message with the status it means.
func remoteErr(err error) error {
	var re *client.RemoteError
	if !errors.As(err, &re) {
		return err
	}
	switch re.Code {
	case wire.ErrorReply_CODE_BAD_REQUEST:
		return fail(http.StatusBadRequest, "%s", re.Message)
	case wire.ErrorReply_CODE_NOT_FOUND:
		return fail(http.StatusNotFound, "%s", re.Message)
	case wire.ErrorReply_CODE_UNSUPPORTED:
		return fail(http.StatusNotImplemented, "%s", re.Message)
	case wire.ErrorReply_CODE_UNAVAILABLE:
		return fail(http.StatusServiceUnavailable, "%s", re.Message)
	}
	return err
}

// jobs is a manager's job queue (peer=; default the serving manager):
// {"manager": its name as asked, "jobs": [JobInfo…], "more": N}.
func (h *handler) jobs(w http.ResponseWriter, r *http.Request) error {
	peer, err := peerParam(r)
	if err != nil {
		return err
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	rep, err := h.b.Jobs(ctx, peer)
	if err != nil {
		return remoteErr(err)
	}
	if rep.Jobs == nil {
		rep.Jobs = []*wire.JobInfo{}
	}
	return writeJSON(w, map[string]any{"jobs": rep.Jobs, "more": rep.More})
}

// dags is a manager's workflows (peer=; default the serving manager):
// {"dags": [DagInfo…]}, every user's, ended ones too.
func (h *handler) dags(w http.ResponseWriter, r *http.Request) error {
	peer, err := peerParam(r)
	if err != nil {
		return err
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	rep, err := h.b.Dags(ctx, peer)
	if err != nil {
		return remoteErr(err)
	}
	list := rep.GetDags()
	if list == nil {
		list = []*wire.DagInfo{}
	}
	return writeJSON(w, map[string]any{"dags": list})
}

// attributes is {"attributes": {PEER: {KEY: VALUE}}}: the attributes the
// grid browser marks managers by (TreeAttributes), of each manager of the
// tree that has any.
func (h *handler) attributes(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := h.ctx(r)
	defer cancel()
	m, err := h.b.Attributes(ctx)
	if err != nil {
		return err
	}
	out := make(map[string]map[string]string, len(m))
	for p, as := range m {
		for k, v := range as {
			if !TreeAttributes(k) {
				continue
			}
			if out[p] == nil {
				out[p] = map[string]string{}
			}
			out[p][k] = v
		}
	}
	return writeJSON(w, map[string]any{"attributes": out})
}

// maxJobID bounds id= (a job id is a manager's name, a number and an
// index: far shorter).
const maxJobID = 200

// job is one job of a manager's queue with its log (peer=, id=).
func (h *handler) job(w http.ResponseWriter, r *http.Request) error {
	peer, err := peerParam(r)
	if err != nil {
		return err
	}
	id := r.URL.Query().Get("id")
	if id == "" || len(id) > maxJobID {
		return fail(http.StatusBadRequest, "id: name one job, CLUSTER or CLUSTER[INDEX] (e.g. gm152.17[3])")
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	in, err := h.b.JobLog(ctx, peer, id)
	if err != nil {
		return remoteErr(err)
	}
	return writeJSON(w, in)
}

// manager is one manager's details: status, resources and reservations,
// each part with its own error if it could not be read.
func (h *handler) manager(w http.ResponseWriter, r *http.Request) error {
	peer, err := peerParam(r)
	if err != nil {
		return err
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	out := map[string]any{}
	part := func(name string, m proto.Message, err error) {
		if err != nil {
			out[name+"_error"] = err.Error()
			return
		}
		out[name] = m
	}
	st, err := h.b.Status(ctx, peer)
	part("status", st, err)
	if err != nil {
		return writeJSON(w, out) // unreachable: the rest would fail the same way
	}
	res, err := h.b.Resources(ctx, peer)
	part("resources", res, err)
	rv, err := h.b.Reservations(ctx, peer)
	part("reservations", rv, err)
	return writeJSON(w, out)
}

func (h *handler) apps(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := h.ctx(r)
	defer cancel()
	list, err := h.b.Apps(ctx)
	if err != nil {
		return err
	}
	if list == nil {
		list = []*wire.AppInstance{}
	}
	return writeJSON(w, map[string]any{"instances": list})
}

func (h *handler) utilization(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := h.ctx(r)
	defer cancel()
	list, err := h.b.Utilization(ctx)
	if err != nil {
		return err
	}
	if list == nil {
		list = []*wire.Event{}
	}
	return writeJSON(w, map[string]any{"samples": list})
}

// recent is the latest events of the serving manager's archive (limit,
// default 200, at most 1000), oldest first: {"archived": true, "events":
// [...]}; at a manager without one, {"archived": false, "reason": why
// and how to keep them}.
func (h *handler) recent(w http.ResponseWriter, r *http.Request) error {
	limit := 200
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > 1000 {
			return fail(http.StatusBadRequest, "limit: a number of events from 1 to 1000")
		}
		limit = n
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	evs, err := h.b.Recent(ctx, limit)
	if errors.Is(err, ErrNoArchive) {
		name, _ := h.b.Self()
		return writeJSON(w, map[string]any{"archived": false, "reason": fmt.Sprintf(
			"%s keeps no event archive, so there are no past events to show: events appear here as they happen. "+
				"To keep them, set [archive] enabled = true in %s's properties file and restart it "+
				"(gridmgr events -d DATA_DIR reads them too; docs/monitoring.md, The archive).", name, name)})
	}
	if err != nil {
		return err
	}
	if evs == nil {
		evs = []*wire.Event{}
	}
	return writeJSON(w, map[string]any{"archived": true, "events": evs})
}

// readBody decodes a JSON body into v, rejecting unknown fields.
func readBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return fail(http.StatusBadRequest, "the body is not the JSON expected: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fail(http.StatusBadRequest, "the body has more than one JSON value")
	}
	return nil
}

func (h *handler) query(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		Requirement string `json:"requirement"`
		Rank        string `json:"rank"`
		Limit       uint32 `json:"limit"`
	}
	if err := readBody(r, &q); err != nil {
		return err
	}
	if strings.TrimSpace(q.Requirement) == "" {
		return fail(http.StatusBadRequest, "requirement: write a CEL expression, e.g. cpus_free >= 4")
	}
	if q.Limit == 0 || q.Limit > 1000 {
		q.Limit = 20
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	rep, err := h.b.Query(ctx, &wire.QueryRequest{Requirement: q.Requirement, Rank: q.Rank, Limit: q.Limit, Want: q.Limit,
		Up: 64, Down: 64, Trace: true, BudgetMs: 5000})
	if err != nil {
		var re *client.RemoteError
		if errors.As(err, &re) && re.Code == wire.ErrorReply_CODE_BAD_REQUEST {
			return fail(http.StatusBadRequest, "%s", re.Message)
		}
		return err
	}
	return writeJSON(w, rep)
}

func (h *handler) admin(w http.ResponseWriter, r *http.Request) error {
	if h.opts.Token == "" {
		return fail(http.StatusForbidden, "read-only: this manager's web UI has no admin token")
	}
	if !h.authorized(r) {
		return fail(http.StatusForbidden, "admin token required: paste the one `gridmgr web-token -d DATA_DIR` prints")
	}
	var q struct {
		Command string `json:"command"`
	}
	if err := readBody(r, &q); err != nil {
		return err
	}
	if strings.TrimSpace(q.Command) == "" || len(q.Command) > 4096 {
		return fail(http.StatusBadRequest, "command: give an admin command string, e.g. status (help lists them)")
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	rep, err := h.b.Admin(ctx, q.Command)
	if err != nil {
		return err
	}
	return writeJSON(w, rep)
}

// events streams live events as Server-Sent Events, one protojson event
// per message, with a comment every 15 s to keep proxies from closing it.
// A client that does not take a message within StreamWriteTimeout is
// dropped, so that it cannot keep its slot by not reading.
func (h *handler) events(w http.ResponseWriter, r *http.Request) error {
	client := clientOf(r)
	switch h.streams.take(client) {
	case errClient:
		return fail(http.StatusTooManyRequests, "this client (%s) already has %d live event streams open, the most one client may have "+
			"(the per-client limit); close another tab or window of this UI and reload", client, h.opts.MaxStreamsPerClient)
	case errTotal:
		return fail(http.StatusServiceUnavailable, "too many live event streams (%d, the manager's limit); try again later", h.opts.MaxStreams)
	}
	defer h.streams.release(client)
	if _, ok := w.(http.Flusher); !ok {
		return errors.New("streaming is not supported by this connection")
	}
	rc := http.NewResponseController(w)
	// The server sets no write deadline of its own: leave none behind for
	// the connection's next request.
	defer rc.SetWriteDeadline(time.Time{})
	// send writes and flushes within the write timeout; false: the client
	// is gone or does not read.
	send := func(format string, args ...any) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(h.opts.StreamWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ch, err := h.b.Subscribe(ctx)
	if err != nil {
		return err
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if !send(": gridmgr events\n\n") {
		return nil
	}
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ping.C:
			if !send(": ping\n\n") {
				return nil
			}
		case ev, ok := <-ch:
			if !ok {
				return nil
			}
			b, err := pj.Marshal(ev)
			if err != nil {
				continue
			}
			if !send("data: %s\n\n", b) {
				return nil
			}
		}
	}
}
