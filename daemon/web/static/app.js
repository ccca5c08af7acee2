// gridmgr web UI: plain JavaScript over the manager's JSON API and its
// live event stream (Server-Sent Events). No build step.
'use strict';

const $ = (s, el = document) => el.querySelector(s);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v; else if (k.startsWith('data-')) e.setAttribute(k, v); else e[k] = v;
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k ?? '')));
  return e;
};

async function api(path, opts) {
  const r = await fetch(path, opts);
  let j;
  try { j = await r.json(); } catch { j = { error: r.statusText }; }
  if (!r.ok) throw new Error(j.error || r.statusText);
  return j;
}

const LOD = 150;        // above this many managers, collapse deep subtrees
const DEEP = 3;         // levels shown below the focus when collapsing

// A manager missing from the tree under a superior that is down is being
// moved by its failover (it attaches to another superior and the tree
// shows it there): "moving", not down. Missing this long, it is taken for
// down.
const MOVING_MAX_MS = 60000;

const model = {
  self: null,
  token: '',            // the admin token given in this tab (Admin)
  nodes: new Map(),     // peer id → {id, name, addr, state, parent, depth, missingSince}
  apps: [],
  util: new Map(),      // peer id → latest utilization event
  events: [],           // shown in the Events tab, newest first
  eventKeys: new Set(), // peer/seq/time of those, so that one is listed once
  archive: null,        // null: not read yet; else {archived, reason}
  focus: null,          // peer id the level of detail centres on
  selected: null,
  tab: 'grid',
  hi: 0, hmax: 0,       // this page's place in the browser's history, and its last
  lastEventAt: 0,
  layoutKey: '',
  laidOutHidden: false, // the graph was laid out while its tab was hidden
  userView: false,      // the user zoomed or panned the graph since it was laid out
  fitCheck: false,      // a check that the labels are in view waits for the next drawing
};

// Test and automation hooks: the model as it is now.
window.gridmgr = {
  nodes: () => [...model.nodes.values()].map(n => ({ id: n.id, name: n.name, state: n.state, parent: n.parent ? (model.nodes.get(n.parent)?.name ?? '') : '', glidein: n.glidein || '' })),
  // label: a manager's vertex label as drawn; tip: its tooltip.
  label: name => cy.nodes().filter(n => n.data('name') === name).map(n => n.data('label'))[0] ?? null,
  tip: name => { const n = [...model.nodes.values()].find(x => x.name === name); return n ? nodeTip(n) : null; },
  edges: () => [...model.nodes.values()].filter(n => n.parent && model.nodes.has(n.parent)).map(n => [model.nodes.get(n.parent).name, n.name]),
  landscapeRows: () => [...document.querySelectorAll('#landscape tr[data-instance]')].map(tr => tr.getAttribute('data-instance')),
  visible: () => cy ? cy.nodes().length : 0,
  tab: () => model.tab,
  selected: () => model.nodes.get(model.selected)?.name ?? '',
  // utilRows: the Managers table as shown, one object per row.
  utilRows: () => [...document.querySelectorAll('#restable tbody tr')].map(tr => {
    const c = [...tr.children].map(td => td.textContent);
    return { name: c[0], cpu: c[1], cpus: c[2], mem: c[3], res: c[4], apps: c[5], below: c[6], age: c[7] };
  }),
  eventLines: () => [...document.querySelectorAll('#events li')].map(li => li.textContent),
  // jobRows: the Jobs table as shown, one object per row; jobsOf: whose
  // queue it is.
  jobRows: () => [...document.querySelectorAll('#jobtable tbody tr')].map(tr => {
    const c = [...tr.children].map(td => td.textContent);
    return { id: c[0], name: c[1], workflow: c[2], user: c[3], state: c[4], where: c[5], since: c[6], tries: c[7], exit: c[8], reason: c[9] };
  }),
  // The Jobs tab's workflows: the list as shown, the one drawn, its
  // nodes (name, state, the text of its box, its box's place and fill)
  // and edges ([from, to]).
  dags: () => [...document.querySelectorAll('#dagtable tbody tr')].map(tr => {
    const c = [...tr.children].map(td => td.textContent);
    return { id: c[0], name: c[1], user: c[2], state: c[3], nodes: c[4] };
  }),
  dagShown: () => document.querySelector('#jdaggraph svg')?.dataset.dag ?? '',
  dagNodes: () => [...document.querySelectorAll('#jdaggraph g.dnode')].map(g => {
    const r = g.querySelector('rect').getBoundingClientRect();
    return { name: g.dataset.node, state: g.dataset.state, text: [...g.querySelectorAll('text')].map(t => t.textContent).join(' | '),
      fill: getComputedStyle(g.querySelector('rect')).fill, box: [r.left, r.top, r.right, r.bottom], on: g.classList.contains('on') };
  }),
  dagEdges: () => [...document.querySelectorAll('#jdaggraph path.dedge')].map(p => [p.dataset.from, p.dataset.to, p.classList.contains('blocked') ? 'blocked' : '']),
  jobsOf: () => model.jobs.loading ? '' : model.jobs.name,
  // inView: every drawn vertex of the graph is inside its viewport.
  inView: name => inViewport(cy.nodes().filter(n => !name || n.data('name') === name), false),
  get lastEventAt() { return model.lastEventAt; },
  get ready() { return model.nodes.size > 0; },
};

const stateWord = s => ({ RELATION_STATE_DOWN: 'down', RELATION_STATE_SUSPECT: 'suspect', RELATION_STATE_CONNECTING: 'connecting' }[s] || 'up');
const stateLabel = { down: 'down', suspect: 'suspect', connecting: 'connecting', moving: 'moving' };
const stateText = {
  up: 'up', down: 'down', suspect: 'suspect (heartbeats missed)', connecting: 'connecting',
  moving: 'moving: its superior is down; it is being placed under another',
};

// Times as the CLI writes them (gridmgr events, watch): local, 24-hour.
const pad = (n, w = 2) => String(n).padStart(w, '0');
function fmtTime(ms, date = true) {
  const d = new Date(Number(ms || 0));
  const t = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  return date ? `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${t}` : t;
}
// A peer id as the CLI shortens it: 12D3…Xy9abc.
const shortPeer = p => !p || p.length <= 12 ? (p || '') : p.slice(0, 4) + '…' + p.slice(-6);
// A peer id in full, ellipsised where it does not fit; the whole on hover,
// and a button that copies it.
function peerId(id) {
  const code = el('code', { class: 'peerid', title: id }, id);
  const copy = el('button', { class: 'copy', title: 'copy the peer id', type: 'button' }, 'copy');
  copy.onclick = async () => {
    try { await navigator.clipboard.writeText(id); copy.textContent = 'copied'; }
    catch { getSelection().selectAllChildren(code); copy.textContent = 'selected: Ctrl-C'; }
    setTimeout(() => { copy.textContent = 'copy'; }, 1500);
  };
  return el('span', { class: 'peerbox' }, code, copy);
}

// ---- grid browser ----

let cy = null;
function initGraph() {
  cy = cytoscape({
    container: $('#cy'),
    wheelSensitivity: 0.3,
    minZoom: 0.05,
    maxZoom: 2.5,         // a fit of two managers does not blow them up
    style: [
      { selector: 'node', style: { 'label': 'data(label)', 'text-wrap': 'wrap', 'font-size': 10, 'text-valign': 'bottom', 'text-margin-y': 3,
        'text-background-color': '#fff', 'text-background-opacity': 0.85, 'text-background-padding': 1,
        'background-color': '#3a3', 'width': 22, 'height': 22, 'min-zoomed-font-size': 7 } },
      { selector: 'node[state = "down"]', style: { 'background-color': '#d22', 'color': '#c00' } },
      { selector: 'node[state = "moving"]', style: { 'background-color': '#fff', 'border-width': 3, 'border-style': 'dashed', 'border-color': '#3a3', 'color': '#555' } },
      { selector: 'node[state = "suspect"]', style: { 'background-color': '#e90' } },
      { selector: 'node[state = "connecting"]', style: { 'background-color': '#999' } },
      // A glide-in: a hexagon with a violet ring, its badge in the label.
      { selector: 'node[glidein]', style: { 'shape': 'hexagon', 'width': 26, 'height': 24, 'border-width': 3, 'border-color': '#7a3fc4', 'color': '#5a2a9c' } },
      { selector: 'node.more', style: { 'shape': 'round-rectangle', 'background-color': '#69c', 'width': 40 } },
      { selector: 'node:selected', style: { 'border-width': 3, 'border-color': '#06c' } },
      { selector: 'edge', style: { 'width': 1.5, 'line-color': '#999', 'target-arrow-color': '#999', 'target-arrow-shape': 'triangle', 'curve-style': 'bezier' } },
      { selector: 'edge[state = "down"]', style: { 'line-color': '#d22', 'line-style': 'dashed', 'target-arrow-color': '#d22' } },
      { selector: 'edge[state = "moving"]', style: { 'line-style': 'dotted', 'line-color': '#bbb', 'target-arrow-color': '#bbb' } },
    ],
  });
  // The user's own zoom or pan: the view is theirs until the next layout
  // or fit.
  cy.on('dragpan scrollzoom pinchzoom', () => { model.userView = true; });
  // The vertex's tooltip: the container's title while the pointer is on it.
  cy.on('mouseover', 'node', e => { $('#cy').title = nodeTip(model.nodes.get(e.target.id())) || ''; });
  cy.on('mouseout', 'node', () => { $('#cy').title = ''; });
  cy.on('tap', 'node', e => {
    const id = e.target.id();
    if (id.startsWith('more:')) { model.focus = id.slice(5); render(); return; }
    select(id, true);
  });
}

// applyTree merges a tree answer into the model: managers present take
// their place and state. A manager no longer in it stays: "moving" while
// some manager above it is down or missing too (its failover is placing
// it under another superior; only the dead one is down); as it was while
// a manager above it is listed without its inferiors for another reason
// (it did not answer in time: nothing is known of them); else, or once
// missing for MOVING_MAX_MS, down.
function applyTree(root) {
  const seen = new Set();
  const walk = (n, parent, depth) => {
    if (!n || !n.peer || seen.has(n.peer)) return;
    seen.add(n.peer);
    const rec = model.nodes.get(n.peer) || { id: n.peer };
    rec.name = n.name || shortPeer(n.peer);
    rec.addr = (n.addrs || [])[0] || rec.addr || ''; // a manager down is listed without its addresses
    rec.parent = parent;
    rec.depth = depth;
    rec.state = parent ? stateWord(n.state) : 'up';
    if (n.incomplete === 'down') rec.state = 'down';
    rec.unlisted = !!n.incomplete && n.incomplete !== 'down'; // its inferiors are not in this answer
    rec.missingSince = 0;
    model.nodes.set(n.peer, rec);
    for (const c of n.children || []) walk(c, n.peer, depth + 1);
  };
  walk(root, null, 0);
  const now = Date.now();
  // above: why rec is missing, from the managers above it as last known.
  const above = rec => {
    for (let a = model.nodes.get(rec.parent), i = 0; a && i < 64; a = model.nodes.get(a.parent), i++) {
      if (a.state === 'down' || !seen.has(a.id)) return 'gone';
      if (a.unlisted) return 'unlisted';
    }
    return '';
  };
  for (const rec of model.nodes.values()) {
    if (seen.has(rec.id) || rec.state === 'down') continue;
    rec.missingSince ||= now;
    const why = now - rec.missingSince < MOVING_MAX_MS ? above(rec) : '';
    if (why === 'gone') rec.state = 'moving';
    else if (why !== 'unlisted') rec.state = 'down';
  }
  if (!model.focus || !model.nodes.has(model.focus)) model.focus = root?.peer || null;
  render();
}

function appsAt(name) {
  return model.apps.filter(a => a.manager === name && (a.state === 'running' || a.state === 'paused')).map(a => a.app);
}

function visibleSet() {
  const all = [...model.nodes.values()];
  if (all.length <= LOD) return { show: new Set(all.map(n => n.id)), more: new Map() };
  // Level of detail: the focus, its ancestors, and DEEP levels below it.
  const kids = new Map();
  for (const n of all) if (n.parent) (kids.get(n.parent) || kids.set(n.parent, []).get(n.parent)).push(n.id);
  const show = new Set(), more = new Map();
  let a = model.nodes.get(model.focus);
  while (a) { show.add(a.id); a = model.nodes.get(a.parent); }
  const count = id => (kids.get(id) || []).reduce((s, k) => s + 1 + count(k), 0);
  const down = (id, d) => {
    show.add(id);
    for (const k of kids.get(id) || []) {
      if (d < DEEP) down(k, d + 1);
      else more.set(id, (more.get(id) || 0) + 1 + count(k));
    }
  };
  if (model.focus) down(model.focus, 0);
  return { show, more };
}

function render() {
  if (!cy) return;
  const { show, more } = visibleSet();
  const els = [];
  for (const id of show) {
    const n = model.nodes.get(id);
    const apps = appsAt(n.name);
    const label = [n.name, n.glidein ? `⬡ glide-in ${n.glidein}` : '', n.addr.replace(/^\/ip4\//, '').replace('/tcp/', ':'), apps.length ? apps.join(', ') : '', stateLabel[n.state] || ''].filter(Boolean).join('\n');
    const data = { id, label, name: n.name, state: n.state };
    if (n.glidein) data.glidein = n.glidein;
    els.push({ group: 'nodes', data });
    if (n.parent && show.has(n.parent)) els.push({ group: 'edges', data: { id: 'e:' + n.parent + '>' + id, source: n.parent, target: id, state: n.state } });
  }
  for (const [id, k] of more) {
    els.push({ group: 'nodes', data: { id: 'more:' + id, label: '+' + k + ' managers', state: 'up' }, classes: 'more' });
    els.push({ group: 'edges', data: { id: 'e:more:' + id, source: id, target: 'more:' + id, state: 'up' } });
  }
  const key = els.map(e => e.data.id + (e.data.source ? '<' + e.data.source : '')).sort().join(',');
  if (key === model.layoutKey) {
    for (const e of els) { const x = cy.getElementById(e.data.id); if (x.nonempty()) { if (!e.data.glidein) x.removeData('glidein'); x.data(e.data); } }
    // A label that grew ("moving") may leave the view: fit again, unless
    // the user has zoomed or panned. (Labels are measured when drawn.)
    if (!model.fitCheck) {
      model.fitCheck = true;
      cy.one('render', () => { model.fitCheck = false; if (!model.userView && model.tab === 'grid' && !inViewport(cy.nodes(), true)) cy.fit(undefined, 30); });
    }
  } else {
    model.layoutKey = key;
    model.userView = false;
    cy.batch(() => { cy.elements().remove(); cy.add(els); });
    const roots = cy.nodes().filter(n => n.indegree() === 0);
    // Laid out in a box sized for the levels drawn, at most the view (at
    // zoom 1; not the current extent, which after many managers is zoomed
    // out and would spread a few far apart, drawn as dots), then fitted,
    // the root included.
    const up = new Map(els.filter(e => e.data.source).map(e => [e.data.target, e.data.source]));
    const levels = new Map();
    for (const e of els) {
      if (e.data.source) continue;
      let d = 0;
      for (let p = up.get(e.data.id); p && d < 64; p = up.get(p)) d++;
      levels.set(d, (levels.get(d) || 0) + 1);
    }
    const widest = Math.max(1, ...levels.values());
    cy.layout({ name: 'breadthfirst', directed: true, roots, spacingFactor: 1.1, animate: false, fit: true, padding: 30,
      boundingBox: { x1: 0, y1: 0, w: Math.min(Math.max(cy.width(), 300), 170 * widest), h: Math.min(Math.max(cy.height(), 300), 140 * levels.size) } }).run();
    model.laidOutHidden = model.tab !== 'grid';
    if (model.selected && cy.getElementById(model.selected).nonempty()) cy.getElementById(model.selected).select();
  }
  const all = [...model.nodes.values()], count = s => all.filter(n => n.state === s).length;
  const downN = count('down'), movingN = count('moving');
  $('#gridsum').textContent = `${all.length} managers, ${downN} down` + (movingN ? `, ${movingN} moving to a new superior` : '') +
    (more.size ? ` (deep subtrees collapsed; click +N to open)` : '');
  renderLandscape();
  if (model.tab === 'resources') renderUtil();
}

// inViewport: every one of nodes is inside the graph's view.
function inViewport(nodes, labels) {
  const w = cy.width(), h = cy.height();
  return nodes.every(n => {
    const b = n.renderedBoundingBox({ includeLabels: labels });
    return b.x1 >= 0 && b.y1 >= 0 && b.x2 <= w && b.y2 <= h;
  });
}

// reveal pans the graph as little as needed to bring node into view; a
// node already in view does not move it (so the root stays where it is).
function reveal(node) {
  const m = 20, w = cy.width(), h = cy.height(), b = node.renderedBoundingBox({ includeLabels: true });
  const dx = b.x1 < m ? m - b.x1 : b.x2 > w - m ? (w - m) - b.x2 : 0;
  const dy = b.y1 < m ? m - b.y1 : b.y2 > h - m ? (h - m) - b.y2 : 0;
  if (dx || dy) cy.animate({ panBy: { x: dx, y: dy } }, { duration: 200 });
}

async function select(id, push) {
  const n = model.nodes.get(id) || [...model.nodes.values()].find(x => x.name === id);
  if (!n) return;
  model.selected = n.id;
  model.focus = n.id;
  if (push) navigate({ manager: n.name });
  if (model.tab === 'jobs') refreshJobs();
  render();
  const node = cy.getElementById(n.id);
  if (node.nonempty()) { cy.$(':selected').unselect(); node.select(); if (model.tab === 'grid') reveal(node); }
  $('#crumbs').textContent = crumbs(n);
  const d = $('#details');
  d.replaceChildren(...head(n), el('p', { class: 'hint' }, 'loading…'));
  loadDetails(n, d, 0);
}

// loadDetails reads a manager's details into d while it stays selected.
// A part that could not be read (a manager that is busy, or just
// joined) says why, and is asked for again a few times, 2 s apart.
async function loadDetails(n, d, tries) {
  try {
    const m = await api('/api/manager?peer=' + encodeURIComponent(n.id));
    if (model.selected !== n.id) return;
    d.replaceChildren(...details(n, m));
    if ((m.resources_error || m.reservations_error) && tries < 3) {
      setTimeout(() => { if (model.selected === n.id) loadDetails(n, d, tries + 1); }, 2000);
    }
  } catch (e) {
    if (model.selected !== n.id) return;
    d.replaceChildren(...head(n), el('p', { class: 'err' }, 'cannot read its details: ' + e.message));
  }
}

// A glide-in's words: what it is and who it is for.
function glideinText(n) {
  const up = model.nodes.get(n.parent);
  return `glide-in ${n.glidein}: a manager a launcher started on a host it reserved` + (up ? `, joined under its launcher ${up.name}` : '') +
    (n.glideinOwner ? `, for ${n.glideinOwner}` : '');
}

// nodeTip is a vertex's tooltip: the manager, its state and address, and
// for a glide-in what it is.
function nodeTip(n) {
  if (!n) return '';
  return [`${n.name}: ${stateText[n.state] || n.state}`, n.addr, n.glidein ? glideinText(n) : ''].filter(Boolean).join('\n');
}

// head is the top of a manager's details: name, state, address, peer id.
function head(n) {
  return [el('h2', {}, n.name, n.glidein ? el('span', { class: 'badge glidein', title: glideinText(n) }, 'glide-in ' + n.glidein) : ''),
    n.glidein ? el('p', { class: 'hint glidein-note' }, glideinText(n)) : '',
    el('p', { class: n.state === 'down' ? 'down' : n.state === 'moving' ? 'moving' : '' }, stateText[n.state] || n.state),
    el('p', { class: 'addr', title: n.addr }, n.addr),
    el('p', {}, peerId(n.id))];
}

function crumbs(n) {
  const path = [];
  for (let a = n; a; a = model.nodes.get(a.parent)) path.unshift(a.name);
  return path.join(' › ');
}

function table(head, rows) {
  return el('table', {}, el('tr', {}, ...head.map(h => el('th', {}, h))), ...rows.map(r => el('tr', {}, ...r.map(c => el('td', {}, c)))));
}

const bytes = n => { n = Number(n || 0); const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB']; let i = 0; while (n >= 1024 && i < 4) { n /= 1024; i++; } return (i ? n.toFixed(1) : n) + ' ' + u[i]; };

function details(n, m) {
  const out = head(n);
  const st = m.status;
  if (st) {
    out.push(el('p', {}, `${st.hostname || ''} ${st.os || ''}/${st.arch || ''}, ${st.cpus || 0} cpus, ${bytes(st.memory_bytes)}, gridmgr ${st.version || ''}`));
    out.push(el('h3', {}, 'Relations'), table(['manager', 'role', 'state', 'rtt'], (st.relations || []).map(r => [el('span', { title: r.peer }, r.name || shortPeer(r.peer)), r.role === 'ROLE_SUPERIOR' ? 'superior' : 'inferior', stateWord(r.state), r.rtt_us ? (Number(r.rtt_us) / 1000).toFixed(2) + ' ms' : ''])));
  } else if (m.status_error) out.push(el('p', { class: 'err' }, m.status_error));
  const res = m.resources?.values;
  if (res) {
    out.push(el('h3', {}, 'Resources'), table(['cpus free', 'mem free', 'cpu use'], [[`${res.cpus_free || 0} / ${res.cpus || 0}`, `${bytes(res.mem_free)} / ${bytes(res.mem)}`, res.cpu_util >= 0 ? (100 * (res.cpu_util || 0)).toFixed(0) + '%' : '?']]));
  } else if (m.resources_error) out.push(el('h3', {}, 'Resources'), el('p', { class: 'err' }, 'cannot read its resources: ' + m.resources_error));
  const rv = m.reservations;
  if (!rv && m.reservations_error) out.push(el('h3', {}, 'Reservations'), el('p', { class: 'err' }, 'cannot read its reservations: ' + m.reservations_error));
  if (rv) {
    out.push(el('h3', {}, `Reservations (${rv.live || 0} live)`), table(['id', 'state', 'amounts', 'user'], (rv.reservations || []).slice(0, 50).map(r => [r.id, (r.state || '').replace('RESERVATION_STATE_', '').toLowerCase(), (r.amounts || []).map(a => `${a.kind} ${a.kind === 'mem' ? bytes(a.n) : a.n}`).join(', '), r.user || ''])));
  }
  const inst = model.apps.filter(a => a.manager === n.name);
  out.push(el('h3', {}, 'Instances'), inst.length ? table(['instance', 'state', 'cpu s', 'mem'], inst.map(a => [a.id, a.state, (a.cpu_seconds || 0).toFixed(1), bytes(a.mem_bytes)])) : el('p', { class: 'hint' }, 'none'));
  if (st) {
    const evs = (st.events || []).slice(-10).reverse();
    out.push(el('h3', {}, 'Recent relation events'), evs.length ? el('ul', { class: 'recent' }, ...evs.map(e =>
      el('li', {}, `${fmtTime(Date.now() - Number(e.ms_ago || 0), false)} ${e.name || shortPeer(e.peer)}: ${e.what}`))) : el('p', { class: 'hint' }, 'none'));
  }
  return out;
}

// ---- the URL: #tab=events&manager=gm154 (the grid tab is the default) ----

function parseHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  const tab = p.get('tab') || 'grid';
  return { tab: document.getElementById('tab-' + tab) ? tab : 'grid', manager: p.get('manager') || '' };
}

function hashOf(st) {
  const p = new URLSearchParams();
  if (st.tab && st.tab !== 'grid') p.set('tab', st.tab);
  if (st.manager) p.set('manager', st.manager);
  const s = p.toString();
  return s ? '#' + s : location.pathname;
}

// navigate records a change of tab or manager as a new entry of the
// browser's history (back and forward then go through it).
function navigate(change) {
  const st = { tab: model.tab, manager: model.nodes.get(model.selected)?.name || '', ...change };
  const h = hashOf(st);
  if (h === (location.hash || location.pathname)) return;
  model.hi++;
  model.hmax = model.hi;
  history.pushState({ i: model.hi }, '', h);
  updateArrows();
}

function updateArrows() {
  $('#back').disabled = model.hi <= 0;
  $('#forward').disabled = model.hi >= model.hmax;
}

// restore shows what the URL names: its tab and manager.
function restore() {
  const st = parseHash();
  if (st.tab !== model.tab) showTab(st.tab);
  const cur = model.nodes.get(model.selected);
  if (st.manager && (!cur || cur.name !== st.manager)) select(st.manager, false);
}

window.addEventListener('popstate', e => {
  if (e.state?.i === undefined) {
    // A new address typed or followed (#tab=…): a new entry, after ours.
    model.hi = model.hmax = model.hi + 1;
    history.replaceState({ i: model.hi }, '', location.hash || location.pathname);
  } else model.hi = e.state.i;
  updateArrows();
  restore();
});

// ---- landscape ----

// The landscape shows services: instances running (or paused, or being
// restarted); one that stops leaves it, as in the patent's FIG. 6.
const serving = a => a.state === 'running' || a.state === 'paused' || a.state === 'restarting';

function renderLandscape() {
  const hosts = [...model.nodes.values()].map(n => n.name).sort();
  const byApp = new Map();
  const services = model.apps.filter(serving);
  for (const a of services) {
    const type = a.class || a.app;
    const m = byApp.get(a.app) || byApp.set(a.app, new Map()).get(a.app);
    (m.get(type) || m.set(type, []).get(type)).push(a);
  }
  const head = el('tr', {}, el('th', {}, 'application / type / instance'), ...hosts.map(h => el('th', { class: model.nodes.get([...model.nodes.keys()].find(k => model.nodes.get(k).name === h))?.state === 'down' ? 'down' : '' }, h)));
  const rows = [];
  for (const app of [...byApp.keys()].sort()) {
    rows.push(el('tr', { class: 'app' }, el('th', { colSpan: hosts.length + 1 }, app)));
    for (const [type, list] of [...byApp.get(app)].sort()) {
      rows.push(el('tr', { class: 'type' }, el('td', {}, '  ' + type), ...hosts.map(h => el('td', {}, list.filter(a => a.manager === h).length || ''))));
      for (const a of list.sort((x, y) => x.id.localeCompare(y.id))) {
        rows.push(el('tr', { 'data-instance': a.id }, el('td', {}, '    ' + a.id), ...hosts.map(h => h === a.manager ? el('td', { class: 'state-' + a.state }, a.state) : el('td', {}))));
      }
    }
  }
  const idle = model.apps.length - services.length;
  $('#landscape').replaceChildren(services.length ? el('table', {}, head, ...rows) : el('p', { class: 'hint' }, 'No service runs in the grid.'),
    idle ? el('p', { class: 'hint' }, `${idle} instance(s) installed but not running are not shown.`) : '');
}

async function refreshApps() {
  try { model.apps = (await api('/api/apps')).instances || []; render(); } catch (e) { /* keep the last list */ }
}

// ---- resources and queries ----

let sortKey = 'name', sortDir = 1;
// belowCounts counts the managers under each manager in the tree as the
// graph shows it (those down left out).
function belowCounts() {
  const k = new Map();
  for (const n of model.nodes.values()) {
    if (n.state === 'down') continue;
    for (let a = model.nodes.get(n.parent), i = 0; a && i < 64; a = model.nodes.get(a.parent), i++) k.set(a.id, (k.get(a.id) || 0) + 1);
  }
  return k;
}
function utilRow(ev, under) {
  const u = ev.utilization || {};
  const free = k => Number((u.free || []).find(a => a.kind === k)?.n || 0);
  const n = model.nodes.get(ev.peer);
  return { id: ev.peer, name: ev.manager, state: n?.state || '', cpu: u.cpu_util ?? 0 /* 0 is left out of the JSON; -1 is not measured yet */, cpus: free('cpus'), mem: free('mem'), res: u.reservations || 0,
    running: u.running || 0, apps: `${u.running || 0}/${u.instances || 0}`,
    sub: n ? under.get(ev.peer) || 0 : Math.max((u.subtree_managers || 1) - 1, 0), age: Number(ev.time_unix_ms || 0), asked: ev.type === 'asked' };
}
function renderUtil() {
  const under = belowCounts();
  const rows = [...model.util.values()].map(ev => utilRow(ev, under));
  const key = sortKey === 'apps' ? 'running' : sortKey;
  rows.sort((a, b) => (a[key] > b[key] ? 1 : a[key] < b[key] ? -1 : 0) * sortDir || a.name.localeCompare(b.name));
  for (const th of document.querySelectorAll('#restable th[data-key]')) th.dataset.sort = th.dataset.key === sortKey ? (sortDir > 0 ? '▲' : '▼') : '';
  $('#restable tbody').replaceChildren(...rows.map(r => el('tr', { class: r.state === 'down' ? 'down' : '' },
    el('td', { title: r.id }, r.name), r.cpu >= 0 ? el('td', {}, (100 * r.cpu).toFixed(0) + '%') : el('td', { title: 'not measured yet' }, '?'), el('td', {}, r.cpus), el('td', {}, bytes(r.mem)),
    el('td', {}, r.res), el('td', {}, r.apps), el('td', {}, r.sub),
    el('td', { title: r.asked ? 'asked of the manager' : 'its own sample, heard on the event bus' }, r.age ? ago(r.age) : ''))));
  $('#resnote').textContent = rows.length ? '' : 'No manager has answered yet.';
}
const ago = ms => { const s = Math.max(0, Math.round((Date.now() - ms) / 1000)); return s < 90 ? `${s} s ago` : `${Math.round(s / 60)} min ago`; };
async function refreshUtil() {
  try {
    for (const ev of (await api('/api/utilization')).samples || []) model.util.set(ev.peer, ev);
    renderUtil();
  } catch (e) { $('#resnote').textContent = 'cannot read the managers\' use: ' + e.message; }
}

async function runQuery(ev) {
  ev.preventDefault();
  const out = $('#qout');
  out.replaceChildren(el('p', { class: 'hint' }, 'asking the grid…'));
  try {
    const rep = await api('/api/query', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ requirement: $('#qreq').value, rank: $('#qrank').value, limit: Number($('#qlimit').value) || 20 }) });
    const offers = rep.offers || [];
    out.replaceChildren(
      el('p', {}, `${offers.length} offer(s); ${rep.visited || 0} manager(s) searched` + ((rep.missing || []).length ? `; missing: ${rep.missing.map(s => s.name + ' (' + s.why + ')').join(', ')}` : '')),
      table(['#', 'manager', 'cpus free', 'mem free', 'rank'], offers.map((o, i) => [i + 1, o.name, `${o.cpus_free || 0}/${o.cpus || 0}`, bytes(o.mem_free), o.rank ?? 0])),
      el('h3', {}, 'Path'), el('ol', {}, ...(rep.visits || []).map(v => el('li', {}, `${v.name} asked by ${v.asked_by || 'the client'} (${(v.direction || '').replace('DIRECTION_', '').toLowerCase() || 'entry'}), offers ${v.offers || 0}`))));
  } catch (e) {
    out.replaceChildren(el('p', { class: 'err' }, e.message));
  }
}

// ---- events ----

const amounts = as => (as || []).map(a => a.kind === 'mem' ? 'mem ' + bytes(a.n) : `${a.kind} ${a.n}`).join(', ');
const oneLine = s => { s = String(s || '').replace(/\n/g, ' '); return s.length > 120 ? s.slice(0, 117) + '...' : s; };

// jobLine is what a job event says, as render.Event writes it: the job,
// its try and where, its user, its state if the type does not say it, and
// the log line's detail unless it repeats them.
const jobImplied = { started: 'running', submitted: 'idle', unheld: 'idle' };
function jobLine(type, j) {
  const st = jobState(j.state);
  let s = j.id || '';
  if (j.try) s += ` try ${j.try}`;
  if (j.manager) s += ` at ${j.manager}`;
  if (j.user) s += ` for ${j.user}`;
  if (j.node && !type.startsWith('dag-')) s += ` (node ${j.node} of ${j.dag})`;
  if (j.state && st !== type && jobImplied[type] !== st) s += `, now ${st}`;
  const d = j.detail || '';
  if (d && d !== `try ${j.try || 0} at ${j.manager || ''}` && d !== `by ${j.user || ''}`) s += ': ' + oneLine(d);
  else if (!d && j.exit_code) s += ` (exit code ${j.exit_code})`;
  return s;
}

// eventText is one event on one line, as the CLI writes it (gridmgr
// events, watch): time, producer, kind/type, and what it is about.
function eventText(ev) {
  const kind = (ev.kind || '').replace('EVENT_KIND_', '').toLowerCase();
  let s = `${fmtTime(ev.time_unix_ms)} ${(ev.manager || '').padEnd(8)} ${kind}/${ev.type}`;
  if (ev.relation) {
    const r = ev.relation;
    s += ` ${r.name || shortPeer(r.peer)} (${(r.role || '').replace('ROLE_', '').toLowerCase()})` + (r.cause ? ': ' + oneLine(r.cause) : '');
  } else if (ev.reservation) {
    const r = ev.reservation, who = r.user || shortPeer(r.holder_peer);
    s += (r.id ? ' ' + r.id : '') + (r.amounts?.length ? ' ' + amounts(r.amounts) : '') + (who ? ' for ' + who : '') +
      (r.reason && (ev.type === 'refused' || ev.type === 'expired') ? ': ' + oneLine(r.reason) : '');
  } else if (ev.app) {
    const a = ev.app;
    s += ' ' + a.instance + (a.state !== ev.type ? ' ' + a.state : '') +
      (a.cpu_seconds > 0 || Number(a.mem_bytes) > 0 ? ` (cpu ${(a.cpu_seconds || 0).toFixed(1)}s, mem ${bytes(a.mem_bytes)})` : '') + (a.detail ? ': ' + oneLine(a.detail) : '');
  } else if (ev.job) {
    s += ' ' + jobLine(ev.type, ev.job);
  } else if (ev.admin) {
    const a = ev.admin;
    s += ` "${a.command}" by ${shortPeer(a.author)}: ${a.ok ? 'ok' : 'refused'}` + (!a.ok && a.detail ? ` (${oneLine(a.detail)})` : '');
  }
  if (ev.trace_id) s += ` [trace ${ev.trace_id}]`;
  return s;
}

// addEvents lists events (newest first) once each; utilization samples
// are not listed (the Resources tab shows them).
function addEvents(evs) {
  let added = false;
  for (const ev of evs) {
    if (ev.kind === 'EVENT_KIND_UTILIZATION') continue;
    const key = `${ev.peer}/${ev.seq}/${ev.time_unix_ms}`;
    if (model.eventKeys.has(key)) continue;
    model.eventKeys.add(key);
    model.events.push(ev);
    added = true;
  }
  if (!added) return;
  model.events.sort((a, b) => Number(b.time_unix_ms || 0) - Number(a.time_unix_ms || 0));
  for (const ev of model.events.splice(500)) model.eventKeys.delete(`${ev.peer}/${ev.seq}/${ev.time_unix_ms}`);
  // Drawn once per frame, and only while the tab is shown.
  if (model.tab === 'events' && !eventsFrame) eventsFrame = requestAnimationFrame(() => { eventsFrame = 0; renderEvents(); });
}
let eventsFrame = 0;

function renderEvents() {
  const a = model.archive;
  let note = '';
  if (!a) note = 'reading the archive…';
  else if (!a.archived) note = a.reason;
  else if (!model.events.length) note = 'No event archived yet; they appear here as they happen.';
  else note = `${model.events.length} events, newest first: ${model.self?.name || 'this manager'}'s archive, and those that happen while the page is open.`;
  $('#evnote').textContent = note;
  $('#evnote').className = a && !a.archived ? 'note' : 'hint';
  $('#events').classList.toggle('empty', !model.events.length);
  $('#events').replaceChildren(...model.events.map(ev => el('li', { class: 'ev-' + (ev.type || '') }, eventText(ev))));
}

async function loadArchive() {
  try {
    const r = await api('/api/recent?limit=200');
    model.archive = { archived: !!r.archived, reason: r.reason || '' };
    addEvents(r.events || []);
  } catch (e) {
    model.archive = { archived: false, reason: 'cannot read the archive: ' + e.message };
  }
  renderEvents();
}

const timers = {};
const soon = (fn, ms, which) => { clearTimeout(timers[which]); timers[which] = setTimeout(fn, ms); };

function onEvent(ev) {
  model.lastEventAt = Date.now();
  addEvents([ev]);
  switch (ev.kind) {
    case 'EVENT_KIND_RELATION': {
      const r = ev.relation || {};
      if ((ev.type === 'down' || ev.type === 'failed-superior') && model.nodes.has(r.peer)) {
        model.nodes.get(r.peer).state = 'down';
        render();
      }
      soon(refreshTree, 300, 'tree');
      break;
    }
    case 'EVENT_KIND_APP':
      soon(refreshApps, 300, 'apps');
      break;
    case 'EVENT_KIND_JOB':
      // A job of the queue shown changed: read it again (once for a burst).
      if (model.tab === 'jobs' && (ev.peer === model.jobs.peer || ev.manager === model.jobs.name)) soon(refreshJobs, 400, 'jobs');
      break;
    case 'EVENT_KIND_UTILIZATION':
      model.util.set(ev.peer, ev);
      if (model.tab === 'resources') renderUtil();
      break;
  }
}

function connectEvents() {
  const es = new EventSource('/api/events');
  es.onopen = () => $('#live').classList.add('on');
  es.onmessage = m => { try { onEvent(JSON.parse(m.data)); } catch (e) { } };
  es.onerror = () => $('#live').classList.remove('on'); // EventSource reconnects by itself
}

async function refreshTree() {
  try { applyTree(await api('/api/tree')); } catch (e) { $('#gridsum').textContent = 'cannot read the tree: ' + e.message; return; }
  refreshAttrs();
}

// refreshAttrs reads the attributes the tree marks managers by (glide-ins:
// glidein, glidein_owner). The manager serving the page asks each manager
// once, and again every few minutes: this is cheap to call with the tree.
async function refreshAttrs() {
  let a;
  try { a = (await api('/api/attributes')).attributes || {}; } catch (e) { return; /* keep the marks known */ }
  let changed = false;
  for (const n of model.nodes.values()) {
    const g = a[n.id]?.glidein || '', o = a[n.id]?.glidein_owner || '';
    if ((n.glidein || '') !== g || (n.glideinOwner || '') !== o) { n.glidein = g; n.glideinOwner = o; changed = true; }
  }
  if (!changed) return;
  render();
  const sel = model.nodes.get(model.selected);
  if (sel) select(sel.id, false);
}

// ---- jobs ----

// The job queue of one manager: the one selected (in the grid browser, or
// the picker here), else the one serving the page. Read only: the UI
// changes no job.
const JOB_STATES = ['waiting', 'idle', 'matched', 'reserved', 'staged', 'running', 'staging-out', 'completed', 'failed', 'held', 'removed'];
const jobState = s => String(s || '').replace('JOB_STATE_', '').toLowerCase().replace(/_/g, '-') || 'unknown';
const MAX_JOB_ROWS = 1000; // rows drawn at once; the filter finds the rest
const MAX_JOBS_LISTED = 5000; // the most jobs a manager's list carries
// clusterNo is the number of a job's cluster: gm152.17 → 17.
const clusterNo = j => Number(String(j.cluster || j.id || '').split('.').pop().replace(/\[.*$/, '')) || 0;
// since: how long ago, in the largest unit that reads well.
function since(ms) {
  if (!Number(ms)) return '';
  const s = Math.max(0, Math.round((Date.now() - Number(ms)) / 1000));
  return s < 90 ? `${s} s ago` : s < 90 * 60 ? `${Math.round(s / 60)} min ago` : s < 36 * 3600 ? `${Math.round(s / 3600)} h ago` : `${Math.round(s / 86400)} d ago`;
}

function jobsTarget() {
  const n = model.nodes.get(model.selected);
  return n ? { peer: n.id, name: n.name } : { peer: model.self?.peer || '', name: model.self?.name || 'this manager' };
}

function freshJobs(t) {
  return { peer: t.peer, name: t.name, list: [], more: 0, error: '', at: 0, loading: true, open: '', seq: model.jobs?.seq || 0,
    dags: [], dagError: '', dag: '', dagPicked: false, pick: null };
}
model.jobs = freshJobs({ peer: '', name: '' });

let jobsKey = '';
// jobManagers fills the manager picker from the tree (the serving manager
// first), keeping it while the managers are the same.
function jobManagers(t) {
  const sel = $('#jmgr');
  const selfPeer = model.self?.peer || '';
  const list = [...model.nodes.values()].sort((a, b) => (b.id === selfPeer) - (a.id === selfPeer) || a.name.localeCompare(b.name));
  if (!list.some(n => n.id === t.peer)) list.unshift({ id: t.peer, name: t.name, state: 'up' });
  const key = list.map(n => n.id + n.state).join(',');
  if (key !== jobsKey) {
    jobsKey = key;
    sel.replaceChildren(...list.map(n => el('option', { value: n.id },
      n.name + (n.id === selfPeer ? ' (serves this page)' : '') + (n.state === 'down' ? ' (down)' : ''))));
  }
  sel.value = t.peer;
}

async function refreshJobs() {
  const t = jobsTarget();
  // Before the page knows who serves it, the serving manager is peer "".
  if (!model.jobs.peer && (t.peer === model.self?.peer || !t.peer)) Object.assign(model.jobs, t);
  if (model.jobs.peer !== t.peer) {
    model.jobs = freshJobs(t);
    const d = $('#jdetail');
    delete d.dataset.job;
    d.replaceChildren();
    renderJobs();
  }
  const seq = ++model.jobs.seq;
  const q = '?peer=' + encodeURIComponent(t.peer);
  // The queue's jobs and its workflows, read together.
  const [jr, dr] = await Promise.allSettled([api('/api/jobs' + q), api('/api/dags' + q)]);
  if (seq !== model.jobs.seq) return;
  if (jr.status === 'fulfilled') Object.assign(model.jobs, { list: jr.value.jobs || [], more: Number(jr.value.more || 0), error: '', at: Date.now(), loading: false });
  else Object.assign(model.jobs, { error: jr.reason.message, loading: false }); // the last list stays, with the error above it
  if (dr.status === 'fulfilled') Object.assign(model.jobs, { dags: dr.value.dags || [], dagError: '' });
  else model.jobs.dagError = dr.reason.message; // the last workflows stay
  renderJobs();
  if (model.jobs.open) showJob(model.jobs.open);
}

function renderJobs() {
  const J = model.jobs;
  jobManagers(J);
  const want = $('#jstate').value, who = $('#juser').value.trim().toLowerCase();
  const counts = new Map();
  for (const j of J.list) counts.set(jobState(j.state), (counts.get(jobState(j.state)) || 0) + 1);
  const chip = (state, label, n) => {
    const b = el('button', { type: 'button', class: (want === state ? 'on ' : '') + (state ? 'js-' + state : ''), title: state ? `show only the ${label} jobs` : 'show every state' }, label, el('span', { class: 'n' }, n));
    b.onclick = () => { $('#jstate').value = want === state ? '' : state; renderJobs(); };
    return b;
  };
  const pick = J.pick;
  const pickChip = () => {
    const d = J.dags.find(x => x.id === pick.dag);
    const b = el('button', { type: 'button', class: 'on pick', title: 'show every job again' },
      pick.node ? `node ${pick.node} of ${d?.name || pick.dag}` : `workflow ${d?.name || pick.dag}`, el('span', { class: 'n' }, '×'));
    b.onclick = () => { J.pick = null; renderJobs(); };
    return b;
  };
  $('#jcounts').replaceChildren(...(J.list.length ? [chip('', 'all', J.list.length), ...JOB_STATES.filter(s => counts.get(s)).map(s => chip(s, s, counts.get(s)))] : []),
    ...(pick ? [pickChip()] : []));
  const shown = J.list.filter(j => (!want || jobState(j.state) === want) && (!who || String(j.user || '').toLowerCase().includes(who)) &&
    (!pick || (j.dag === pick.dag && (!pick.node || j.node === pick.node))))
    .sort((a, b) => clusterNo(b) - clusterNo(a) || (a.index || 0) - (b.index || 0));
  const rows = shown.slice(0, MAX_JOB_ROWS).map(j => {
    const st = jobState(j.state);
    const tr = el('tr', { 'data-job': j.id, class: j.id === J.open ? 'open' : '' },
      el('td', { class: 'id' }, j.id),
      el('td', { class: 'clip', title: j.name || '' }, j.name || ''),
      el('td', { class: 'wf clip', title: j.dag ? jobWorkflowText(j) : '' }, j.dag ? `${j.dag_name || j.dag} › ${j.node || ''}` + (j.role ? ` (${j.role})` : '') : ''),
      el('td', { class: 'clip', title: j.user || '' }, j.user || ''),
      el('td', {}, el('span', { class: 'js js-' + st }, st)),
      el('td', {}, j.manager || ''),
      el('td', { title: j.since_unix_ms ? fmtTime(j.since_unix_ms) : '' }, since(j.since_unix_ms)),
      el('td', { class: 'num' }, j.tries || 0),
      el('td', {}, j.exit || ''),
      el('td', { class: 'reason', title: j.reason || '' }, oneLine(j.reason)));
    tr.onclick = () => showJob(j.id);
    return tr;
  });
  $('#jobtable tbody').replaceChildren(...rows);
  // The workflow column only when a job listed is a workflow's.
  $('#jobtable').classList.toggle('nodag', !shown.some(j => j.dag));
  $('#jobtable').style.display = rows.length ? '' : 'none';
  const notes = [];
  if (J.loading) notes.push(`reading ${J.name}'s job queue…`);
  else if (!J.error && !J.list.length) notes.push(`${J.name} has no job in its queue.`);
  else if (J.list.length && !shown.length) notes.push('No job matches the filter.');
  if (shown.length > rows.length) notes.push(`${shown.length - rows.length} more jobs match and are not drawn: narrow the filter (state, user).`);
  if (J.more > 0) notes.push(`${J.more} more jobs at ${J.name} are not listed: a manager lists ${MAX_JOBS_LISTED} at most, its oldest first.`);
  $('#jmore').textContent = notes.join(' ');
  const err = J.error.startsWith(J.name + ': ') ? J.error.slice(J.name.length + 2) : J.error;
  $('#jerr').textContent = J.error ? `${J.name}'s job queue cannot be read: ${err}` : '';
  $('#jnote').textContent = J.at ? `${J.name}: ${J.list.length} jobs${shown.length !== J.list.length ? `, ${shown.length} shown` : ''}, read at ${fmtTime(J.at, false).slice(0, 8)}` +
    (rows.length && !J.open ? '. Click a job for its log and results.' : '') : '';
  $('#jdetail').classList.toggle('none', !J.open);
  renderDags();
}

// jobWorkflowText says which workflow and node a job is of.
function jobWorkflowText(j) {
  return `workflow ${j.dag}` + (j.dag_name ? ` "${j.dag_name}"` : '') + `, node ${j.node || ''}` +
    (j.role ? ` (its ${j.role} command)` : '') + ((j.after || []).length ? `, after ${j.after.join(', ')}` : '');
}

// ---- workflows (the Jobs tab) ----

// A workflow's nodes are drawn as a layered graph, left to right: a node
// one column right of the last node it comes after, an arrow from each
// of those to it. Each node is a box coloured by its state, with its name
// and how many of its jobs completed (an array is one node).
const NODE_STATES = ['waiting', 'pre', 'running', 'post', 'completed', 'failed', 'held', 'removed'];
const nodeStateText = {
  waiting: 'waiting: a node it comes after has not completed', pre: 'pre: its pre command runs', running: 'running: its jobs are being placed or run',
  post: 'post: its post command runs', completed: 'completed: every job of it completed', failed: 'failed: for good (dag rerun runs it again)',
  held: 'held: its jobs that could run are held', removed: 'removed',
};
const dagStateText = {
  running: 'running: a job of it may still run', held: 'held: the jobs that could run are all held', completed: 'completed: every node completed',
  failed: 'failed: a node failed and nothing else can run (dag rerun runs the rest)', removed: 'removed',
};
const DAG_MAX_DRAWN = 400; // nodes drawn at most; a larger workflow is listed, not drawn
const DAG_ENDED = new Set(['completed', 'failed', 'removed']);
const BOX_W = 200, BOX_H = 50, GAP_X = 64, GAP_Y = 18, PAD = 14;

const SVG = 'http://www.w3.org/2000/svg';
const svg = (tag, attrs = {}, ...kids) => {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k ?? '')));
  return e;
};
const clip = (s, n) => { s = String(s || ''); return s.length > n ? s.slice(0, n - 1) + '…' : s; };

// dagOrder: newest first.
const dagNo = d => Number(String(d.id || '').split('.').pop()) || 0;

function renderDags() {
  const J = model.jobs, box = $('#jdags');
  const list = [...J.dags].sort((a, b) => dagNo(b) - dagNo(a));
  box.classList.toggle('none', !list.length);
  if (!list.length) { $('#dagtable tbody').replaceChildren(); $('#jdaggraph').replaceChildren(); $('#jdaghead').replaceChildren(); return; }
  // The workflow shown: the one picked; else the newest still running,
  // else the newest.
  if (!J.dagPicked || !list.some(d => d.id === J.dag)) J.dag = (list.find(d => !DAG_ENDED.has(d.state)) || list[0]).id;
  $('#dagtable tbody').replaceChildren(...list.map(d => {
    const nodes = d.nodes || [], done = nodes.filter(n => n.state === 'completed').length;
    const tr = el('tr', { 'data-dag': d.id, class: d.id === J.dag ? 'open' : '' },
      el('td', { class: 'id' }, d.id), el('td', { class: 'clip', title: d.name || '' }, d.name || ''), el('td', { class: 'clip', title: d.user || '' }, d.user || ''),
      el('td', {}, el('span', { class: 'js ns-' + d.state, title: dagStateText[d.state] || d.state }, d.state)),
      el('td', { class: 'num', title: nodeSummary(nodes) }, `${done}/${nodes.length}`),
      el('td', { title: d.submitted_unix_ms ? fmtTime(d.submitted_unix_ms) : '' }, since(d.submitted_unix_ms)));
    tr.onclick = () => { J.dag = d.id; J.dagPicked = true; if (J.pick && J.pick.dag !== d.id) J.pick = null; renderJobs(); };
    return tr;
  }));
  const d = list.find(x => x.id === J.dag);
  const all = el('button', { type: 'button', title: 'list the jobs of every node of it below' }, 'list its jobs');
  all.onclick = () => { J.pick = J.pick && J.pick.dag === d.id && !J.pick.node ? null : { dag: d.id, node: '' }; renderJobs(); };
  $('#jdaghead').replaceChildren(el('b', {}, `${d.name || d.id}`), ` ${d.id} of ${d.user || '?'}, `,
    el('span', { class: 'js ns-' + d.state, title: dagStateText[d.state] || '' }, d.state), ` — ${nodeSummary(d.nodes || [])}`,
    d.ended_unix_ms ? `, ended ${since(d.ended_unix_ms)}` : '', ' ', all,
    el('span', { class: 'hint' }, ' Click a node to list its jobs.'));
  const g = $('#jdaggraph');
  const keep = g.firstElementChild?.dataset?.dag === d.id ? [g.scrollLeft, g.scrollTop] : null;
  g.replaceChildren(dagGraph(d, J));
  if (keep) [g.scrollLeft, g.scrollTop] = keep;
  if (!$('#jdaglegend').childElementCount) {
    $('#jdaglegend').replaceChildren(...NODE_STATES.map(s => el('span', { class: 'lg ns-' + s, title: nodeStateText[s] }, s)),
      el('span', { class: 'lgedge' }, '→ comes after'), el('span', { class: 'lgedge blocked' }, '⇢ after a node that failed'),
      el('span', { class: 'hint' }, 'n/m: its jobs completed, of all (its pre and post commands apart)'));
  }
}

// nodeSummary is a workflow's nodes by state: "2 completed, 1 failed, 1 waiting".
function nodeSummary(nodes) {
  const c = new Map();
  for (const n of nodes) c.set(n.state, (c.get(n.state) || 0) + 1);
  return NODE_STATES.filter(s => c.get(s)).map(s => `${c.get(s)} ${s}`).concat([...c.keys()].filter(s => !NODE_STATES.includes(s)).map(s => `${c.get(s)} ${s}`)).join(', ');
}

// dagLayout places a workflow's nodes: columns by depth (a node one right
// of the deepest node it comes after), each column's nodes ordered by the
// mean row of those they come after (fewer crossings), columns centred.
function dagLayout(nodes) {
  const by = new Map(nodes.map(n => [n.name, n]));
  const depth = new Map();
  // Iteratively (a chain may be long): a node's depth once its afters' are known.
  const pending = [...nodes];
  for (let guard = 0; pending.length && guard < nodes.length + 1; guard++) {
    for (let i = pending.length - 1; i >= 0; i--) {
      const n = pending[i], ps = (n.after || []).filter(a => by.has(a));
      if (ps.every(a => depth.has(a))) { depth.set(n.name, ps.reduce((m, a) => Math.max(m, depth.get(a) + 1), 0)); pending.splice(i, 1); }
    }
  }
  for (const n of pending) depth.set(n.name, 0); // a cycle: the queue refuses them; drawn anyway
  const cols = [];
  for (const n of nodes) (cols[depth.get(n.name)] ||= []).push(n);
  const row = new Map();
  cols.forEach((col, c) => {
    if (c > 0) {
      const key = n => { const ps = (n.after || []).filter(a => row.has(a)); return ps.length ? ps.reduce((s, a) => s + row.get(a), 0) / ps.length : Infinity; };
      const k = new Map(col.map(n => [n.name, key(n)]));
      col.sort((a, b) => { const x = k.get(a.name), y = k.get(b.name); return x === y ? 0 : x < y ? -1 : 1; });
    }
    col.forEach((n, i) => row.set(n.name, i + (Math.max(...cols.map(x => x?.length || 0)) - col.length) / 2));
  });
  const pos = new Map();
  for (const n of nodes) pos.set(n.name, { x: PAD + depth.get(n.name) * (BOX_W + GAP_X), y: PAD + row.get(n.name) * (BOX_H + GAP_Y) });
  const rows = Math.max(...cols.map(x => x?.length || 0));
  // lane: a y at which an edge crosses column c without crossing a box:
  // want itself if it is clear, else the gap above or below a box nearest it.
  const lane = (c, want) => {
    const ys = (cols[c] || []).map(n => pos.get(n.name).y);
    if (!ys.some(y => want > y - GAP_Y / 3 && want < y + BOX_H + GAP_Y / 3)) return want;
    const gaps = ys.flatMap(y => [y - GAP_Y / 2, y + BOX_H + GAP_Y / 2]);
    return gaps.reduce((b, g) => Math.abs(g - want) < Math.abs(b - want) ? g : b, gaps[0]);
  };
  return { pos, depth, lane, w: PAD * 2 + cols.length * (BOX_W + GAP_X) - GAP_X, h: PAD * 2 + rows * (BOX_H + GAP_Y) - GAP_Y };
}

// nodeCounts is a node's jobs by state, from the queue's list (its own
// jobs, the pre and post commands apart) if it holds them, else from the
// workflow's counts (which include them).
function nodeCounts(d, n, listed) {
  const mine = listed.get(d.id + '\n' + n.name);
  const by = new Map();
  if (mine && mine.length) for (const j of mine) by.set(jobState(j.state), (by.get(jobState(j.state)) || 0) + 1);
  else for (const [k, v] of Object.entries(n.jobs || {})) by.set(k, Number(v));
  const total = [...by.values()].reduce((s, v) => s + v, 0);
  return { by, total, done: by.get('completed') || 0 };
}

function dagGraph(d, J) {
  const nodes = d.nodes || [];
  if (nodes.length > DAG_MAX_DRAWN) {
    return el('p', { class: 'hint', 'data-dag': d.id }, `${nodes.length} nodes: too many to draw (${DAG_MAX_DRAWN} at most). ${nodeSummary(nodes)}. gridmgr dag status ${d.id} lists them.`);
  }
  const listed = new Map();
  for (const j of J.list) if (j.dag === d.id && !j.role) { const k = j.dag + '\n' + j.node; (listed.get(k) || listed.set(k, []).get(k)).push(j); }
  const { pos, depth, lane, w, h } = dagLayout(nodes);
  const state = new Map(nodes.map(n => [n.name, n.state]));
  const root = svg('svg', { width: w, height: h, viewBox: `0 0 ${w} ${h}`, class: 'dag', role: 'img', 'aria-label': `workflow ${d.name || d.id}: ${nodeSummary(nodes)}` });
  root.dataset.dag = d.id;
  root.append(svg('defs', {},
    svg('marker', { id: 'arr', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' }, svg('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrow' })),
    svg('marker', { id: 'arrbad', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' }, svg('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrow blocked' }))));
  const edges = svg('g', { class: 'edges' });
  for (const n of nodes) {
    const b = pos.get(n.name);
    for (const a of n.after || []) {
      const p = pos.get(a);
      if (!p) continue;
      const x1 = p.x + BOX_W, y1 = p.y + BOX_H / 2, x2 = b.x - 2, y2 = b.y + BOX_H / 2;
      // Through each column between them in a lane clear of its boxes,
      // a curve in each gap between columns.
      const pts = [[x1, y1]];
      const c1 = depth.get(a), c2 = depth.get(n.name);
      for (let c = c1 + 1; c < c2; c++) {
        const y = lane(c, y1 + (y2 - y1) * (c - c1) / (c2 - c1)), x = PAD + c * (BOX_W + GAP_X);
        pts.push([x, y], [x + BOX_W, y]);
      }
      pts.push([x2, y2]);
      let dpath = `M${x1},${y1}`;
      for (let i = 1; i < pts.length; i++) {
        const [xa, ya] = pts[i - 1], [xb, yb] = pts[i];
        if (i % 2 === 0) { dpath += ` L${xb},${yb}`; continue; } // across a column
        const m = (xb - xa) / 2;
        dpath += ` C${xa + m},${ya} ${xb - m},${yb} ${xb},${yb}`;
      }
      const bad = state.get(a) === 'failed' || state.get(a) === 'removed';
      const e = svg('path', { d: dpath, class: 'dedge' + (bad ? ' blocked' : ''), 'marker-end': bad ? 'url(#arrbad)' : 'url(#arr)' },
        svg('title', {}, `${n.name} comes after ${a}` + (bad ? ` (${a} ${state.get(a)}: ${n.name} will not run until it is rerun)` : '')));
      e.dataset.from = a;
      e.dataset.to = n.name;
      edges.append(e);
    }
  }
  root.append(edges);
  for (const n of nodes) {
    const p = pos.get(n.name), c = nodeCounts(d, n, listed);
    const on = J.pick && J.pick.dag === d.id && J.pick.node === n.name;
    const rest = [...c.by].filter(([k]) => k !== 'completed').map(([k, v]) => `${v} ${k}`).join(', ');
    const why = n.reason || '';
    let detail = n.state;
    if (n.state === 'running' || n.state === 'pre' || n.state === 'post' || n.state === 'held') detail += rest ? ': ' + rest : '';
    else if (n.state === 'waiting' && why) detail = why;
    else if (why) detail += ': ' + why.replace(/^[\w.-]+(\[\d+\])?: /, ''); // the job's id: in the tooltip and the list
    const g = svg('g', { class: `dnode ns-${n.state}` + (on ? ' on' : ''), transform: `translate(${p.x},${p.y})`, tabindex: 0 },
      svg('title', {}, [`${n.name} — ${nodeStateText[n.state] || n.state}`, why, c.total ? `jobs: ${[...c.by].map(([k, v]) => `${v} ${k}`).join(', ')}` : 'no jobs listed',
        n.cluster ? `cluster ${n.cluster}` : '', (n.after || []).length ? `after ${n.after.join(', ')}` : 'first: after no other node',
        'click: list its jobs below'].filter(Boolean).join('\n')),
      svg('rect', { width: BOX_W, height: BOX_H, rx: 6 }),
      svg('text', { x: 10, y: 20, class: 'nname' }, clip(n.name, c.total ? 18 : 26)),
      c.total ? svg('text', { x: BOX_W - 10, y: 20, class: 'ncount', 'text-anchor': 'end' }, `${c.done}/${c.total}`) : '',
      svg('text', { x: 10, y: 39, class: 'ndetail' }, clip(detail, 32)));
    g.dataset.node = n.name;
    g.dataset.state = n.state;
    const pickIt = () => { J.pick = on ? null : { dag: d.id, node: n.name }; renderJobs(); };
    g.addEventListener('click', pickIt);
    g.addEventListener('keydown', e => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); pickIt(); } });
    root.append(g);
  }
  return root;
}

// showJob shows a job's facts, log and results beside the table.
async function showJob(id) {
  const J = model.jobs, peer = J.peer;
  J.open = id;
  $('#jdetail').classList.remove('none');
  renderJobs();
  for (const tr of document.querySelectorAll('#jobtable tbody tr')) tr.classList.toggle('open', tr.dataset.job === id);
  const d = $('#jdetail');
  if (d.dataset.job !== id) { d.dataset.job = id; d.replaceChildren(el('h2', {}, id), el('p', { class: 'hint' }, 'loading…')); }
  let j;
  try {
    j = await api('/api/job?peer=' + encodeURIComponent(peer) + '&id=' + encodeURIComponent(id));
  } catch (e) {
    if (model.jobs.open !== id || model.jobs.peer !== peer) return;
    d.replaceChildren(el('h2', {}, id), el('p', { class: 'err' }, 'cannot read the job: ' + e.message));
    return;
  }
  if (model.jobs.open !== id || model.jobs.peer !== peer) return;
  d.replaceChildren(...jobDetails(j, J.name));
}

// logTime is the time of a job's log line i: with its date on the first
// line and where the date changes, else the time of day alone.
function logTime(log, i) {
  const t = fmtTime(log[i].time_unix_ms);
  return i > 0 && fmtTime(log[i - 1].time_unix_ms).slice(0, 10) === t.slice(0, 10) ? t.slice(11) : t;
}

function jobDetails(j, at) {
  const st = jobState(j.state);
  const out = [el('h2', {}, j.id, ' ', el('span', { class: 'js js-' + st }, st))];
  if (j.reason) out.push(el('p', { class: 'jreason js-' + st }, j.reason));
  const facts = [['name', j.name], ['user', j.user], ['submitted by', j.owner_peer ? el('span', { title: j.owner_peer }, shortPeer(j.owner_peer)) : ''],
    ['submitted to', at], ['where', j.manager ? j.manager + (j.reservation ? `, reservation ${j.reservation}` : '') : ''],
    ['submitted', j.submitted_unix_ms ? fmtTime(j.submitted_unix_ms) : ''], ['started', j.started_unix_ms ? fmtTime(j.started_unix_ms) : ''],
    ['ended', j.ended_unix_ms ? fmtTime(j.ended_unix_ms) : ''],
    ['tries', (j.tries || 0) + (j.moves ? `, moved ${j.moves} times (its host lost)` : '')], ['exit', j.exit || (j.exited ? `exit ${j.exit_code || 0}` : '')],
    ['used', j.cpu_seconds || Number(j.mem_bytes) ? `cpu ${(j.cpu_seconds || 0).toFixed(1)} s, mem ${bytes(j.mem_bytes)}` : ''],
    ['workflow', j.dag ? jobWorkflowText(j) : ''],
    ['priority', j.priority || ''], ['results to', j.output_dir]].filter(([, v]) => v !== '' && v !== undefined && v !== null);
  out.push(el('table', {}, ...facts.map(([k, v]) => el('tr', {}, el('td', { class: 'k' }, k), el('td', {}, v)))));
  const log = j.log || [];
  out.push(el('h3', {}, `Log (${log.length})`), log.length ? el('table', { class: 'joblog' },
    el('tr', {}, ...['time', 'type', 'try', 'manager', 'detail'].map(h => el('th', {}, h))),
    ...log.map((e, i) => el('tr', { class: 'ev-' + (e.type || '') }, el('td', { class: 't', title: fmtTime(e.time_unix_ms) }, logTime(log, i)), el('td', {}, e.type || ''),
      el('td', { class: 'num' }, e.try || ''), el('td', {}, e.manager || ''), el('td', {}, e.detail || '')))) : el('p', { class: 'hint' }, 'empty'));
  const res = j.results || [];
  const total = res.reduce((s, f) => s + Number(f.size || 0), 0);
  out.push(el('h3', {}, `Results (${res.length}${res.length ? ', ' + bytes(total) : ''})`), res.length ? el('table', {},
    el('tr', {}, el('th', {}, 'file'), el('th', {}, 'size')),
    ...res.map(f => el('tr', {}, el('td', { title: 'sha256 ' + (f.sha256 || '') }, f.path || ''), el('td', { class: 'num' }, bytes(f.size))))) :
    el('p', { class: 'hint' }, st === 'completed' || st === 'failed' ? 'none brought back' : 'none yet: results are brought back when it exits'));
  if (res.length) out.push(el('p', { class: 'hint' }, `Read-only here; the submitter fetches them with gridmgr job get ${j.id}.`));
  return out;
}

// ---- admin ----

async function runAdmin(ev) {
  ev.preventDefault();
  const tok = $('#atoken').value.trim();
  sessionStorage.setItem('gridmgr-token', tok);
  if (tok !== model.token) { model.token = tok; refreshSelf(); }
  const out = $('#aout');
  out.className = '';
  try {
    const rep = await api('/api/admin', { method: 'POST', headers: { 'Content-Type': 'application/json', 'Authorization': 'Bearer ' + tok },
      body: JSON.stringify({ command: $('#acmd').value }) });
    out.textContent = (rep.ok ? '' : 'refused: ') + (rep.output || '');
  } catch (e) {
    out.className = 'err';
    out.textContent = e.message;
  }
}

// refreshSelf asks who serves the page, with the token given in this tab
// if any: the header says admin only if the manager took the token.
async function refreshSelf() {
  try {
    const headers = model.token ? { 'Authorization': 'Bearer ' + model.token } : {};
    model.self = await api('/api/self', { headers });
    const s = model.self;
    $('#self').textContent = `served by ${s.name}`;
    const mode = $('#mode');
    mode.textContent = s.admin ? 'admin' : 'read-only';
    mode.className = s.admin ? 'admin' : 'ro';
    mode.title = s.admin ? 'the admin token given in the Admin tab is this manager\'s: changes are allowed'
      : s.admin_enabled ? 'give the admin token in the Admin tab to make changes' : 'this manager\'s web UI takes no changes (it has no admin token)';
  } catch (e) { $('#self').textContent = e.message; }
}

// ---- start ----

function showTab(tab) {
  model.tab = tab;
  for (const x of document.querySelectorAll('header nav button')) x.classList.toggle('on', x.dataset.tab === tab);
  for (const s of document.querySelectorAll('.tab')) s.classList.toggle('on', s.id === 'tab-' + tab);
  if (tab === 'grid' && cy) {
    cy.resize();
    if (model.laidOutHidden) { model.layoutKey = ''; render(); }
  }
  if (tab === 'resources') { renderUtil(); refreshUtil(); }
  if (tab === 'events') renderEvents();
  if (tab === 'jobs') { renderJobs(); refreshJobs(); }
}

function tabs() {
  for (const b of document.querySelectorAll('header nav button')) {
    b.onclick = () => { if (model.tab !== b.dataset.tab) { showTab(b.dataset.tab); navigate({ tab: b.dataset.tab }); } };
  }
  for (const th of document.querySelectorAll('#restable th[data-key]')) {
    th.onclick = () => { sortDir = sortKey === th.dataset.key ? -sortDir : 1; sortKey = th.dataset.key; renderUtil(); };
  }
}

async function start() {
  tabs();
  initGraph();
  model.hi = model.hmax = history.state?.i ?? 0; // a reload keeps its place
  history.replaceState({ i: model.hi }, '', location.hash || location.pathname);
  updateArrows();
  $('#back').onclick = () => { if (model.hi > 0) history.back(); };
  $('#forward').onclick = () => { if (model.hi < model.hmax) history.forward(); };
  $('#fit').onclick = () => { cy.fit(undefined, 30); model.userView = false; };
  $('#qform').onsubmit = runQuery;
  $('#aform').onsubmit = runAdmin;
  $('#jstate').append(...JOB_STATES.map(s => el('option', { value: s }, s)));
  $('#jform').onsubmit = e => e.preventDefault();
  $('#jstate').onchange = $('#juser').oninput = () => renderJobs();
  $('#jrefresh').onclick = refreshJobs;
  $('#jmgr').onchange = () => select($('#jmgr').value, true);
  model.token = sessionStorage.getItem('gridmgr-token') || '';
  $('#atoken').value = model.token;
  showTab(parseHash().tab);
  await refreshSelf();
  connectEvents();
  loadArchive();
  await refreshApps();
  await refreshTree();
  restore();
  if (model.tab === 'jobs') refreshJobs(); // the managers of the picker are known now
  setInterval(refreshTree, 5000);
  setInterval(refreshApps, 10000);
  // The managers' use is asked of them: only while the table is shown.
  setInterval(() => { if (model.tab === 'resources' && !document.hidden) refreshUtil(); }, 10000);
  setInterval(() => { if (model.tab === 'jobs' && !document.hidden) refreshJobs(); }, 10000);
}

start();
