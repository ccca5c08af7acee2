// Package web is a manager's web UI, served on its http_listen address
// beside /metrics: the grid browser (the managers as a live directed
// graph, superior → inferior, with their state and applications; a click
// opens a manager's details; back and forward follow the browsing), the
// landscape (hosts × applications, service types and instances), a
// resources table with a query box, the recent events, the job queue of
// any manager (read only: each job's log and results; its workflows, the
// one picked drawn as a graph of its nodes in hand-written SVG), and an
// admin command box. Glide-ins are marked in the grid browser. The page and its one library (Cytoscape.js, vendored in
// static/vendor, see VENDOR.md) are embedded in the binary; nothing is
// built or fetched at run time.
//
// The page talks only to the manager that serves it, through a small JSON
// API (GET /api/self, /api/tree, /api/manager?peer=, /api/apps,
// /api/utilization, /api/recent (the archive's latest events),
// /api/jobs?peer= (a manager's job queue), /api/job?peer=&id= (a job
// with its log), /api/dags?peer= (a manager's workflows),
// /api/attributes (the glide-in attributes of the tree's managers); POST
// /api/query; Server-Sent Events on /api/events; POST /api/admin); that
// manager reaches the grid over the mesh.
//
// Security: reading is open to whoever reaches the address (keep it on
// loopback, or behind a proxy with TLS and its own authentication).
// Every request, on every route, must name in its Host header the address
// the manager listens on (localhost too if that is loopback; any of the
// host's addresses if it is 0.0.0.0 or ::) or a name the operator gave
// (http_hosts); any other Host gets 421 Misdirected Request, before the
// request reaches the grid (HostCheck). So a page whose name an attacker
// pointed at this address (DNS rebinding), which the browser takes for
// same-origin, cannot read the grid, open the event stream or post.
// Changes (POST /api/admin) need the admin token in an Authorization:
// Bearer header, compared in constant time; the token is AdminToken of a
// secret the daemon derives from its identity key (gridmgr web-token). Every
// POST must be same-origin (Sec-Fetch-Site, Origin), so another site cannot
// make a browser that holds the token send commands. Bodies are limited to
// 64 KiB; errors are JSON {"error": "..."}.
//
// Shared resources are bounded per client (a remote IP address; for IPv6,
// its /64) as well as in all, so that one client cannot take them all:
// live event streams, 64 at once and 8 per client (429 past the client's,
// 503 past the total); a stream whose client takes no message for 30 s is
// closed, so that a client cannot keep its slot by not reading; and
// requests that ask the grid or the archive and may wait on them for
// seconds (tree, manager, apps, utilization, recent, jobs, job, dags,
// attributes, query, admin), 32 in progress at once and 8 per client. Behind a proxy, every
// client is the proxy.
//
// What the caller must do: implement Backend (its methods are called
// concurrently from HTTP goroutines), pass the token in Options (empty:
// read-only) and the HostCheck of the listener (NewHostCheck with the
// address the listener reports, so a port chosen at start is known), serve
// Handler, and put whatever else it serves on the same address (/metrics)
// behind HostCheck.Wrap.
package web
