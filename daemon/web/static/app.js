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

const model = {
  self: null,
  nodes: new Map(),     // peer id → {id, name, addr, state, parent, depth, kids}
  apps: [],
  util: new Map(),      // peer id → latest utilization event
  events: [],
  focus: null,          // peer id the level of detail centres on
  selected: null,
  hist: [], hpos: -1,
  lastEventAt: 0,
  layoutKey: '',
};

// Test and automation hooks: the model as it is now.
window.gridmgr = {
  nodes: () => [...model.nodes.values()].map(n => ({ id: n.id, name: n.name, state: n.state, parent: n.parent ? (model.nodes.get(n.parent)?.name ?? '') : '' })),
  edges: () => [...model.nodes.values()].filter(n => n.parent && model.nodes.has(n.parent)).map(n => [model.nodes.get(n.parent).name, n.name]),
  landscapeRows: () => [...document.querySelectorAll('#landscape tr[data-instance]')].map(tr => tr.getAttribute('data-instance')),
  visible: () => cy ? cy.nodes().length : 0,
  get lastEventAt() { return model.lastEventAt; },
  get ready() { return model.nodes.size > 0; },
};

const stateWord = s => ({ RELATION_STATE_DOWN: 'down', RELATION_STATE_SUSPECT: 'suspect', RELATION_STATE_CONNECTING: 'connecting' }[s] || 'up');

// ---- grid browser ----

let cy = null;
function initGraph() {
  cy = cytoscape({
    container: $('#cy'),
    wheelSensitivity: 0.3,
    minZoom: 0.05,
    style: [
      { selector: 'node', style: { 'label': 'data(label)', 'text-wrap': 'wrap', 'font-size': 10, 'text-valign': 'bottom', 'text-margin-y': 3,
        'background-color': '#3a3', 'width': 22, 'height': 22, 'min-zoomed-font-size': 7 } },
      { selector: 'node[state = "down"]', style: { 'background-color': '#d22', 'color': '#c00' } },
      { selector: 'node[state = "suspect"]', style: { 'background-color': '#e90' } },
      { selector: 'node[state = "connecting"]', style: { 'background-color': '#999' } },
      { selector: 'node.more', style: { 'shape': 'round-rectangle', 'background-color': '#69c', 'width': 40 } },
      { selector: 'node:selected', style: { 'border-width': 3, 'border-color': '#06c' } },
      { selector: 'edge', style: { 'width': 1.5, 'line-color': '#999', 'target-arrow-color': '#999', 'target-arrow-shape': 'triangle', 'curve-style': 'bezier' } },
      { selector: 'edge[state = "down"]', style: { 'line-color': '#d22', 'line-style': 'dashed', 'target-arrow-color': '#d22' } },
    ],
  });
  cy.on('tap', 'node', e => {
    const id = e.target.id();
    if (id.startsWith('more:')) { model.focus = id.slice(5); render(); return; }
    select(id, true);
  });
}

// applyTree merges a tree answer into the model: managers present take
// their place and state; managers no longer in it stay, shown down.
function applyTree(root) {
  const seen = new Set();
  const walk = (n, parent, depth) => {
    if (!n || !n.peer || seen.has(n.peer)) return;
    seen.add(n.peer);
    const rec = model.nodes.get(n.peer) || { id: n.peer };
    rec.name = n.name || n.peer.slice(-6);
    rec.addr = (n.addrs || [])[0] || '';
    rec.parent = parent;
    rec.depth = depth;
    rec.state = parent ? stateWord(n.state) : 'up';
    if (n.incomplete === 'down') rec.state = 'down';
    model.nodes.set(n.peer, rec);
    for (const c of n.children || []) walk(c, n.peer, depth + 1);
  };
  walk(root, null, 0);
  for (const rec of model.nodes.values()) if (!seen.has(rec.id)) rec.state = 'down';
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
    const label = [n.name, n.addr.replace(/^\/ip4\//, '').replace('/tcp/', ':'), apps.length ? apps.join(', ') : ''].filter(Boolean).join('\n');
    els.push({ group: 'nodes', data: { id, label, state: n.state } });
    if (n.parent && show.has(n.parent)) els.push({ group: 'edges', data: { id: 'e:' + n.parent + '>' + id, source: n.parent, target: id, state: n.state } });
  }
  for (const [id, k] of more) {
    els.push({ group: 'nodes', data: { id: 'more:' + id, label: '+' + k + ' managers', state: 'up' }, classes: 'more' });
    els.push({ group: 'edges', data: { id: 'e:more:' + id, source: id, target: 'more:' + id, state: 'up' } });
  }
  const key = els.map(e => e.data.id + (e.data.source ? '<' + e.data.source : '')).sort().join(',');
  if (key === model.layoutKey) {
    for (const e of els) { const x = cy.getElementById(e.data.id); if (x.nonempty()) x.data(e.data); }
  } else {
    model.layoutKey = key;
    cy.batch(() => { cy.elements().remove(); cy.add(els); });
    const roots = cy.nodes().filter(n => n.indegree() === 0);
    cy.layout({ name: 'breadthfirst', directed: true, roots, spacingFactor: 1.1, animate: false }).run();
    if (model.selected && cy.getElementById(model.selected).nonempty()) cy.getElementById(model.selected).select();
  }
  const total = model.nodes.size, downN = [...model.nodes.values()].filter(n => n.state === 'down').length;
  $('#gridsum').textContent = `${total} managers, ${downN} down` + (more.size ? ` (deep subtrees collapsed; click +N to open)` : '');
  renderLandscape();
}

async function select(id, push) {
  const n = model.nodes.get(id) || [...model.nodes.values()].find(x => x.name === id);
  if (!n) return;
  model.selected = n.id;
  model.focus = n.id;
  if (push) {
    model.hist = model.hist.slice(0, model.hpos + 1);
    model.hist.push(n.id);
    model.hpos = model.hist.length - 1;
    history.pushState({ id: n.id }, '', '#manager=' + encodeURIComponent(n.name));
  }
  render();
  const node = cy.getElementById(n.id);
  if (node.nonempty()) { cy.$(':selected').unselect(); node.select(); cy.animate({ center: { eles: node } }, { duration: 200 }); }
  $('#crumbs').textContent = crumbs(n);
  const d = $('#details');
  d.replaceChildren(el('h2', {}, n.name), el('p', { class: n.state === 'down' ? 'down' : '' }, `${n.state} · ${n.addr}`), el('p', { class: 'hint' }, 'loading…'));
  try {
    const m = await api('/api/manager?peer=' + encodeURIComponent(n.id));
    if (model.selected !== n.id) return;
    d.replaceChildren(...details(n, m));
  } catch (e) {
    d.replaceChildren(el('h2', {}, n.name), el('p', { class: 'err' }, 'cannot read its details: ' + e.message));
  }
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
  const out = [el('h2', {}, n.name), el('p', { class: n.state === 'down' ? 'down' : '' }, `${n.state} · ${n.addr} · ${n.id}`)];
  const st = m.status;
  if (st) {
    out.push(el('p', {}, `${st.hostname || ''} ${st.os || ''}/${st.arch || ''}, ${st.cpus || 0} cpus, ${bytes(st.memory_bytes)}, gridmgr ${st.version || ''}`));
    out.push(el('h3', {}, 'Relations'), table(['peer', 'role', 'state', 'rtt'], (st.relations || []).map(r => [r.name || r.peer.slice(-6), r.role === 'ROLE_SUPERIOR' ? 'superior' : 'inferior', stateWord(r.state), r.rtt_us ? (Number(r.rtt_us) / 1000).toFixed(2) + ' ms' : ''])));
  } else if (m.status_error) out.push(el('p', { class: 'err' }, m.status_error));
  const res = m.resources?.values;
  if (res) {
    out.push(el('h3', {}, 'Resources'), table(['cpus free', 'mem free', 'cpu use'], [[`${res.cpus_free || 0} / ${res.cpus || 0}`, `${bytes(res.mem_free)} / ${bytes(res.mem)}`, res.cpu_util >= 0 ? (100 * (res.cpu_util || 0)).toFixed(0) + '%' : '?']]));
  }
  const rv = m.reservations;
  if (rv) {
    out.push(el('h3', {}, `Reservations (${rv.live || 0} live)`), table(['id', 'state', 'amounts', 'user'], (rv.reservations || []).slice(0, 50).map(r => [r.id, (r.state || '').replace('RESERVATION_STATE_', '').toLowerCase(), (r.amounts || []).map(a => `${a.kind} ${a.kind === 'mem' ? bytes(a.n) : a.n}`).join(', '), r.user || ''])));
  }
  const inst = model.apps.filter(a => a.manager === n.name);
  out.push(el('h3', {}, 'Instances'), inst.length ? table(['instance', 'state', 'cpu s', 'mem'], inst.map(a => [a.id, a.state, (a.cpu_seconds || 0).toFixed(1), bytes(a.mem_bytes)])) : el('p', { class: 'hint' }, 'none'));
  if (st) out.push(el('h3', {}, 'Recent events'), el('ol', {}, ...(st.events || []).slice(-10).reverse().map(e => el('li', {}, `${e.name || ''}: ${e.what}`))));
  return out;
}

function go(delta) {
  const p = model.hpos + delta;
  if (p < 0 || p >= model.hist.length) return;
  model.hpos = p;
  select(model.hist[p], false);
  history.replaceState({ id: model.hist[p] }, '', '#manager=' + encodeURIComponent(model.nodes.get(model.hist[p])?.name || ''));
}

window.addEventListener('popstate', e => {
  const id = e.state?.id || decodeURIComponent((location.hash.match(/manager=([^&]*)/) || [])[1] || '');
  if (!id) return;
  const i = model.hist.lastIndexOf(id);
  if (i >= 0) model.hpos = i;
  select(id, false);
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
function utilRow(ev) {
  const u = ev.utilization || {};
  const free = k => Number((u.free || []).find(a => a.kind === k)?.n || 0);
  return { name: ev.manager, cpu: u.cpu_util ?? -1, cpus: free('cpus'), mem: free('mem'), res: u.reservations || 0, apps: `${u.running || 0}/${u.instances || 0}`, sub: u.subtree_managers || '', age: Number(ev.time_unix_ms || 0) };
}
function renderUtil() {
  const rows = [...model.util.values()].map(utilRow);
  rows.sort((a, b) => (a[sortKey] > b[sortKey] ? 1 : a[sortKey] < b[sortKey] ? -1 : 0) * sortDir);
  $('#restable tbody').replaceChildren(...rows.map(r => el('tr', {},
    el('td', {}, r.name), el('td', {}, r.cpu >= 0 ? (100 * r.cpu).toFixed(0) + '%' : '?'), el('td', {}, r.cpus), el('td', {}, bytes(r.mem)),
    el('td', {}, r.res), el('td', {}, r.apps), el('td', {}, r.sub), el('td', {}, r.age ? Math.round((Date.now() - r.age) / 1000) + ' s ago' : ''))));
}
async function refreshUtil() {
  try { for (const ev of (await api('/api/utilization')).samples || []) model.util.set(ev.peer, ev); renderUtil(); } catch (e) { }
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

function eventText(ev) {
  const kind = (ev.kind || '').replace('EVENT_KIND_', '').toLowerCase();
  const t = new Date(Number(ev.time_unix_ms || 0)).toLocaleTimeString();
  const b = ev.relation || ev.reservation || ev.app || ev.admin || ev.utilization || {};
  const what = b.name || b.id || b.instance || b.command || '';
  return `${t} ${ev.manager} ${kind}/${ev.type} ${what} ${b.cause || b.reason || b.state || ''}`;
}

let treeTimer = null, appsTimer = null;
const soon = (fn, ms, which) => {
  if (which === 'tree') { clearTimeout(treeTimer); treeTimer = setTimeout(fn, ms); }
  else { clearTimeout(appsTimer); appsTimer = setTimeout(fn, ms); }
};

function onEvent(ev) {
  model.lastEventAt = Date.now();
  if (ev.kind !== 'EVENT_KIND_UTILIZATION') {
    model.events.unshift(ev);
    if (model.events.length > 200) model.events.pop();
    $('#events').prepend(el('li', {}, eventText(ev)));
    while ($('#events').children.length > 200) $('#events').lastChild.remove();
  }
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
    case 'EVENT_KIND_UTILIZATION':
      model.util.set(ev.peer, ev);
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
  try { applyTree(await api('/api/tree')); } catch (e) { $('#gridsum').textContent = 'cannot read the tree: ' + e.message; }
}

// ---- admin ----

async function runAdmin(ev) {
  ev.preventDefault();
  const tok = $('#atoken').value.trim();
  sessionStorage.setItem('gridmgr-token', tok);
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

// ---- start ----

function tabs() {
  for (const b of document.querySelectorAll('header nav button')) {
    b.onclick = () => {
      for (const x of document.querySelectorAll('header nav button')) x.classList.toggle('on', x === b);
      for (const s of document.querySelectorAll('.tab')) s.classList.toggle('on', s.id === 'tab-' + b.dataset.tab);
      if (b.dataset.tab === 'grid' && cy) cy.resize();
      if (b.dataset.tab === 'resources') refreshUtil();
    };
  }
  for (const th of document.querySelectorAll('#restable th[data-key]')) {
    th.onclick = () => { sortDir = sortKey === th.dataset.key ? -sortDir : 1; sortKey = th.dataset.key; renderUtil(); };
  }
}

async function start() {
  tabs();
  initGraph();
  $('#back').onclick = () => go(-1);
  $('#forward').onclick = () => go(1);
  $('#fit').onclick = () => cy.fit(undefined, 30);
  $('#qform').onsubmit = runQuery;
  $('#aform').onsubmit = runAdmin;
  $('#atoken').value = sessionStorage.getItem('gridmgr-token') || '';
  try {
    model.self = await api('/api/self');
    $('#self').textContent = `served by ${model.self.name}` + (model.self.admin ? '' : ' (read-only)');
  } catch (e) { $('#self').textContent = e.message; }
  connectEvents();
  await refreshApps();
  await refreshTree();
  const want = decodeURIComponent((location.hash.match(/manager=([^&]*)/) || [])[1] || '');
  if (want) select(want, false);
  setInterval(refreshTree, 5000);
  setInterval(refreshApps, 10000);
  setInterval(refreshUtil, 10000);
  refreshUtil();
}

start();
