import * as api from './api.js';
import { STATES, cell, paused, nodeReady } from './state.js';

const $ = (id) => document.getElementById(id);
const ROW = 28;
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined) continue;
    if (k === 'class') e.className = v; else if (k.startsWith('on')) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
};

const fleet = { nodes: null, dss: null, pods: null, mirrors: [] };
let rows = [];        // [{group}] or [{node}]
let columns = [];     // DaemonSets shown
let cells = new Map(); // node name -> [cell per column]
let focus = { r: 0, c: 0 };
let scheduled = false;

function showError(e) { $('error').textContent = e ? String(e.message || e) : ''; if (e?.code === 401) toLogin(e.message); }

function toLogin(msg = '') {
  for (const m of fleet.mirrors) m.stop();
  fleet.mirrors = [];
  $('fleet').hidden = true; $('logout').hidden = true; $('who').textContent = '';
  $('login').hidden = false; $('login-error').textContent = msg; $('token').focus();
}

async function start(user) {
  $('who').textContent = `signed in as ${user}`;
  $('login').hidden = true; $('fleet').hidden = false; $('logout').hidden = false;
  fleet.nodes = new api.Mirror('/api/v1/nodes', nodeChanged, showError);
  fleet.dss = new api.Mirror('/apis/apps/v1/daemonsets', dsChanged, showError);
  fleet.pods = new api.Mirror('/api/v1/pods', podChanged, showError);
  fleet.mirrors = [fleet.nodes, fleet.dss, fleet.pods];
  for (const m of fleet.mirrors) m.run();
  $('grid').focus();
}

// What the next frame recomputes: everything (full), or only the rows of
// the nodes whose node or pods changed (dirty). During a rollout the watch
// brings hundreds of pod events a second; each frame then costs the cells
// of the nodes they touched, not the whole fleet's.
let full = true;
const dirty = new Set();
const podsOn = new Map(); // node name -> Map(pod key -> pod), from the pods mirror

const sameJSON = (a, b) => JSON.stringify(a ?? null) === JSON.stringify(b ?? null);

// Each mirror reports change(prev, next) for a watch event, change(null)
// when it (re)listed.
function nodeChanged(prev, next) {
  if (prev === null) full = true;
  else if (!prev || !next || !sameJSON(prev.metadata.labels, next.metadata.labels)) full = true; // rows and groups change
  else dirty.add(next.metadata.name);
  schedule();
}

function dsChanged(prev, next) {
  // A status update changes no cell: the cells follow the pods.
  if (prev && next && prev.metadata.generation === next.metadata.generation &&
      sameJSON(prev.metadata.annotations, next.metadata.annotations)) return;
  full = true;
  schedule();
}

function podChanged(prev, next) {
  if (prev === null) {
    podsOn.clear();
    for (const [k, p] of fleet.pods.items) indexPod(k, p, true);
    full = true;
  } else {
    for (const p of [prev, next]) {
      if (!p?.spec.nodeName) continue;
      dirty.add(p.spec.nodeName);
    }
    if (prev) indexPod(fleet.pods.key(prev), prev, false);
    if (next) indexPod(fleet.pods.key(next), next, true);
  }
  schedule();
}

function indexPod(k, p, add) {
  const n = p.spec.nodeName;
  if (!n) return;
  if (!podsOn.has(n)) podsOn.set(n, new Map());
  if (add) podsOn.get(n).set(k, p); else podsOn.get(n).delete(k);
}

function schedule() {
  if (scheduled) return;
  scheduled = true;
  requestAnimationFrame(() => { scheduled = false; compute(); render(); });
}

function filters() {
  const [lk, lv] = $('label').value.split('=').map((s) => s.trim());
  return { q: $('search').value.trim().toLowerCase(), groupKey: $('group').value.trim(), lk, lv,
    want: $('state').value, tainted: $('tainted').checked };
}

// cellsOf is node n's cells, one per column, or null when a filter hides it.
function cellsOf(n, f, dsMatch, now) {
  if (f.q && !dsMatch && !n.metadata.name.toLowerCase().includes(f.q)) return null;
  const nl = n.metadata.labels || {};
  if (f.lk && !(f.lv === undefined ? Object.hasOwn(nl, f.lk) : nl[f.lk] === f.lv)) return null;
  if (f.tainted && !(n.spec?.taints || []).length) return null;
  const byOwner = new Map();
  for (const p of podsOn.get(n.metadata.name)?.values() || []) {
    const ref = (p.metadata.ownerReferences || []).find((r) => r.controller && r.kind === 'DaemonSet');
    if (!ref) continue;
    if (!byOwner.has(ref.uid)) byOwner.set(ref.uid, []);
    byOwner.get(ref.uid).push(p);
  }
  const cs = columns.map((d) => cell(d, n, byOwner.get(d.metadata.uid) || [], now));
  if (f.want && !cs.some((c) => c.state === f.want || (f.want === 'problem' && (c.state === 'failing' || c.state === 'unreachable')))) return null;
  return cs;
}

let dsMatched = false;
let rowOf = new Map(); // node name -> index in rows
const counts = new Map(); // state -> cells in it, over the shown rows

function countCells(cs, sign) {
  for (const c of cs) counts.set(c.state, (counts.get(c.state) || 0) + sign);
}

// compute derives the rows, columns and cells from the mirrors and filters:
// all of them after a list, a filter or a DaemonSet change, else only the
// dirty nodes' rows (falling back to all when a node appears, goes, or
// enters or leaves the filter).
function compute() {
  if (!fleet.nodes?.synced || !fleet.dss?.synced || !fleet.pods?.synced) return;
  const f = filters();
  const now = Date.now();
  if (!full) {
    for (const name of dirty) {
      const n = fleet.nodes.items.get('/' + name);
      const was = cells.get(name);
      const cs = n ? cellsOf(n, f, dsMatched, now) : null;
      if (!was && !cs) continue;
      if (!was || !cs) { full = true; break; }
      countCells(was, -1);
      countCells(cs, 1);
      cells.set(name, cs);
      rows[rowOf.get(name)].node = n;
    }
  }
  dirty.clear();
  if (full) computeAll(f, now);
  full = false;
  const shown = cells.size;
  $('counts').textContent = `${shown} nodes × ${columns.length} DaemonSets · ` +
    Object.keys(STATES).filter((s) => counts.get(s) > 0).map((s) => `${counts.get(s)} ${STATES[s].text}`).join(', ');
  focus.r = Math.min(focus.r, Math.max(rows.length - 1, 0));
  focus.c = Math.min(focus.c, Math.max(columns.length - 1, 0));
  // A cell waiting for minReadySeconds turns available with time, not with an event.
  if (columns.some((d) => d.spec.minReadySeconds) && !minReadyTimer) {
    minReadyTimer = setTimeout(() => { minReadyTimer = null; full = true; schedule(); }, 1000);
  }
}
let minReadyTimer = null;

function computeAll(f, now) {
  const dss = [...fleet.dss.items.values()].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
  const dsMatch = dss.filter((d) => d.metadata.name.toLowerCase().includes(f.q));
  dsMatched = !!(f.q && dsMatch.length);
  // Searching a DaemonSet's name keeps every node and that column.
  columns = dsMatched ? dsMatch : dss;
  const keys = new Set();
  cells = new Map();
  counts.clear();
  const shown = [];
  for (const n of fleet.nodes.items.values()) {
    Object.keys(n.metadata.labels || {}).forEach((k) => keys.add(k));
    const cs = cellsOf(n, f, dsMatched, now);
    if (!cs) continue;
    cells.set(n.metadata.name, cs);
    countCells(cs, 1);
    shown.push(n);
  }
  const group = (n) => (f.groupKey ? (n.metadata.labels || {})[f.groupKey] ?? '(none)' : '');
  shown.sort((a, b) => group(a).localeCompare(group(b)) || a.metadata.name.localeCompare(b.metadata.name));
  rows = [];
  rowOf = new Map();
  let last = null;
  for (const n of shown) {
    if (f.groupKey && group(n) !== last) { last = group(n); rows.push({ group: `${f.groupKey}=${last}` }); }
    rowOf.set(n.metadata.name, rows.length);
    rows.push({ node: n });
  }
  const dl = $('label-keys');
  if (dl.childElementCount !== keys.size) dl.replaceChildren(...[...keys].sort().map((k) => el('option', { value: k })));
}

// renderHead keeps one header cell per column, rebuilt only when the
// columns change; a DaemonSet update changes its cell's text in place (so
// a click is not lost to a redraw either).
let headKey = '';
let headEls = [];
function renderHead() {
  const key = columns.map((d) => d.metadata.uid).join();
  if (key !== headKey) {
    headKey = key;
    headEls = columns.map((d) => el('div', {
      class: 'hcell ds', role: 'columnheader', title: `${d.metadata.namespace}/${d.metadata.name}`,
      onclick: () => showDaemonSet(fleet.dss.items.get(fleet.dss.key(d)) || d),
    }));
    $('grid-head').replaceChildren(el('div', { class: 'hcell', role: 'columnheader' }, 'node'), ...headEls);
  }
  columns.forEach((d, i) => {
    const text = (paused(d) ? 'paused · ' : '') + d.metadata.name;
    if (headEls[i].textContent !== text) headEls[i].textContent = text;
  });
}

// render draws only the rows in view (virtualised): a fleet of thousands
// of nodes costs the DOM of one screen. Rows and cells are kept and changed
// in place (keyed by node), so a frame's DOM work is the cells that changed,
// and an element under the pointer is not replaced between a press and its
// click.
const rowEls = new Map(); // row key -> {el, sig, cells: [{el, sig}]}
function render() {
  renderHead();
  const grid = $('grid');
  const spacer = rows.length * ROW + 'px';
  if ($('grid-spacer').style.height !== spacer) $('grid-spacer').style.height = spacer;
  const first = Math.max(0, Math.floor((grid.scrollTop) / ROW) - 5);
  const last = Math.min(rows.length, first + Math.ceil(grid.clientHeight / ROW) + 10);
  const keep = new Set();
  const parent = $('grid-rows');
  let prev = null; // the rows stay in the DOM in display order (screen readers)
  for (let r = first; r < last; r++) {
    const row = rows[r];
    const key = row.group ? 'g:' + row.group : 'n:' + row.node.metadata.name;
    keep.add(key);
    let e = rowEls.get(key);
    if (!e) {
      e = { el: el('div', { class: row.group ? 'row group' : 'row', role: 'row' }), sig: null, cells: [] };
      rowEls.set(key, e);
    }
    const at = prev ? prev.nextSibling : parent.firstChild;
    if (at !== e.el) parent.insertBefore(e.el, at);
    prev = e.el;
    const top = r * ROW + 'px';
    if (e.el.style.top !== top) e.el.style.top = top;
    if (row.group) {
      if (e.sig !== row.group) { e.el.textContent = row.group; e.sig = row.group; }
      continue;
    }
    fillRow(e, row.node, r);
  }
  for (const [k, e] of rowEls) if (!keep.has(k)) { e.el.remove(); rowEls.delete(k); }
  const f = document.querySelector(`.cell[data-r="${focus.r}"][data-c="${focus.c}"]`);
  if (f && grid.contains(document.activeElement) && document.activeElement !== f && document.activeElement.classList.contains('cell')) f.focus();
}

// fillRow brings a node's row up to date, touching only what changed.
function fillRow(e, n, r) {
  const name = n.metadata.name;
  const nr = nodeReady(n);
  const label = (nr && nr.status !== 'True' ? '⚠ ' : '') + name + ((n.spec?.taints || []).length ? ' ⛔' : '');
  if (e.sig !== label) {
    if (!e.name) { e.name = el('div', { class: 'name', role: 'rowheader' }); e.el.prepend(e.name); }
    e.name.textContent = label;
    e.el.dataset.node = name;
    e.sig = label;
  }
  const cs = cells.get(name);
  while (e.cells.length > cs.length) e.cells.pop().el.remove();
  while (e.cells.length < cs.length) {
    const c = { el: el('div', { role: 'gridcell' }), sig: null };
    e.cells.push(c);
    e.el.append(c.el);
  }
  cs.forEach((c, i) => {
    const ds = columns[i].metadata.name;
    const focused = r === focus.r && i === focus.c;
    const sig = `${r}\u0000${ds}\u0000${c.state}\u0000${c.reason}\u0000${focused}`;
    const ce = e.cells[i];
    if (ce.sig === sig) return;
    ce.sig = sig;
    const s = STATES[c.state];
    const x = ce.el;
    x.className = `cell s-${c.state}`;
    x.tabIndex = focused ? 0 : -1;
    x.dataset.state = c.state; x.dataset.ds = ds; x.dataset.r = r; x.dataset.c = i;
    x.title = `${ds} on ${name}: ${s.text} — ${c.reason}`;
    x.setAttribute('aria-label', `${ds} on ${name}: ${s.text}, ${c.reason}`);
    x.textContent = `${s.icon} ${c.state === 'failing' ? c.reason.replace(/^container \S+ /, '') : s.text}`;
  });
}

// One listener for every row: a cell opens its pod, a name its node.
$('grid-rows').addEventListener('click', (e) => {
  const c = e.target.closest('.cell');
  if (c) { focus = { r: Number(c.dataset.r), c: Number(c.dataset.c) }; openCell(); return; }
  const n = e.target.closest('.name');
  const node = n && fleet.nodes.items.get('/' + n.parentElement.dataset.node);
  if (node) showNode(node);
});

function moveFocus(dr, dc) {
  let r = focus.r + dr;
  while (rows[r]?.group) r += dr || 1;
  if (r < 0 || r >= rows.length) return;
  focus = { r, c: Math.max(0, Math.min(columns.length - 1, focus.c + dc)) };
  const grid = $('grid');
  if (r * ROW < grid.scrollTop) grid.scrollTop = r * ROW;
  if ((r + 2) * ROW > grid.scrollTop + grid.clientHeight) grid.scrollTop = (r + 2) * ROW - grid.clientHeight;
  render();
  document.querySelector(`.cell[data-r="${focus.r}"][data-c="${focus.c}"]`)?.focus();
}

function openCell() {
  const row = rows[focus.r];
  if (!row?.node) return;
  const c = cells.get(row.node.metadata.name)[focus.c];
  if (c.pod) showPod(columns[focus.c].metadata.namespace, c.pod);
  else showNode(row.node);
}

$('grid').addEventListener('keydown', (e) => {
  const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1],
    PageUp: [-10, 0], PageDown: [10, 0] };
  if (moves[e.key]) { e.preventDefault(); if (rows[focus.r]?.group) focus.r++; moveFocus(...moves[e.key]); }
  else if (e.key === 'Enter') { e.preventDefault(); openCell(); }
  else if (e.key === 'Home') { e.preventDefault(); focus.r = 0; moveFocus(0, -columns.length); }
});
$('grid').addEventListener('focus', (e) => {
  if (e.target !== $('grid')) return;
  // Keep the view: the focused cell moves to the first row on screen if
  // the last one scrolled away.
  const grid = $('grid');
  if (focus.r * ROW < grid.scrollTop || (focus.r + 1) * ROW > grid.scrollTop + grid.clientHeight) {
    focus.r = Math.min(Math.ceil(grid.scrollTop / ROW), Math.max(rows.length - 1, 0));
  }
  moveFocus(0, 0);
});
$('grid').addEventListener('scroll', () => render(), { passive: true });
for (const id of ['search', 'group', 'label', 'state', 'tainted']) $(id).addEventListener('input', () => { full = true; schedule(); });

// ---- details panels ----

let detailCtl = null;

function panel(title, ...kids) {
  detailCtl?.abort();
  detailCtl = new AbortController();
  $('details-body').replaceChildren(el('h2', {}, title), ...kids);
  $('details').hidden = false;
  $('details').focus();
  return detailCtl.signal;
}
function closeDetails() { detailCtl?.abort(); $('details').hidden = true; $('grid').focus(); }
$('details-close').addEventListener('click', closeDetails);
document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && !$('details').hidden && !$('confirm').open) closeDetails(); });

const table = (head, body) => el('table', {}, el('tr', {}, ...head.map((h) => el('th', {}, h))),
  ...body.map((r) => el('tr', {}, ...r.map((c) => el('td', {}, c ?? '')))));
const kv = (o) => table(['key', 'value'], Object.entries(o || {}).map(([k, v]) => [k, String(v)]));

async function eventsFor(kind, ns, name) {
  const sel = encodeURIComponent(`involvedObject.kind=${kind},involvedObject.name=${name}`);
  const path = ns ? `/api/v1/namespaces/${ns}/events?fieldSelector=${sel}` : `/api/v1/events?fieldSelector=${sel}`;
  try {
    const l = await api.get(path);
    const items = l.items.sort((a, b) => (b.lastTimestamp || b.eventTime || '').localeCompare(a.lastTimestamp || a.eventTime || '')).slice(0, 20);
    return table(['last seen', 'type', 'reason', 'message'], items.map((e) => [e.lastTimestamp || e.eventTime, e.type, e.reason, e.message]));
  } catch (e) { return el('p', { class: 'error' }, String(e.message)); }
}

// confirmPlan shows what a change will do and waits for the user: it
// resolves to the chosen options ({key: checked}) on "Confirm", or null.
// options are checkboxes the plan depends on; plan(opts) returns
// {text, ok}, and "Confirm" is enabled only while ok.
async function confirmPlan(title, plan, options = []) {
  $('confirm-title').textContent = title;
  const boxes = options.map((o) => el('input', { type: 'checkbox', id: `opt-${o.key}` }));
  $('confirm-options').replaceChildren(...options.map((o, i) => el('label', {}, boxes[i], ' ' + o.label)));
  const update = () => {
    const opts = Object.fromEntries(options.map((o, i) => [o.key, boxes[i].checked]));
    const p = plan(opts);
    $('confirm-plan').textContent = p.text;
    $('confirm-ok').disabled = !p.ok;
    return opts;
  };
  for (const b of boxes) b.addEventListener('change', update);
  update();
  const dlg = $('confirm');
  dlg.returnValue = '';
  dlg.showModal();
  await new Promise((r) => dlg.addEventListener('close', r, { once: true }));
  const opts = update();
  return dlg.returnValue === 'ok' && plan(opts).ok ? opts : null;
}

// act runs a change after the user confirmed what it will do: the change
// is first sent as a dry run (dryRun=All), and the confirmation shows it.
async function act(title, method, path, body, describe, after) {
  const sep = path.includes('?') ? '&' : '?';
  const status = el('p', { class: 'error', role: 'alert' });
  $('details-body').append(status);
  let plan;
  try {
    const preview = await api.request(method, `${path}${sep}dryRun=All`, body);
    plan = describe(preview);
  } catch (e) { status.textContent = `${title} refused: ${e.message}`; return; }
  if (!await confirmPlan(title, () => ({ text: plan, ok: true }))) { status.textContent = `${title}: cancelled, nothing changed`; return; }
  try {
    await api.request(method, path, body);
    status.textContent = `${title}: done`;
    after?.();
  } catch (e) { status.textContent = `${title} refused: ${e.message}`; }
}

async function showNode(n) {
  const name = n.metadata.name;
  const cond = (n.status?.conditions || []).map((c) => [c.type, c.status, c.reason, c.message]);
  const pods = [...fleet.pods.items.values()].filter((p) => p.spec.nodeName === name)
    .map((p) => el('a', { href: '#', onclick: (e) => { e.preventDefault(); showPod(p.metadata.namespace, p.metadata.name); } }, `${p.metadata.namespace}/${p.metadata.name} (${p.status?.phase})`));
  // The button offers the opposite of the node's state, and turns over
  // once a cordon, an uncordon or a drain (drainNode) has been applied.
  const cordon = el('button', { type: 'button', id: 'act-cordon' });
  cordon.showState = (unsched) => {
    cordon.textContent = unsched ? 'Uncordon' : 'Cordon';
    cordon.onclick = () => act(`${unsched ? 'Uncordon' : 'Cordon'} node ${name}`, 'PATCH', `/api/v1/nodes/${name}`, { spec: { unschedulable: unsched ? null : true } },
      () => unsched ? `Node ${name} accepts new pods again.` : `Node ${name} is marked unschedulable: no new pods are placed on it; DaemonSet pods stay.`,
      () => cordon.showState(!unsched));
  };
  cordon.showState(!!n.spec?.unschedulable);
  const drain = el('button', { type: 'button', id: 'act-drain', onclick: () => drainNode(name) }, 'Drain');
  panel(`Node ${name}`, el('div', { class: 'actions' }, cordon, drain),
    el('h3', {}, 'Labels'), kv(n.metadata.labels),
    el('h3', {}, 'Taints'), table(['key', 'value', 'effect'], (n.spec?.taints || []).map((t) => [t.key, t.value, t.effect])),
    el('h3', {}, 'Conditions'), table(['type', 'status', 'reason', 'message'], cond),
    el('h3', {}, 'Capacity'), kv(n.status?.capacity),
    el('h3', {}, 'Pods'), el('ul', {}, ...pods.map((a) => el('li', {}, a))),
    el('h3', {}, 'Recent events'), await eventsFor('Node', '', name));
}

// ---- drain: what `everynode drain NODE --ignore-daemonsets` does ----

const podPath = (p) => `/api/v1/namespaces/${p.metadata.namespace}/pods/${p.metadata.name}`;
const podID = (p) => `${p.metadata.namespace}/${p.metadata.name}`;
const deleteOptions = (p) => ({ kind: 'DeleteOptions', apiVersion: 'v1', preconditions: { uid: p.metadata.uid } });

// drainKinds sorts a node's pods with kubectl's drain filters, in kubectl's
// order: already deleting, DaemonSet (its DaemonSet must exist), static
// (mirror), local storage (emptyDir), no controller.
async function drainKinds(pods) {
  const dsMissing = new Map(); // "ns/name" -> '' or the API's 404 message
  const out = [];
  for (const p of pods) {
    const ref = (p.metadata.ownerReferences || []).find((r) => r.controller);
    const finished = p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed';
    const emptyDir = (p.spec.volumes || []).some((v) => v.emptyDir);
    let kind = 'delete', why = '';
    if (p.metadata.deletionTimestamp) kind = 'going';
    else if (ref?.kind === 'DaemonSet') {
      const k = `${p.metadata.namespace}/${ref.name}`;
      if (!dsMissing.has(k)) {
        try {
          await api.get(`/apis/apps/v1/namespaces/${p.metadata.namespace}/daemonsets/${ref.name}`);
          dsMissing.set(k, '');
        } catch (e) { if (e.code !== 404) throw e; dsMissing.set(k, e.message); }
      }
      why = dsMissing.get(k);
      kind = why ? 'orphan' : 'daemon';
    } else if (p.metadata.annotations?.['kubernetes.io/config.mirror']) kind = 'mirror';
    else if (emptyDir && !finished) kind = ref ? 'emptydir' : 'emptydir-unmanaged';
    else if (!ref && !finished) kind = 'unmanaged';
    out.push({ pod: p, kind, why });
  }
  return out;
}

const DRAIN_FORCE = 'pods that declare no controller: they are not recreated anywhere (like --force)';
const DRAIN_EMPTYDIR = 'pods with emptyDir volumes: their data is lost (like --delete-emptydir-data)';

// drainVerdict is what the drain does with one pod given the options:
// {del} deletes it, warn groups it in a "left alone"/"warning" line,
// fatal refuses the whole drain.
function drainVerdict(v, o) {
  switch (v.kind) {
    case 'going': return { warn: 'already terminating' };
    case 'daemon': return { warn: 'DaemonSet-managed: left running (they belong on every node, as with kubectl drain --ignore-daemonsets)' };
    case 'mirror': return { warn: 'static (mirror) pods: left alone, the node\'s agent owns them' };
    case 'orphan': return o.force ? { del: true, warn: v.why } : { fatal: `${v.why}: tick "${DRAIN_FORCE}" to delete them` };
    case 'emptydir':
    case 'emptydir-unmanaged':
      if (!o.emptydir) return { fatal: `pods with local storage: tick "${DRAIN_EMPTYDIR}"` };
      if (v.kind === 'emptydir-unmanaged' && !o.force) return { fatal: `pods that declare no controller: tick "${DRAIN_FORCE}"` };
      return { del: true, warn: 'deleting pods with local storage' };
    case 'unmanaged': return o.force ? { del: true, warn: 'deleting pods that declare no controller' } : { fatal: `pods that declare no controller: tick "${DRAIN_FORCE}"` };
  }
  return { del: true };
}

function drainPlanText(name, kinds, o) {
  const del = [], warn = new Map(), fatal = new Map();
  const add = (m, k, id) => { if (!m.has(k)) m.set(k, []); m.get(k).push(id); };
  for (const v of kinds) {
    const d = drainVerdict(v, o);
    if (d.del) del.push(podID(v.pod));
    if (d.warn) add(warn, d.warn, podID(v.pod));
    if (d.fatal) add(fatal, d.fatal, podID(v.pod));
  }
  const lines = [`1. Cordon ${name}: it is marked unschedulable, no new pod is placed on it.`,
    del.length ? `2. Delete ${del.length} pod(s) on it and wait until they are gone (deleted, not evicted: everynode has no eviction API or PodDisruptionBudgets; a controller recreates its pods elsewhere):\n   ${del.join('\n   ')}`
      : '2. No pod to delete.'];
  for (const [k, ids] of warn) lines.push(`${k}: ${ids.join(', ')}`);
  if (fatal.size) {
    lines.push('', 'The drain cannot go ahead; nothing has changed:');
    for (const [k, ids] of fatal) lines.push(`cannot delete ${k}: ${ids.join(', ')}`);
  } else lines.push('', `Uncordon ${name} when the maintenance is done.`);
  return { text: lines.join('\n'), ok: !fatal.size, del };
}

// drainNode cordons a node and deletes its pods that are not DaemonSet
// pods, after the user confirmed the plan. The cordon and every deletion
// are first sent as dry runs with the user's own credentials, so a user who
// may not do them is refused before anything changes.
async function drainNode(name) {
  const title = `Drain node ${name}`;
  const status = el('p', { class: 'error', role: 'alert', id: 'drain-status' });
  $('details-body').append(status);
  const signal = detailCtl.signal;
  let kinds;
  try {
    await api.request('PATCH', `/api/v1/nodes/${name}?dryRun=All`, { spec: { unschedulable: true } });
    const l = await api.get(`/api/v1/pods?fieldSelector=${encodeURIComponent('spec.nodeName=' + name)}`);
    kinds = await drainKinds(l.items);
    const all = { force: true, emptydir: true };
    for (const v of kinds) {
      if (drainVerdict(v, all).del) await api.request('DELETE', `${podPath(v.pod)}?dryRun=All`, deleteOptions(v.pod), 'application/json');
    }
  } catch (e) { status.textContent = `${title} refused: ${e.message}`; return; }
  const opts = await confirmPlan(title, (o) => drainPlanText(name, kinds, o),
    [{ key: 'force', label: `Also delete ${DRAIN_FORCE}` }, { key: 'emptydir', label: `Also delete ${DRAIN_EMPTYDIR}` }]);
  if (!opts) { status.textContent = `${title}: cancelled, nothing changed`; return; }
  const { del } = drainPlanText(name, kinds, opts);
  const gone = kinds.filter((v) => del.includes(podID(v.pod))).map((v) => v.pod);
  try {
    await api.request('PATCH', `/api/v1/nodes/${name}`, { spec: { unschedulable: true } });
    if (!signal.aborted) $('act-cordon')?.showState(true);
    status.textContent = `${title}: node/${name} cordoned; deleting ${gone.length} pod(s)…`;
    for (const p of gone) {
      try { await api.request('DELETE', podPath(p), deleteOptions(p), 'application/json'); } catch (e) { if (e.code !== 404) throw e; }
    }
  } catch (e) { status.textContent = `${title} stopped: ${e.message} (the node stays cordoned: fix the cause and drain again, or uncordon it)`; return; }
  // Wait (as the CLI does) until every deleted pod has left the watch.
  for (;;) {
    const left = gone.filter((p) => fleet.pods.items.get(podID(p))?.metadata.uid === p.metadata.uid);
    if (!left.length) break;
    status.textContent = `${title}: node/${name} cordoned; waiting for ${left.length} of ${gone.length} pod(s) to go: ${left.map(podID).join(', ')}`;
    await new Promise((r) => setTimeout(r, 250));
    if (signal.aborted) return;
  }
  status.textContent = `${title}: done, node/${name} drained (${gone.length} pod(s) deleted; it stays cordoned until you uncordon it)`;
}

function dsPath(d) { return `/apis/apps/v1/namespaces/${d.metadata.namespace}/daemonsets/${d.metadata.name}`; }

async function showDaemonSet(d) {
  const st = d.status || {};
  const desired = st.desiredNumberScheduled || 0;
  const pct = desired ? Math.round(100 * (st.updatedNumberScheduled || 0) / desired) : 0;
  const ann = d.metadata.annotations || {};
  const canary = ann['rollout.everynode.io/canary-selector'] || ann['rollout.everynode.io/partition'];
  const patch = (title, annotations, what) => () => act(title, 'PATCH', dsPath(d), { metadata: { annotations } }, what);
  const isPaused = paused(d);
  const actions = el('div', { class: 'actions' },
    el('button', { type: 'button', id: 'act-pause', disabled: isPaused ? '' : null,
      onclick: patch(`Pause ${d.metadata.name}`, { 'rollout.everynode.io/paused': 'true' },
        () => `No pod of ${d.metadata.name} is replaced until you resume; ${desired - (st.updatedNumberScheduled || 0)} of ${desired} nodes keep their old revision for now.`) }, 'Pause'),
    el('button', { type: 'button', id: 'act-resume', disabled: isPaused ? null : '',
      onclick: patch(`Resume ${d.metadata.name}`, { 'rollout.everynode.io/paused': null },
        () => `The rollout continues: ${desired - (st.updatedNumberScheduled || 0)} nodes still to update, within the update budget.`) }, 'Resume'),
    el('button', { type: 'button', id: 'act-promote', disabled: canary ? null : '',
      onclick: patch(`Promote ${d.metadata.name}`, { 'rollout.everynode.io/canary-selector': null, 'rollout.everynode.io/partition': null },
        () => `The canary/partition is lifted: every node of ${d.metadata.name} gets the update revision.`) }, 'Promote'),
  );
  const revs = el('div', {}, 'loading revisions…');
  const signal = panel(`DaemonSet ${d.metadata.namespace}/${d.metadata.name}`,
    el('p', {}, `${st.updatedNumberScheduled || 0}/${desired} updated, ${st.numberAvailable || 0}/${desired} available` + (isPaused ? ' — paused' : '')),
    el('div', { class: 'bar', role: 'progressbar', 'aria-valuenow': pct, 'aria-valuemin': 0, 'aria-valuemax': 100 }, el('div', { style: `width:${pct}%` })),
    actions, el('h3', {}, 'Conditions'), table(['type', 'status', 'reason', 'message'], (st.conditions || []).map((c) => [c.type, c.status, c.reason, c.message])),
    el('h3', {}, 'Revisions'), revs,
    el('h3', {}, 'Annotations'), kv(ann),
    el('h3', {}, 'Recent events'), await eventsFor('DaemonSet', d.metadata.namespace, d.metadata.name));
  try {
    const l = await api.get(`/apis/apps/v1/namespaces/${d.metadata.namespace}/controllerrevisions`);
    if (signal.aborted) return;
    const mine = l.items.filter((r) => (r.metadata.ownerReferences || []).some((o) => o.uid === d.metadata.uid)).sort((a, b) => b.revision - a.revision);
    revs.replaceChildren(table(['revision', 'name', 'created', ''], mine.map((r, i) => [String(r.revision), r.metadata.name, r.metadata.creationTimestamp,
      i === 0 ? 'current' : el('button', { type: 'button', onclick: () => undo(d, r) }, `Undo to ${r.revision}`)])),
    ...mine.slice(0, 2).length === 2 ? [el('h4', {}, `Template change ${mine[1].revision} → ${mine[0].revision}`), el('pre', {}, diff(mine[1].data, mine[0].data))] : []);
  } catch (e) { revs.textContent = String(e.message); }
}

// undo restores a revision's template (what `kubectl rollout undo --to-revision` sends).
function undo(d, rev) {
  const tmpl = rev.data?.spec?.template;
  act(`Undo ${d.metadata.name} to revision ${rev.revision}`, 'PATCH', dsPath(d), { spec: { template: tmpl } },
    (preview) => `The template of ${d.metadata.name} goes back to revision ${rev.revision}; every node is updated to it.\n\n` +
      diff(d.spec.template, preview.spec.template));
}

// diff is a line diff of two objects' JSON.
function diff(a, b) {
  const x = JSON.stringify(a, null, 1).split('\n');
  const y = JSON.stringify(b, null, 1).split('\n');
  const n = x.length, m = y.length;
  if (n * m > 4e6) return '(too large to compare)';
  const L = Array.from({ length: n + 1 }, () => new Uint16Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && x[i] === y[j]) { i++; j++; } else if (j < m && (i >= n || L[i][j + 1] >= L[i + 1][j])) out.push('+ ' + y[j++]); else out.push('- ' + x[i++]);
  }
  return out.length ? out.join('\n') : '(no change)';
}

async function showPod(ns, name) {
  const p = fleet.pods.items.get(`${ns}/${name}`);
  const log = el('pre', { 'aria-live': 'off' });
  const cs = (p?.status?.containerStatuses || []).map((c) => [c.name, c.image, String(c.ready), String(c.restartCount),
    Object.entries(c.state || {}).map(([k, v]) => `${k}${v.reason ? ': ' + v.reason : ''}`).join('')]);
  const signal = panel(`Pod ${ns}/${name}`,
    el('p', {}, `node ${p?.spec?.nodeName || '-'} · phase ${p?.status?.phase || '-'}`),
    el('h3', {}, 'Containers'), table(['name', 'image', 'ready', 'restarts', 'state'], cs),
    el('h3', {}, 'Recent events'), await eventsFor('Pod', ns, name),
    el('h3', {}, 'Log (live)'), log);
  const container = p?.spec?.containers?.[0]?.name;
  try {
    await api.lines(`/api/v1/namespaces/${ns}/pods/${name}/log?follow=true&tailLines=100${container ? '&container=' + container : ''}`, signal, (line) => {
      log.append(line + '\n');
      if (log.childNodes.length > 1000) log.firstChild.remove();
      log.scrollTop = log.scrollHeight;
    });
  } catch (e) { if (!signal.aborted) log.append(`(log: ${e.message})\n`); }
}

// ---- legend, login ----

$('legend').replaceChildren(...Object.entries(STATES).map(([k, s]) => el('span', { class: `cell s-${k}` }, `${s.icon} ${s.text}`)));

$('login-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  try {
    const user = await api.login($('token').value);
    $('token').value = '';
    start(user);
  } catch (err) { $('login-error').textContent = err.message; }
});
$('logout').addEventListener('click', async () => { await api.logout(); toLogin(); });

api.session().then(start, () => toLogin());
