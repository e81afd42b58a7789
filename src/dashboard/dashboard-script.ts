/**
 * The dashboard's script, as a string: tsc ships it in dist/ with the rest,
 * so nothing is built or looked up at run time. Plain browser JavaScript
 * (ES2020, no framework, no dependency): it renders with textContent (event
 * keys and errors are user data, never HTML) and draws the charts as SVG
 * polylines. Written without backticks so that it fits in this module's
 * String.raw literal. Served as assets/dashboard.js (the CSP allows no
 * inline script).
 */

export const DASHBOARD_JS = String.raw`
'use strict';
const csrf = document.querySelector('meta[name="txbox-csrf"]').getAttribute('content');
const SVG = 'http://www.w3.org/2000/svg';
const SVG_TAGS = new Set(['svg', 'line', 'polyline', 'text', 'rect']);
const PALETTE = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04', '#db2777'];
let history = [];
let historyLength = 720;
let latest = null;
let showPayloads = false;

function h(tag, attrs, ...children) {
  const el = SVG_TAGS.has(tag) ? document.createElementNS(SVG, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}
const $ = (id) => document.getElementById(id);
const fmt = (n) => (n === null || n === undefined ? '-' : Number(n).toLocaleString('en-US', { maximumFractionDigits: 1 }));
const age = (s) => (s === null || s === undefined ? '-' : s < 120 ? s.toFixed(1) + 's' : s < 7200 ? (s / 60).toFixed(1) + 'm' : (s / 3600).toFixed(1) + 'h');
const clock = (t) => new Date(t).toLocaleTimeString('en-GB');
const when = (d) => (d ? new Date(d).toISOString().replace('T', ' ').slice(0, 19) : '-');

function table(el, headers, rows, empty) {
  const body = rows.length ? rows : [h('tr', {}, h('td', { colspan: headers.length, class: 'empty' }, empty))];
  el.replaceChildren(h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))), h('tbody', {}, body));
}
const num = (n) => h('td', { class: 'num' }, fmt(n));

function card(name, label, value, warn) {
  return h('div', { class: 'card' + (warn ? ' warn' : ''), 'data-total': name }, h('span', { class: 'value' }, value), h('span', { class: 'label' }, label));
}

function niceMax(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 4, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function chart(svgId, legendId, series) {
  const svg = $(svgId);
  const W = 560, H = 200, L = 48, R = 10, T = 8, B = 22;
  svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
  svg.replaceChildren();
  $(legendId).replaceChildren();
  const points = [].concat(...[...series.values()]);
  if (points.length === 0) {
    svg.append(h('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty' }, 'no data yet'));
    return;
  }
  const t0 = Math.min(...points.map((p) => p.t));
  const t1 = Math.max(t0 + 1000, ...points.map((p) => p.t));
  const vmax = niceMax(Math.max(4, ...points.map((p) => p.v)));
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
  const y = (v) => H - B - (v / vmax) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const v = (vmax * i) / 4;
    svg.append(h('line', { x1: L, x2: W - R, y1: y(v), y2: y(v), class: 'grid' }), h('text', { x: L - 4, y: y(v) + 4, 'text-anchor': 'end', class: 'axis' }, fmt(v)));
  }
  svg.append(h('text', { x: L, y: H - 4, class: 'axis' }, clock(t0)), h('text', { x: W - R, y: H - 4, 'text-anchor': 'end', class: 'axis' }, clock(t1)));
  let i = 0;
  for (const [name, pts] of series) {
    const color = PALETTE[i++ % PALETTE.length];
    const d = pts.map((p) => x(p.t).toFixed(1) + ',' + y(p.v).toFixed(1)).join(' ');
    svg.append(h('polyline', { points: pts.length === 1 ? d + ' ' + d : d, fill: 'none', stroke: color, 'stroke-width': 2, 'data-series': name }));
    $(legendId).append(h('span', { class: 'key' }, h('svg', { viewBox: '0 0 10 10' }, h('rect', { width: 10, height: 10, fill: color })), ' ' + name));
  }
}

function seriesOf(field) {
  const names = new Set();
  for (const s of history) for (const k of Object.keys(s[field])) names.add(k);
  const series = new Map();
  for (const name of [...names].sort()) series.set(name, history.map((s) => ({ t: s.t, v: s[field][name] || 0 })));
  return series;
}

function actionButton(label, path, id, cls, confirmText) {
  return h('button', { type: 'button', class: cls, 'data-action': label.toLowerCase(), onclick: (e) => act(e.currentTarget, path, [id], confirmText) }, label);
}

async function act(button, path, ids, confirmText) {
  if (confirmText && !window.confirm(confirmText)) return;
  button.disabled = true;
  try {
    const res = await fetch(path, { method: 'POST', credentials: 'same-origin', headers: { 'content-type': 'application/json', 'x-csrf-token': csrf }, body: JSON.stringify({ ids }) });
    const body = await res.json().catch(() => ({}));
    if (!res.ok) return showError(body.error || 'HTTP ' + res.status);
    showNotice(body.verb + ' ' + body.changed.length + ' event(s)' + (body.missing.length ? '; not found in that state: ' + body.missing.join(', ') : ''));
    apply(body);
  } catch (err) {
    showError('the request failed: ' + err.message);
  } finally {
    button.disabled = false;
  }
}

function showError(text) {
  $('error').textContent = text;
  $('error').hidden = !text;
}
let noticeTimer = null;
function showNotice(text) {
  $('notice').textContent = text;
  $('notice').hidden = !text;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => ($('notice').hidden = true), 8000);
}

function render() {
  const snap = latest;
  if (!snap || !snap.status) return;
  const s = snap.status;
  const sum = (f) => s.destinations.reduce((a, d) => a + d[f], 0);
  const oldest = s.destinations.reduce((m, d) => (d.oldestPendingSeconds !== null && (m === null || d.oldestPendingSeconds > m) ? d.oldestPendingSeconds : m), null);
  const alive = s.relays.filter((r) => r.alive).length;
  $('totals').replaceChildren(
    card('pending', 'pending', fmt(sum('pending'))),
    card('parked', 'parked', fmt(sum('parked')), sum('parked') > 0),
    card('inFlight', 'in flight', fmt(s.inFlight)),
    card('publishedLastMinute', 'published last minute', fmt(s.publishedLastMinute)),
    card('oldestPending', 'oldest pending', age(oldest)),
    card('relaysAlive', 'relays alive', fmt(alive), alive === 0 && sum('pending') > 0),
  );
  chart('chart-backlog', 'legend-backlog', seriesOf('pending'));
  chart('chart-rate', 'legend-rate', seriesOf('publishedPerMinute'));
  table($('destinations'), ['destination', 'pending', 'backing off', 'parked', 'behind parked', 'oldest pending'],
    s.destinations.map((d) => h('tr', { 'data-destination': d.destination }, h('td', {}, d.destination), num(d.pending), num(d.backingOff), num(d.parked), num(d.blockedByParked), h('td', { class: 'num' }, age(d.oldestPendingSeconds)))),
    'no pending or parked events');
  table($('relays'), ['relay', 'host', 'pid', 'state', 'bucket leases', 'in flight', 'per minute', 'published total'],
    s.relays.map((r) => h('tr', { 'data-relay': r.relayId }, h('td', {}, h('code', {}, r.relayId)), h('td', {}, r.host), num(r.pid),
      h('td', { class: 'state-' + r.state }, r.state === 'alive' ? 'alive, heartbeat ' + age(r.heartbeatAgeSeconds) + ' ago' : r.state + ' ' + age(r.stateAgeSeconds) + ' ago'),
      num(r.buckets), h('td', { class: 'num' }, r.alive ? fmt(r.inFlight) : '-'), h('td', { class: 'num' }, r.alive ? fmt(r.ratePerMinute) : '-'), num(r.publishedTotal))),
    'no relay in the last 24 hours');
  $('circuits').replaceChildren(...snap.circuits.map((c) => h('p', { class: 'error' }, 'destination ' + c.destination + ' is down (circuit open on ' + c.relayId + ' since ' + when(c.openSince) + '): ' + c.reason)));
  const parkedHeaders = ['event', 'type', 'key', 'destination', 'attempts', 'last error', 'parked at'].concat(showPayloads ? ['payload'] : [], ['actions']);
  table($('parked'), parkedHeaders, snap.parked.map((p) => h('tr', { 'data-id': p.id },
    h('td', {}, h('code', { title: p.id }, p.id)), h('td', {}, p.type), h('td', { class: 'key' }, p.key), h('td', {}, p.destination), h('td', { class: 'num attempts' }, fmt(p.attempts)),
    h('td', { class: 'error-text' }, p.lastError || ''), h('td', {}, when(p.parkedAt)),
    showPayloads ? h('td', {}, h('details', {}, h('summary', {}, 'payload'), h('pre', {}, JSON.stringify(p.payload, null, 2)))) : null,
    h('td', { class: 'actions' }, actionButton('Retry', 'api/parked/retry', p.id, 'primary'), ' ', actionButton('Skip', 'api/parked/skip', p.id, '', 'Skip this event? It will never be published.'), ' ', actionButton('Discard', 'api/parked/discard', p.id, 'danger', 'Delete this event? Only its id stays in the audit table.')))),
  'no parked events');
  const inbox = snap.inbox;
  $('inbox').hidden = !inbox;
  if (inbox) {
    table($('inbox-consumers'), ['consumer', 'processed', 'failed', 'retry', 'held', 'dead', 'last minute', 'last processed'],
      inbox.consumers.map((c) => h('tr', { 'data-consumer': c.consumer }, h('td', {}, c.consumer), num(c.processed), num(c.failed), num(c.retry), num(c.held), num(c.dead), num(c.processedLastMinute), h('td', {}, when(c.lastProcessedAt)))),
      'no inbox rows');
    const row = (e, actions, extra) => h('tr', { 'data-id': e.id }, h('td', {}, h('code', {}, e.id)), h('td', {}, e.consumer), h('td', {}, e.type), h('td', { class: 'key' }, e.key), extra, h('td', { class: 'num attempts' }, fmt(e.attempts)), h('td', { class: 'error-text' }, e.lastError || ''), h('td', {}, when(e.receivedAt)), h('td', { class: 'actions' }, actions));
    table($('inbox-dead'), ['event', 'consumer', 'type', 'key', 'attempts', 'last error', 'received', 'actions'],
      inbox.dead.map((e) => row(e, [actionButton('Retry', 'api/inbox/dead/retry', e.id, 'primary'), ' ', actionButton('Discard', 'api/inbox/dead/discard', e.id, 'danger', 'Delete this dead event? A later redelivery would run its handler again.')], null)),
      'no dead events');
    table($('inbox-held'), ['event', 'consumer', 'type', 'key', 'version', 'attempts', 'reason', 'received', 'actions'],
      inbox.held.map((e) => row(e, [actionButton('Retry', 'api/inbox/held/retry', e.id, 'primary')], num(e.version))),
      'no held events');
  }
}

function apply(state) {
  showPayloads = state.showPayloads;
  historyLength = state.historyLength || historyLength;
  if (state.history) history = state.history.slice();
  const snap = state.snapshot;
  if (snap.sample && (history.length === 0 || history[history.length - 1].t < snap.sample.t)) history.push(snap.sample);
  if (history.length > historyLength) history.splice(0, history.length - historyLength);
  latest = snap;
  showError(snap.error ? 'the last sample failed: ' + snap.error : '');
  render();
}

function live(state, text) {
  $('live').dataset.state = state;
  $('live').textContent = text;
}

async function start() {
  const res = await fetch('api/state', { credentials: 'same-origin' });
  if (res.status === 401) return void (window.location.href = 'login');
  apply(await res.json());
  const events = new EventSource('api/events');
  events.addEventListener('snapshot', (e) => {
    apply(JSON.parse(e.data));
    live('live', 'live, updated ' + clock(Date.parse(latest.at)));
  });
  events.addEventListener('error', async () => {
    live('down', 'reconnecting');
    // The browser retries by itself unless the server refused the stream (401: logged out or expired).
    if (events.readyState !== EventSource.CLOSED) return;
    const check = await fetch('api/state', { credentials: 'same-origin' }).catch(() => null);
    if (check && check.status === 401) window.location.href = 'login';
    else setTimeout(() => window.location.reload(), 5000);
  });
  const logout = $('logout');
  if (logout) logout.addEventListener('click', async () => {
    await fetch('logout', { method: 'POST', credentials: 'same-origin', headers: { 'x-csrf-token': csrf } });
    window.location.href = 'login';
  });
}

start().catch((err) => showError('the dashboard could not load: ' + err.message));
`;
