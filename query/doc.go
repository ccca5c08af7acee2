// Package query holds the expression language of resource queries and the
// pure logic of matching, ranking and walking them through the tree of
// managers.
//
// # Expressions
//
// A client's query carries a requirement (which offers it accepts) and a
// rank (how it orders them); each manager's owner may set a policy (which
// requests the manager serves). All three are CEL expressions
// (https://cel.dev), in the manner of Condor's ClassAds:
//
//	requirement  cpus_free >= 4 && mem_free >= 8 * GiB && cpu_util < 0.5
//	rank         mem_free - 2 * GiB * cpus_free
//	policy       request.user in ["alice", "bob"] && cpu_util < 0.3
//
// A requirement or policy must have type bool, a rank int, uint or double
// (an expression of type dyn, such as attrs.weight, is accepted for both
// and checked when it is evaluated).
//
// What the caller must do: compile each expression once, with Compile or,
// for expressions that arrive over the wire, through a Cache owned by one
// goroutine; show the *ExprError (its Error() has the source line and a
// caret) to whoever wrote the expression; then call Match or Score once
// per offer. Programs are immutable and safe for concurrent use; a Cache
// is not. Build a Values per offer and, if it is evaluated by several
// expressions, call its Prepare method once after filling Attrs and
// Tokens; when only the token counts change (after a reservation), call
// SetTokens instead, which converts just them.
//
// # Attributes
//
// Every kind of expression sees the same variables:
//
//	name       CEL type          meaning                                   unit
//	---------  ----------------  ----------------------------------------  -----------
//	name       string            manager name                              -
//	hostname   string            host name of the manager                  -
//	os         string            operating system, as Go's GOOS: "linux"   -
//	arch       string            architecture, as Go's GOARCH: "amd64"     -
//	cpus       int               logical CPUs                              CPUs
//	cpus_free  int               CPUs not reserved                         CPUs
//	cpu_util   double            smoothed CPU utilisation, 0..1            fraction
//	                             (undefined when unknown)
//	mem        int               memory                                    bytes
//	mem_free   int               memory not reserved                       bytes
//	net_mbps   double            link speed (undefined when unknown)       Mbit/s
//	attrs      map(string, dyn)  free-form attributes set by the owner:    -
//	                             string, int, double, bool or lists of
//	                             those: attrs.zone == "eu-1",
//	                             attrs["rack"] > 3, "ssd" in attrs.tags
//	tokens     map(string, int)  free count of each counted token the      tokens
//	                             manager declares for reservation
//	                             ([tokens] in its properties), net of
//	                             what is reserved: tokens.gpus >= 1,
//	                             tokens["licenses.matlab"] >= 2
//
// The free amounts (cpus_free, mem_free, tokens) are what is not reserved
// now; a query that names a window (query_request.begin_unix_ms and
// duration_ms, --begin/--duration) sees the least free over that window
// instead, and an earliest-window search (--earliest) the least free over
// each manager's own earliest window.
//
//	apps       map(string,       the application instances here, by        instances
//	           map(string, int)) application: apps.ticker.instances,
//	                             apps.ticker.running (an application
//	                             with none is missing: "ticker" in apps,
//	                             apps.?ticker.running.orValue(0) > 0)
//	request    gridmgr.Request   who asks and what they would claim        -
//	request.user  string         the asking user (see below)               -
//	request.cpus  int            CPUs to claim                             CPUs
//	request.mem   int            memory to claim                           bytes
//	request.attrs map(string,    the job's own attributes (--attr K=V):    -
//	              string)        strings, so convert: int(request.attrs.disk_mb)
//	                             <= 500; has(request.attrs.kind) first if the
//	                             job may not give it
//	now        timestamp         the manager's time: now.getHours("UTC"),  -
//	                             now.getDayOfWeek("Europe/Paris") (0 is
//	                             Sunday), now > timestamp("2026-11-23T09:00:00Z")
//	go_os      string            Go's name of the system ("linux"); os     -
//	go_arch    string            and arch may be renamed by the owner      -
//	                             (os, arch in the properties file)
//	load1      double            load averages over 1, 5 and 15 minutes    -
//	load5, load15                (undefined when unknown)
//	uptime_s   int               seconds since the host booted             s
//	disk_free  int               free space of the data dir's filesystem   bytes
//	disks      map(string, int)  free space of the filesystems the owner   bytes
//	                             names in [disks]: disks.scratch; a disk
//	                             not read (or not named) is missing
//	idle_s     double            seconds since console or keyboard input   s
//	                             (the newest access to a terminal or input
//	                             device; undefined on hosts with none)
//	owner_rank double            the owner's rank of this request (rank    -
//	                             in the properties file), computed before
//	                             the policy: owner_rank >= 10 ? true :
//	                             load1 < 0.3 (undefined where the owner
//	                             has no rank; Values.OwnerRank)
//	KiB, MiB, GiB, TiB  int      constants 1024, 1024², 1024³, 1024⁴       bytes
//
// request.user is the user the owner recognises: the name its [users]
// table gives the client's peer id (authenticated: a mapped peer cannot
// state another name); for an unmapped peer, the name the client states
// when users.allow_declared is true (the default; not security), else
// "peer:<its peer id>". A query's entry manager sets it for the whole
// walk; a reservation's owner sets it again for its own table.
//
// Variables lists every variable with its type and meaning. The live
// values (Var.Live: cpus, mem, mem_free, cpu_util, net_mbps, load1, load5,
// load15, uptime_s, disk_free, disks, idle_s) are measured on the host
// unless the owner declares them in the properties' [resources].
//
// request is meant for policies but requirements and ranks may read it too
// (a query's own request, when the caller passes one to Match or Score);
// where no Request is given it is undefined. So is owner_rank: the caller
// computes it per request and sets it on a copy of the Values; an owner's
// rank may not read it. Refs lists the offer attributes an expression
// reads, without request.*.
//
// The standard CEL functions and macros are available (size, contains,
// startsWith, endsWith, matches, has, exists, all, map, filter, int,
// double, string, ...). Numbers of different types compare as numbers:
// cpus > 2.5 and cpu_util < 1 are fine. Arithmetic does not mix types:
// write double(cpus) * 0.5 or cpus * 2. Integer overflow is an error.
//
// # Undefined
//
// An expression that fails while evaluating is undefined, as in ClassAds:
// Match reports false and Score reports !ok (the caller ranks such offers
// last). It never fails the whole query. It fails when it reads:
//
//   - cpu_util when the utilisation is unknown (Values.CPUUtil < 0),
//   - net_mbps when the link speed is unknown (Values.NetMbps <= 0),
//   - a key that is not in attrs (attrs.gpu when there is no "gpu"),
//   - a token the manager does not declare (tokens.gpus on a manager
//     without gpus; one that declares them but has none free has
//     tokens.gpus == 0),
//   - request where no Request was given,
//
// or when it divides by zero, overflows, compares values of types that do
// not compare, or exceeds MaxCost. && and || are commutative and absorb an
// undefined side when the other side decides: false && <undefined> is
// false, true || <undefined> is true. Otherwise the undefined value
// propagates, and negation does not rescue it. This holds for an operand
// over the cost limit too: each operand of the &&, || and ! at the top of
// a requirement or policy has a budget of its own, so E || true is true
// in either order even where E exceeds MaxCost. With cpu_util unknown and
// no attrs.gpu:
//
//	cpu_util < 0.5                     undefined → no match
//	cpu_util < 0.5 || cpus >= 8        true when cpus >= 8
//	cpus >= 64 && cpu_util < 0.5       false when cpus < 64, else undefined
//	attrs.gpu == "a100"                undefined → no match
//	!(attrs.gpu == "a100")             undefined → no match, too
//	attrs.missing || true              true
//	!has(attrs.gpu)                    true: has() tests presence
//	"gpu" in attrs                     false: so does in
//	attrs.?gpu.orValue("none") == "none"  true
//	cpus / 0 > 1                       undefined → no match
//
// To default a missing attribute, test it first: !has(attrs.gpu) ||
// attrs.gpu == "a100"; or give the default with an optional:
// tokens.?gpus.orValue(0) == 0 holds where no gpu is free, whether the
// manager declares gpus or not.
//
// # Limits
//
//   - MaxExprLen: a source longer than 4096 bytes is rejected before
//     parsing.
//   - MaxNesting: parentheses, brackets, calls and operators nest at most
//     128 deep, and a chain of one operator (a + b + c + ...) counts a
//     level per operator; deeper input is a clean compile error, not a
//     stack overflow. Parsing and checking the longest input takes
//     milliseconds.
//   - MaxCost: each evaluation may spend at most 100000 units of CEL's
//     runtime cost (roughly one per operation, more for string and list
//     work); beyond that it is cancelled and is undefined. Expressions
//     whose worst case CEL can bound statically at or below the limit are
//     evaluated without cost tracking, which is faster. In a requirement
//     or policy, each operand of the &&, || and ! at its top has that
//     budget of its own (an operand that exceeds it is undefined, the
//     others still decide), and the operands are evaluated in an order
//     that does not depend on how they are written, cheapest first;
//     once they have spent MaxTotalCost (8 × MaxCost) in all, the rest
//     are undefined. Inside other expressions (a ternary, a
//     comprehension, a rank) one budget covers the whole.
//
// # Explain
//
// "Why is my job idle?" (Condor's condor_q -better-analyze): a query
// with explain set has each manager it reaches that does not offer say
// why. Explain finds the top-level && clause of a requirement or policy
// that is not true on a manager's Values and a Request, as written, with
// the values the clause reads:
//
//	cpus >= 4 && os == "linux"       cpus >= 4 is false: cpus = 2
//	attrs.gpu == "a100" && cpus > 1  attrs.gpu == "a100" is undefined: attrs.gpu = missing
//	request.user in ["bob"]          request.user in ["bob"] is false: request.user = "alice"
//	cpus > 64 || attrs.zone == "us"  the whole: || (or ?:) at the top binds looser than &&
//
// SplitClauses cuts the source on the && at its top (not inside
// parentheses, brackets, braces, strings or comments). Clauses are
// evaluated in the order written; the first false one is reported (false
// decides an &&), else the first undefined one. Failing.OnlyFree marks a
// clause that reads only free amounts (cpus_free, mem_free, tokens): the
// manager may have the resource, but it is reserved; such a clause is
// reported only when no other is false (cpus >= 4 is the lasting reason). Clause and Detail are
// clipped (MaxClauseLen, MaxDetailLen).
//
// What the caller must do: call Explain only where Match was false (it
// re-evaluates each clause) and pass a Cache's Get as its compiler, so
// that each clause is compiled once; merge the verdicts that replies
// bring with MergeVerdicts, which keeps at most MaxVerdicts spread over
// the reasons and counts the rest, so that an answer stays small in a
// grid of a million managers. Walk does both for the verdicts it is
// given (Walk.AddVerdict) and received.
//
// # Event filters
//
// Monitoring events (wire.Event) are filtered by a CEL bool expression
// over one variable, event, a map(string, dyn) that EventMap builds (not
// quite what `watch --json` prints, the wire message of docs/cli-json.md:
// here time is a timestamp, amounts are maps by kind):
//
//	event.kind == "reservation" && event.manager == "gm160"
//	event.kind == "utilization" && event.utilization.cpu_util > 0.5
//	event.time > timestamp("2026-01-01T00:00:00Z")
//
// Its keys:
//
//	key          CEL type   meaning
//	-----------  ---------  ---------------------------------------------
//	kind         string     "relation", "reservation", "app", "admin",
//	                        "utilization" (the lower-case word of
//	                        EventKind; "unspecified", or the number for a
//	                        kind this program does not know)
//	type         string     what happened: "committed", "down", "sample"
//	manager      string     producer's name
//	peer         string     producer's peer id
//	time         timestamp  producer's clock (ms)
//	seq          int        per producer and run, from 1
//	trace_id     string     the request that caused it, or ""
//	version      int        1
//	relation     map        peer, name, cause (string); role ("superior",
//	                        "inferior"), from, to ("connecting", "up",
//	                        "suspect", "down") (string)
//	reservation  map        id, holder_peer, user, group, reason (string);
//	                        amounts (map kind → int: amounts.cpus);
//	                        expires (timestamp; absent when unset)
//	app          map        instance, app, reservation, state, detail
//	                        (string); cpu_seconds, cpu_limit (double);
//	                        mem_bytes, mem_limit (int)
//	admin        map        author, command, detail (string); ok (bool)
//	utilization  map        cpu_util (double); free, subtree_free (map
//	                        kind → int); usage (map kind → map with
//	                        capacity, used: usage.cpus.used);
//	                        reservations, instances, running,
//	                        subtree_managers (int); superior (string)
//
// Only the body of the event's own kind is set: event.app is absent on a
// reservation event, and reading it is an error, which the caller takes as
// no match. Test it with has() or kind, or default it with an optional:
//
//	event.kind == "app" && event.app.state == "running"
//	has(event.app) && event.app.state == "running"
//	event.?app.state.orValue("") == "running"
//
// A key of event or of a body that EventMap never sets (event.knd,
// event.app.instanse) is a compile error with a suggestion; keys below
// that (amounts.gpus, usage.cpus) are data and are not checked: a missing
// one fails the evaluation, as above. && and || absorb a failing side
// when the other decides. The limits of expressions (MaxExprLen,
// MaxNesting, MaxCost) hold for filters too, with one cost budget for
// the whole evaluation.
//
// What the caller must do: skip the filter when there is none (an empty
// filter does not compile); compile it once with CompileEventFilter and
// show its error (an *ExprError of Kind Filter, through errors.As) to
// whoever wrote it; call Match per event, taking an error as no match.
// An *EventFilter is immutable and safe for concurrent use.
package query
