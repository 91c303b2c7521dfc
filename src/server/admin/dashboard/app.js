/* SPDX-License-Identifier: MIT */
/*
 * sluice dashboard: the live view of the admin API, with no framework and nothing fetched from
 * elsewhere. Every second it polls /api/stats (one snapshot of every limit's counters) and derives
 * per-second rates from consecutive snapshots; it reads each limit's definition from /api/limits
 * (again when a new limit appears, and every META_MS), the selected limit's most throttled keys
 * from /api/limits/{name}, a looked-up task from /api/tasks/{id}, and streams /api/events.
 *
 * Rendering is incremental: one table row per limit, kept in a Map by name and patched in place
 * (text only changes when the value does), rows reordered by moving the few that moved; the big
 * charts are drawn for the selected limit only, the sparklines only for rows on screen.
 *
 * Times from the server are Unix milliseconds on the server's clock; the page keeps the offset
 * between the two clocks (from /api/stats time_ms) so that "in 3.2 s" is right even when the
 * browser's clock is not.
 */
(function () {
  'use strict';

  const POLL_MS = 1000;          /* /api/stats, the selected limit, a looked-up task */
  const META_MS = 10000;         /* /api/limits, for definitions changed by LIMIT.SET */
  const HISTORY = 330;           /* samples kept per limit (one a second) */
  const SPAN_MS = 120000;        /* the big charts show the last two minutes */
  const SPARK_MS = 60000;        /* a sparkline shows the last minute */
  const FEED_MAX = 200;          /* event feed entries kept */
  const TOKEN_KEY = 'sluice.password';

  const $ = (id) => document.getElementById(id);
  const nf = new Intl.NumberFormat('en-US');

  /* ---- Formatting ------------------------------------------------------------------------ */

  function fmtInt(n) { return n == null || !isFinite(n) ? '–' : nf.format(Math.round(n)); }

  function fmtRate(x) {
    if (x == null || !isFinite(x)) return '–';
    if (x === 0) return '0';
    const a = Math.abs(x);
    if (a < 0.01) return x.toExponential(1);
    if (a < 10) return x.toFixed(2);
    if (a < 100) return x.toFixed(1);
    return nf.format(Math.round(x));
  }

  /* An axis label: as many decimals as the tick step needs. */
  function fmtTick(v, step) {
    const dec = Math.max(0, Math.min(6, -Math.floor(Math.log10(step) + 1e-9)));
    return dec === 0 ? nf.format(v) : v.toFixed(dec);
  }

  function fmtBytes(n) {
    if (n == null) return '–';
    if (n < 1024) return `${n} B`;
    if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
    if (n < 1024 * 1024 * 1024) return `${(n / 1048576).toFixed(1)} MiB`;
    return `${(n / 1073741824).toFixed(2)} GiB`;
  }

  /* A duration in ms, short: "0.4 s", "3.2 s", "42 s", "4 m 10 s", "2 h 5 m", "3 d 4 h". */
  function fmtDur(ms) {
    const s = ms / 1000;
    if (s < 10) return `${s.toFixed(1)} s`;
    if (s < 60) return `${Math.floor(s)} s`;
    if (s < 3600) return `${Math.floor(s / 60)} m ${Math.floor(s % 60)} s`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} m`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  }

  /* A server time (Unix ms) relative to now: "in 3.2 s", "now", "12 s ago"; -1 is never. */
  function fmtRel(abs, future) {
    if (abs == null || !isFinite(abs)) return '–';
    if (abs < 0) return 'never';
    const d = abs - serverNow();
    if (d > 50) return `in ${fmtDur(d)}`;
    if (d >= -500 || future) return 'now';
    return `${fmtDur(-d)} ago`;
  }

  function fmtClock(abs) {
    if (abs == null || abs < 0) return '';
    const d = new Date(abs - clock.offset); /* server ms -> this browser's clock */
    const p = (n, w) => String(n).padStart(w || 2, '0');
    return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }

  function fmtPeriod(ms) {
    const units = [[86400000, 'd'], [3600000, 'h'], [60000, 'm'], [1000, 's']];
    for (const [u, n] of units) if (ms >= u && ms % u === 0) return `${ms / u}${n}`;
    return `${ms}ms`;
  }

  function fmtUptime(s) {
    if (s == null) return '–';
    if (s < 60) return `${s} s`;
    return fmtDur(s * 1000).replace(/ 0 [smh]$/, '');
  }

  /* Per second rate of a limit's definition, or null when it has none (concurrency, quota). */
  function limitRate(meta) {
    if (!meta || !meta.limit || !meta.period_ms) return null;
    if (meta.kind !== 'rate' && meta.kind !== 'window' && meta.kind !== 'sliding') return null;
    return (meta.limit * 1000) / meta.period_ms;
  }

  function ruleText(meta, kind) {
    if (!meta) return '';
    if (kind === 'concurrency') return meta.limit != null ? `${fmtInt(meta.limit)} at once` : '';
    if (kind === 'quota') {
      if (meta.limit == null) return '';
      if (meta.period && meta.period !== 'none') return `${fmtInt(meta.limit)}/${meta.period}`;
      return meta.period_ms ? `${fmtInt(meta.limit)}/${fmtPeriod(meta.period_ms)}` : `${fmtInt(meta.limit)} total`;
    }
    if (meta.limit != null && meta.period_ms) return `${meta.limit}/${fmtPeriod(meta.period_ms)}`;
    return meta.spec || '';
  }

  /* Some servers may give relative times; a value that cannot be a Unix ms time is taken as one. */
  function absTime(ms, base) {
    if (ms == null) return null;
    if (ms < 0) return -1;
    return ms < 1e11 ? base + ms : ms;
  }

  function setText(el, s) { if (el.textContent !== s) el.textContent = s; }
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  /* ---- Clock, connection, password ------------------------------------------------------- */

  const clock = { offset: 0 }; /* server ms - browser ms */
  function serverNow() { return Date.now() + clock.offset; }

  const auth = { token: sessionStorage.getItem(TOKEN_KEY), waiting: [] };

  function setConn(state) {
    if (document.body.dataset.conn === state) return;
    document.body.dataset.conn = state;
    setText($('conn-text'), { live: 'live', down: 'disconnected — retrying', connecting: 'connecting…',
      locked: 'password required' }[state] || state);
  }

  function needAuth() {
    const box = $('auth');
    if (!box.hidden) return;
    $('auth-err').hidden = !auth.token;
    box.hidden = false;
    setConn('locked');
    setTimeout(() => $('auth-pass').focus(), 0);
  }

  function authReady() {
    return $('auth').hidden ? Promise.resolve() : new Promise((r) => auth.waiting.push(r));
  }

  $('auth-form').addEventListener('submit', (e) => {
    e.preventDefault();
    auth.token = $('auth-pass').value;
    sessionStorage.setItem(TOKEN_KEY, auth.token);
    $('auth').hidden = true;
    $('auth-pass').value = '';
    setConn('connecting');
    const w = auth.waiting.splice(0);
    w.forEach((r) => r());
    kickPoll();
  });

  class HttpError extends Error {
    constructor(status, body) {
      super((body && body.message) || `HTTP ${status}`);
      this.status = status;
      this.body = body;
    }
  }

  function headers(accept) {
    const h = { Accept: accept };
    if (auth.token) h.Authorization = `Bearer ${auth.token}`;
    return h;
  }

  /* GETs a JSON document. Throws HttpError (status 0 when the server did not answer). */
  async function api(path) {
    let res;
    try {
      res = await fetch(path, { headers: headers('application/json'), cache: 'no-store' });
    } catch (err) {
      throw new HttpError(0, { message: String(err) });
    }
    let body = null;
    try { body = await res.json(); } catch (err) { body = null; }
    if (res.status === 401) needAuth();
    if (!res.ok) throw new HttpError(res.status, body);
    return body;
  }

  /* ---- Limits: state and table rows ------------------------------------------------------ */

  const limits = new Map(); /* name -> entry */
  let selected = null;      /* name of the selected limit */
  let sortKey = 'name', sortDir = 1;
  let filterWords = [];
  let metaAt = 0, metaWanted = true;
  let lastStats = null;     /* the previous /api/stats, for rates */
  let gapNext = false;      /* the next sample follows an outage: break the lines */

  const tbody = $('limits-body');
  const wrap = $('limits-wrap');

  const rowObserver = 'IntersectionObserver' in window ? new IntersectionObserver((items) => {
    for (const it of items) {
      const e = limits.get(it.target.dataset.limit);
      if (!e) continue;
      e.onScreen = it.isIntersecting;
      if (e.onScreen) drawSpark(e);
    }
  }, { root: wrap, rootMargin: '80px 0px' }) : null;

  function newEntry(s) {
    const tr = document.createElement('tr');
    tr.dataset.limit = s.name;
    tr.dataset.state = 'idle';
    tr.tabIndex = -1;
    const cName = el('td', 'c-name');
    cName.append(el('span', 'dot'), el('span', 'nm', s.name));
    /* Shadow mode (a dry run): shown by a badge, and the denied column then shows the would-be
     * denials it counts instead of enforcing them. */
    const badge = el('span', 'badge-shadow', 'shadow');
    badge.title = 'Shadow mode: evaluated and counted as if enforced, but it denies nothing; the ' +
      'denied column shows its would-be denials';
    badge.hidden = true;
    /* The upstream answered 429 and keys of this limit were held back (LIMIT.BACKOFF, TASK.FAIL
     * RETRY_AFTER); an adaptive limit also lowered those keys' rates (LIMIT.RATE shows one). */
    const backoff = el('span', 'badge-backoff', '429');
    backoff.hidden = true;
    cName.append(badge, backoff);
    cName.title = s.name;
    const cells = {
      name: cName, kind: el('td', 'c-kind', s.kind || ''), rule: el('td', 'c-rule', ''),
      spark: el('td', 'c-spark'), allowed: el('td', 'num c-allowed', '–'),
      denied: el('td', 'num c-denied', '–'), parked: el('td', 'num c-parked', '–'),
      keys: el('td', 'num c-keys', '–'), badge, backoff,
    };
    const canvas = document.createElement('canvas');
    cells.spark.append(canvas);
    tr.append(cells.name, cells.kind, cells.rule, cells.spark, cells.allowed, cells.denied,
      cells.parked, cells.keys);
    const e = { name: s.name, kind: s.kind, meta: null, hist: [], prev: null, cur: { a: null, d: null, u: null, sd: null },
      shadow: false, backoffs: 0,
      parked: 0, keys: 0, unitsDiffer: false, row: tr, cells, spark: canvas, onScreen: !rowObserver,
      state: 'idle', text: '' };
    if (rowObserver) rowObserver.observe(tr);
    return e;
  }

  function entryState(e) {
    const a = e.cur.a || 0, d = e.cur.d || 0;
    if (d > 0 && e.meta && e.meta.overflow === 'reject') return 'refusing';
    if (d > 0 || e.parked > 0) return 'throttling';
    const r = limitRate(e.meta);
    if (r && (e.unitsDiffer ? e.cur.u || 0 : a) >= 0.9 * r) return 'busy';
    if (a > 0) return 'ok';
    return 'idle';
  }
  const STATE_LABEL = { idle: 'idle', ok: 'flowing', busy: 'near its limit', throttling: 'throttling',
    refusing: 'rejecting' };

  function updateRow(e) {
    const c = e.cells;
    setText(c.allowed, fmtRate(e.cur.a));
    /* A shadow limit denies nothing: its column tells what it would have denied. */
    setText(c.denied, e.shadow ? fmtRate(e.cur.sd) : fmtRate(e.cur.d));
    c.denied.classList.toggle('would', e.shadow);
    c.denied.title = e.shadow ? 'would-be denials per second (shadow mode: counted, not enforced)' : '';
    c.badge.hidden = !e.shadow;
    c.backoff.hidden = !(e.backoffs > 0);
    c.backoff.textContent = `429 ×${fmtInt(e.backoffs)}`;
    c.backoff.title = `the upstream answered 429 ${e.backoffs} times: keys of this limit were held ` +
      'back (and, if it is adaptive, their rates lowered; LIMIT.RATE limit key shows one)';
    setText(c.parked, fmtInt(e.parked));
    setText(c.keys, fmtInt(e.keys));
    c.allowed.classList.toggle('zero', e.cur.a === 0);
    c.denied.classList.toggle('zero', e.cur.d === 0);
    c.denied.classList.toggle('hot', e.cur.d > 0);
    c.parked.classList.toggle('zero', e.parked === 0);
    c.parked.classList.toggle('hot', e.parked > 0);
    const st = entryState(e);
    if (st !== e.state) {
      e.state = st;
      e.row.dataset.state = st;
      c.name.title = `${e.name}: ${STATE_LABEL[st]}`;
    }
    if (e.kind !== c.kind.textContent) setText(c.kind, e.kind || '');
    const rule = ruleText(e.meta, e.kind);
    setText(c.rule, rule);
    if (e.meta && e.meta.spec && c.rule.title !== e.meta.spec) c.rule.title = e.meta.spec;
    e.text = `${e.name} ${e.kind || ''} ${e.meta ? `${e.meta.key || ''} ${e.meta.spec || ''}` : ''}`.toLowerCase();
  }

  function matches(e) {
    if (!filterWords.length) return true;
    if (!e.text) e.text = e.name.toLowerCase();
    return filterWords.every((w) => e.text.includes(w));
  }

  function sortValue(e) {
    switch (sortKey) {
      case 'allowed': return e.cur.a == null ? -1 : e.cur.a;
      case 'denied': return e.cur.d == null ? -1 : e.cur.d;
      case 'parked': return e.parked;
      case 'keys': return e.keys;
      default: return 0;
    }
  }

  function compare(x, y) {
    if (sortKey !== 'name') {
      const d = sortValue(x) - sortValue(y);
      if (d !== 0) return d * sortDir;
    }
    const n = x.name < y.name ? -1 : x.name > y.name ? 1 : 0;
    return sortKey === 'name' ? n * sortDir : n;
  }

  /* Puts rows in order by moving only the ones out of place, and applies the filter. */
  function layoutRows() {
    const list = Array.from(limits.values()).sort(compare);
    let shown = 0;
    let at = tbody.firstChild;
    for (const e of list) {
      const vis = matches(e);
      if (e.row.hidden === vis) e.row.hidden = !vis;
      if (vis) shown++;
      if (at === e.row) at = at.nextSibling;
      else tbody.insertBefore(e.row, at);
    }
    $('limits-empty').hidden = limits.size > 0 && shown > 0;
    setText($('limits-empty'), limits.size ? 'No limit matches the filter.' : 'No limits yet.');
    setText($('limits-count'), limits.size === 0 ? '' : shown === limits.size ? `${limits.size}`
      : `${shown} of ${limits.size}`);
    return list;
  }

  function setSort(key) {
    if (sortKey === key) sortDir = -sortDir;
    else { sortKey = key; sortDir = key === 'name' ? 1 : -1; }
    for (const th of document.querySelectorAll('th[data-sort]')) {
      if (th.dataset.sort === sortKey) th.setAttribute('aria-sort', sortDir > 0 ? 'ascending' : 'descending');
      else th.removeAttribute('aria-sort');
    }
    layoutRows();
  }

  for (const th of document.querySelectorAll('th[data-sort]')) {
    th.addEventListener('click', () => setSort(th.dataset.sort));
  }
  document.querySelector('th[data-sort="name"]').setAttribute('aria-sort', 'ascending');

  $('filter').addEventListener('input', () => {
    filterWords = $('filter').value.toLowerCase().split(/\s+/).filter(Boolean);
    layoutRows();
    for (const e of limits.values()) if (!e.row.hidden) drawSpark(e);
  });

  tbody.addEventListener('click', (ev) => {
    const tr = ev.target.closest('tr');
    if (tr) select(tr.dataset.limit, true);
  });
  wrap.addEventListener('keydown', (ev) => {
    if (ev.key !== 'ArrowDown' && ev.key !== 'ArrowUp') return;
    const rows = Array.from(tbody.children).filter((r) => !r.hidden);
    const i = rows.findIndex((r) => r.dataset.limit === selected);
    const j = Math.max(0, Math.min(rows.length - 1, i + (ev.key === 'ArrowDown' ? 1 : -1)));
    if (rows[j]) { ev.preventDefault(); select(rows[j].dataset.limit, true); rows[j].focus({ preventScroll: true }); rows[j].scrollIntoView({ block: 'nearest' }); }
  });
  wrap.tabIndex = 0;

  /* ---- Snapshots ------------------------------------------------------------------------- */

  function onStats(st) {
    const now = Date.now();
    clock.offset = st.time_ms - now;
    const prev = lastStats;
    const restarted = prev && (st.uptime_s < prev.uptime_s || st.commands_total < prev.commands_total);
    const dt = prev && !restarted ? (st.time_ms - prev.time_ms) / 1000 : 0;
    const gap = gapNext || restarted || dt > 5;
    gapNext = false;
    if (gap) metaWanted = true; /* back from an outage: definitions may have changed */

    setText($('uptime'), fmtUptime(st.uptime_s));
    setText($('clients'), fmtInt(st.clients));
    setText($('cmd-rate'), dt > 0 && !gap ? fmtRate(Math.max(0, st.commands_total - prev.commands_total) / dt) : '–');
    /* A shared store: decisions and task totals are every node's (docs/cluster.md, "Counters"). */
    const ctr = st.counters || {};
    $('scope-fact').hidden = ctr.scope !== 'cluster';
    if (ctr.scope === 'cluster') {
      setText($('scope'), 'all nodes');
      $('scope').title = 'Allowed, denied and task totals are summed over every node sharing the store' +
        (ctr.age_ms == null ? '' : `, read ${ctr.age_ms} ms ago`) +
        '; queued, parked, running and keys are this node\'s.';
    }
    const t = st.tasks || {};
    for (const k of ['queued', 'parked', 'running', 'done', 'failed', 'cancelled']) setText($(`t-${k}`), fmtInt(t[k]));

    let newNames = false, sumA = 0, sumD = 0, haveRates = false;
    const seen = new Set();
    for (const s of st.limits || []) {
      seen.add(s.name);
      let e = limits.get(s.name);
      if (!e) {
        e = newEntry(s);
        limits.set(s.name, e);
        newNames = true;
      }
      e.kind = s.kind;
      const p = e.prev;
      let a = null, d = null, u = null, sd = null;
      if (p && dt > 0 && !gap) {
        a = (s.allowed_total - p.allowed_total) / dt;
        d = (s.denied_total - p.denied_total) / dt;
        u = (s.units_total - p.units_total) / dt;
        sd = ((s.shadow_denied_total || 0) - (p.shadow_denied_total || 0)) / dt;
        if (a < 0 || d < 0 || u < 0) { a = d = u = null; e.hist.push({ t: st.time_ms, gap: true }); }
      } else if (gap && e.hist.length) {
        e.hist.push({ t: st.time_ms, gap: true });
      }
      e.prev = { allowed_total: s.allowed_total, denied_total: s.denied_total, units_total: s.units_total,
        shadow_denied_total: s.shadow_denied_total || 0 };
      e.cur = { a, d, u, sd: sd != null && sd < 0 ? null : sd };
      e.shadow = s.mode === 'shadow';
      e.backoffs = s.backoffs_total || 0;
      e.parked = s.parked || 0;
      e.keys = s.keys || 0;
      e.unitsDiffer = e.unitsDiffer || s.units_total !== s.allowed_total;
      e.hist.push({ t: st.time_ms, a, d, u, p: e.parked });
      if (e.hist.length > HISTORY) e.hist.splice(0, e.hist.length - HISTORY);
      if (a != null) { sumA += a; sumD += d; haveRates = true; }
      updateRow(e);
    }
    for (const [name, e] of limits) {
      if (seen.has(name)) continue;
      if (rowObserver) rowObserver.unobserve(e.row);
      e.row.remove();
      limits.delete(name);
      if (selected === name) selected = null;
    }
    setText($('t-allowed'), haveRates ? fmtRate(sumA) : '–');
    setText($('t-denied'), haveRates ? fmtRate(sumD) : '–');
    lastStats = st;

    const list = layoutRows();
    if (!selected || !limits.has(selected)) {
      const want = decodeURIComponent((location.hash.match(/^#limit=(.+)$/) || [])[1] || '');
      const first = limits.get(want) || list.find((e) => !e.row.hidden) || list[0];
      if (first) select(first.name, false);
    }
    for (const e of limits.values()) if (e.onScreen && !e.row.hidden) drawSpark(e);
    if (newNames) metaWanted = true;
    updateDetailLive();
    drawCharts();
  }

  function onMeta(doc) {
    for (const m of doc.limits || []) {
      const e = limits.get(m.name);
      if (!e) continue;
      e.meta = m;
      e.kind = m.kind || e.kind;
      updateRow(e);
    }
    metaAt = Date.now();
    metaWanted = false;
    layoutRows();
    updateDetailStatic();
  }

  /* ---- The selected limit ---------------------------------------------------------------- */

  let detailDoc = null; /* the last /api/limits/{selected} */
  let detailBase = 0;   /* server time when it was read */

  function select(name, user) {
    if (!limits.has(name)) return;
    if (selected !== name) {
      if (selected && limits.has(selected)) limits.get(selected).row.classList.remove('selected');
      selected = name;
      detailDoc = null;
      renderTopKeys([]);
      $('topkeys-empty').textContent = 'Loading…';
      if (user) history.replaceState(null, '', `#limit=${encodeURIComponent(name)}`);
      refreshDetail();
      applyFeedFilter();
    }
    limits.get(name).row.classList.add('selected');
    updateDetailStatic();
    updateDetailLive();
    drawCharts();
  }

  function updateDetailStatic() {
    const e = selected && limits.get(selected);
    if (!e) return;
    const m = (detailDoc && detailDoc.name === e.name ? detailDoc : null) || e.meta || {};
    setText($('detail-name'), e.name);
    const kind = $('detail-kind');
    kind.hidden = !e.kind;
    setText(kind, e.kind || '');
    setText($('detail-spec'), m.spec || '');
    $('detail-spec').title = m.spec || '';
    const r = limitRate(m);
    let rate = '–';
    if (e.kind === 'concurrency') rate = m.limit != null ? `${fmtInt(m.limit)} at once` : '–';
    else if (e.kind === 'quota') rate = ruleText(m, 'quota') || '–';
    else if (m.limit != null && m.period_ms) rate = `${fmtInt(m.limit)} per ${fmtPeriod(m.period_ms)}${r != null ? ` = ${fmtRate(r)}/s` : ''}`;
    if (m.period_ms === 1000 && e.kind !== 'concurrency' && m.limit != null) rate = `${fmtInt(m.limit)} per second`;
    setText($('f-rate'), rate);
    setText($('f-burst'), m.burst != null ? fmtInt(m.burst) : '–');
    setText($('f-key'), m.key || '–');
    $('f-key').title = m.key || '';
    setText($('f-overflow'), m.overflow || '–');
    setText($('lg-limit'), r != null ? `${fmtRate(r)}/s${m.key && m.key !== 'none' ? ' per key' : ''}` : '');
    $('lg-limit-item').hidden = r == null;
  }

  function updateDetailLive() {
    const e = selected && limits.get(selected);
    if (!e) return;
    const m = detailDoc && detailDoc.name === e.name ? detailDoc : e.meta;
    const st = $('detail-state');
    st.hidden = false;
    st.className = `state state-${e.state}`;
    setText(st, STATE_LABEL[e.state]);
    setText($('f-keys'), fmtInt(e.keys));
    setText($('f-parked'), fmtInt(e.parked));
    setText($('f-allowed'), fmtInt(e.prev && e.prev.allowed_total));
    setText($('f-denied'), fmtInt(e.prev && e.prev.denied_total));
    setText($('f-units'), fmtInt(e.prev && e.prev.units_total));
    setText($('f-bytes'), m ? fmtBytes(m.bytes) : '–');
    setText($('f-untracked'), m ? fmtInt(m.untracked_total) : '–');
    const rej = m ? m.rejected_total : null;
    if (rej != null && typeof rej === 'object') {
      setText($('f-rejected'), fmtInt(Object.values(rej).reduce((a, b) => a + (Number(b) || 0), 0)));
      $('f-rejected').title = Object.entries(rej).map(([k, v]) => `${k}: ${v}`).join(', ');
    } else {
      setText($('f-rejected'), rej != null ? fmtInt(rej) : '–');
    }
    setText($('f-pkeys'), m && m.parked_keys != null ? fmtInt(m.parked_keys) : '–');
    setText($('f-throttled'), m && m.throttled_wanted_total != null
      ? fmtInt(Math.max(0, m.throttled_wanted_total - (m.throttled_granted_total || 0))) : '–');
    const wake = m && detailDoc === m ? absTime(m.next_slot_ms, detailBase) : null;
    setRel($('f-next'), wake, true);
    setText($('f-refused'), m ? fmtInt(m.refused_total) : '–');
    setText($('lg-allowed'), fmtRate(e.cur.a));
    setText($('lg-denied'), fmtRate(e.cur.d));
    $('lg-units-item').hidden = !e.unitsDiffer;
    setText($('lg-units'), fmtRate(e.cur.u));
    setText($('lg-parked'), fmtInt(e.parked));
  }

  async function refreshDetail() {
    const name = selected;
    if (!name) return;
    try {
      const doc = await api(`/api/limits/${encodeURIComponent(name)}`);
      if (selected !== name) return;
      detailDoc = doc;
      detailBase = serverNow();
      const e = limits.get(name);
      if (e) { e.meta = Object.assign({}, e.meta || {}, doc); delete e.meta.top_keys; updateRow(e); }
      updateDetailStatic();
      updateDetailLive();
      renderTopKeys(doc.top_keys || []);
    } catch (err) {
      if (err.status === 404 && selected === name) {
        renderTopKeys([]);
      }
    }
  }

  /* The most throttled keys: rows keyed by key, patched in place, in the server's order. */
  const keyRows = new Map();
  function renderTopKeys(list) {
    const body = $('topkeys-body');
    const seen = new Set();
    let at = body.firstChild;
    for (const k of list) {
      const id = String(k.key);
      seen.add(id);
      let r = keyRows.get(id);
      if (!r) {
        const tr = document.createElement('tr');
        const kc = el('td', '', id === '' ? '(global)' : id);
        kc.title = id;
        if (id === '') kc.classList.add('muted');
        r = { tr, parked: el('td', 'num'), slot: el('td', 'num'), denied: el('td', 'num'), rate: el('td', 'num c-keyrate') };
        tr.append(kc, r.parked, r.slot, r.denied, r.rate);
        keyRows.set(id, r);
      }
      setText(r.parked, fmtInt(k.parked));
      r.parked.classList.toggle('parked-hot', k.parked > 0);
      setText(r.denied, fmtInt(k.denied_total));
      const abs = absTime(k.next_slot_ms, detailBase);
      if (abs == null) { delete r.slot.dataset.abs; setText(r.slot, '–'); }
      else { r.slot.dataset.abs = String(abs); setText(r.slot, fmtRel(abs, true)); }
      r.slot.title = abs != null && abs >= 0 ? fmtClock(abs) : '';
      renderKeyRate(r.rate, k.rate);
      if (at === r.tr) at = at.nextSibling;
      else body.insertBefore(r.tr, at);
    }
    for (const [id, r] of keyRows) if (!seen.has(id)) { r.tr.remove(); keyRows.delete(id); }
    $('topkeys-empty').hidden = list.length > 0;
    setText($('topkeys-empty'), 'No key is throttled.');
  }

  /* A key's rate now (top_keys[].rate: null for limits that are not rate limits). A key running
   * below its configured rate is marked (▼, class rate-slowed, data-slowed) and its tooltip says
   * the configured rate and why; a key held back by a 429 says until when. */
  function renderKeyRate(td, rate) {
    if (!rate || typeof rate !== 'object') {
      setText(td, '–');
      td.classList.remove('rate-slowed');
      delete td.dataset.slowed;
      td.title = '';
      return;
    }
    const slowed = rate.slowed === true;
    setText(td, slowed ? `▼ ${rate.rate}` : String(rate.rate));
    td.classList.toggle('rate-slowed', slowed);
    td.dataset.slowed = slowed ? '1' : '0';
    const held = absTime(rate.held_until_ms, detailBase);
    td.title = `${rate.rate} (configured ${rate.configured}): ${rate.why}`
      + (held != null && held >= 0 ? `; held back until ${fmtClock(held)}` : '');
  }

  /* ---- Charts ---------------------------------------------------------------------------- */

  const COLORS = { allowed: '#1f5fbf', units: '#6b9ee0', denied: '#c2410c', parked: '#b7791f',
    limit: '#1b2129', grid: '#edf0f3', axis: '#8a939e' };

  /* Sizes a canvas to its box at the device's pixel ratio; returns its context and CSS size. */
  function fit(canvas) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (!w || !h) return null;
    const W = Math.round(w * dpr), H = Math.round(h * dpr);
    if (canvas.width !== W || canvas.height !== H) { canvas.width = W; canvas.height = H; }
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    return { ctx, w, h };
  }

  /* A tick step of 1, 2 or 5 times a power of ten giving about n ticks up to max. */
  function niceStep(max, n) {
    const raw = max / n;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
  }

  /* Strokes one series through the samples in view, breaking at gaps and missing values. */
  function tracePath(ctx, pts, key, x, y) {
    let pen = false, n = 0;
    ctx.beginPath();
    for (const p of pts) {
      const v = p.gap ? null : p[key];
      if (v == null) { pen = false; continue; }
      if (pen) ctx.lineTo(x(p.t), y(v));
      else { ctx.moveTo(x(p.t), y(v)); pen = true; }
      n++;
    }
    return n;
  }

  function fillUnder(ctx, pts, key, x, y, y0, color) {
    ctx.fillStyle = color;
    let run = [];
    const flush = () => {
      if (run.length > 1) {
        ctx.beginPath();
        ctx.moveTo(x(run[0].t), y0);
        for (const p of run) ctx.lineTo(x(p.t), y(p[key]));
        ctx.lineTo(x(run[run.length - 1].t), y0);
        ctx.closePath();
        ctx.fill();
      }
      run = [];
    };
    for (const p of pts) {
      if (p.gap || p[key] == null) flush();
      else run.push(p);
    }
    flush();
  }

  const charts = {}; /* per canvas id: the last layout, for the hover read-out */

  /* Draws a time chart of `series` over the last SPAN_MS, with an optional limit line. */
  function timeChart(canvas, hist, series, opt) {
    const f = fit(canvas);
    if (!f) return 0;
    const { ctx, w, h } = f;
    const L = 46, R = 12, T = 10, B = opt.xLabels ? 22 : 6;
    const now = hist.length ? Math.max(hist[hist.length - 1].t, serverNow() - 1500) : serverNow();
    const t0 = now - SPAN_MS;
    const pts = hist.filter((p) => p.t >= t0 - 2000);
    let max = 0;
    for (const p of pts) for (const s of series) if (!p.gap && p[s.key] != null) max = Math.max(max, p[s.key]);
    if (opt.limit != null) max = Math.max(max, opt.limit * 1.18);
    if (max <= 0) max = opt.integer ? 4 : 1;
    const step = niceStep(max, opt.ticks || 4);
    if (opt.integer && step < 1) max = Math.max(max, 1);
    const stp = opt.integer ? Math.max(1, step) : step;
    const top = Math.ceil(max / stp) * stp;
    const x = (t) => L + ((t - t0) / SPAN_MS) * (w - L - R);
    const y = (v) => T + (1 - v / top) * (h - T - B);
    const y0 = y(0);

    ctx.font = '11px system-ui, -apple-system, "Segoe UI", Roboto, Arial, "DejaVu Sans", sans-serif';
    ctx.lineWidth = 1;
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    for (let v = 0; v <= top + stp / 1000; v += stp) {
      const yy = Math.round(y(v)) + 0.5;
      ctx.strokeStyle = v === 0 ? '#d5dae0' : COLORS.grid;
      ctx.beginPath(); ctx.moveTo(L, yy); ctx.lineTo(w - R, yy); ctx.stroke();
      ctx.fillStyle = COLORS.axis;
      ctx.fillText(opt.fmtY(v, stp), L - 8, yy);
    }
    if (opt.xLabels) {
      ctx.textBaseline = 'alphabetic';
      ctx.textAlign = 'center';
      for (let s = 0; s <= SPAN_MS / 1000; s += 30) {
        const xx = Math.round(x(now - s * 1000)) + 0.5;
        ctx.strokeStyle = COLORS.grid;
        ctx.beginPath(); ctx.moveTo(xx, T); ctx.lineTo(xx, y0); ctx.stroke();
        ctx.fillStyle = COLORS.axis;
        ctx.textAlign = s === 0 ? 'right' : 'center';
        ctx.fillText(s === 0 ? 'now' : `−${s} s`, xx, h - 6);
      }
    }

    /* The limit line goes under the data, its label over it. */
    if (opt.limit != null) {
      const yy = Math.round(y(opt.limit)) + 0.5;
      ctx.save();
      ctx.setLineDash([5, 4]);
      ctx.strokeStyle = COLORS.limit;
      ctx.lineWidth = 1.25;
      ctx.beginPath(); ctx.moveTo(L, yy); ctx.lineTo(w - R, yy); ctx.stroke();
      ctx.restore();
    }
    ctx.save();
    ctx.beginPath();
    ctx.rect(L, 0, w - L - R, h);
    ctx.clip();
    let drawn = 0;
    for (const s of series) {
      if (s.fill) fillUnder(ctx, pts, s.key, x, y, y0, s.fill);
      const n = tracePath(ctx, pts, s.key, x, y);
      ctx.strokeStyle = s.color;
      ctx.lineWidth = s.width || 1.75;
      ctx.lineJoin = 'round';
      ctx.stroke();
      drawn += n;
    }
    ctx.restore();

    if (opt.limit != null) {
      const yy = Math.round(y(opt.limit)) + 0.5;
      ctx.fillStyle = COLORS.limit;
      ctx.textAlign = 'left';
      ctx.textBaseline = 'bottom';
      const label = `limit ${fmtRate(opt.limit)}/s${opt.perKey ? ' per key' : ''}`;
      const tw = ctx.measureText(label).width;
      ctx.fillStyle = 'rgba(255,255,255,.85)';
      ctx.fillRect(L + 6, yy - 16, tw + 6, 14);
      ctx.fillStyle = COLORS.limit;
      ctx.fillText(label, L + 9, yy - 3);
    }
    charts[canvas.id] = { pts, x, y, L, R, T, B, w, h, series, hover: opt.hover, t0 };
    canvas.dataset.points = String(drawn);
    return drawn;
  }

  function drawCharts() {
    const e = selected && limits.get(selected);
    const hist = e ? e.hist : [];
    const meta = e ? (detailDoc && detailDoc.name === e.name ? detailDoc : e.meta) : null;
    /* Drawn in this order, so that grants (the line that matters against the limit) are on top. */
    const series = [{ key: 'd', color: COLORS.denied, width: 1.5, label: 'denied/s' }];
    if (e && e.unitsDiffer) series.push({ key: 'u', color: COLORS.units, width: 1.25, label: 'units/s' });
    series.push({ key: 'a', color: COLORS.allowed, fill: 'rgba(31,95,191,.08)', label: 'granted/s' });
    const perKey = !!(meta && meta.key && meta.key !== 'none');
    timeChart($('chart-main'), hist, series, { limit: limitRate(meta), perKey, fmtY: fmtTick, xLabels: true, ticks: 4 });
    timeChart($('chart-parked'), hist, [{ key: 'p', color: COLORS.parked, fill: 'rgba(183,121,31,.18)', width: 1.5, label: 'parked' }],
      { limit: null, fmtY: (v) => fmtInt(v), xLabels: false, ticks: 2, integer: true });
  }

  function drawSpark(e) {
    const f = fit(e.spark);
    if (!f) return;
    const { ctx, w, h } = f;
    const now = e.hist.length ? e.hist[e.hist.length - 1].t : serverNow();
    const t0 = now - SPARK_MS;
    const pts = e.hist.filter((p) => p.t >= t0);
    let max = 0, anyD = false;
    for (const p of pts) {
      if (p.gap) continue;
      if (p.a != null) max = Math.max(max, p.a);
      if (p.d != null && p.d > 0) { max = Math.max(max, p.d); anyD = true; }
    }
    const r = e.unitsDiffer ? null : limitRate(e.meta);
    if (r != null && r <= max * 2) max = Math.max(max, r);
    if (max <= 0) max = 1;
    const x = (t) => 1 + ((t - t0) / SPARK_MS) * (w - 2);
    const y = (v) => 2 + (1 - v / max) * (h - 4);
    if (r != null && r <= max) {
      ctx.strokeStyle = 'rgba(27,33,41,.35)';
      ctx.setLineDash([2, 2]);
      ctx.lineWidth = 1;
      ctx.beginPath(); ctx.moveTo(0, Math.round(y(r)) + 0.5); ctx.lineTo(w, Math.round(y(r)) + 0.5); ctx.stroke();
      ctx.setLineDash([]);
    }
    fillUnder(ctx, pts, 'a', x, y, h, 'rgba(31,95,191,.12)');
    if (anyD) {
      tracePath(ctx, pts, 'd', x, y);
      ctx.strokeStyle = COLORS.denied;
      ctx.lineWidth = 1.1;
      ctx.stroke();
    }
    tracePath(ctx, pts, 'a', x, y);
    ctx.strokeStyle = COLORS.allowed;
    ctx.lineWidth = 1.25;
    ctx.stroke();
  }

  /* Hover read-out on the big charts: the sample nearest the pointer. */
  const tip = $('tip');
  function hover(ev) {
    const c = charts[ev.currentTarget.id];
    if (!c || !c.pts.length) { tip.hidden = true; return; }
    const rect = ev.currentTarget.getBoundingClientRect();
    const mx = ev.clientX - rect.left;
    let best = null, bd = Infinity;
    for (const p of c.pts) {
      if (p.gap) continue;
      const d = Math.abs(c.x(p.t) - mx);
      if (d < bd) { bd = d; best = p; }
    }
    if (!best || bd > 24) { tip.hidden = true; return; }
    tip.textContent = '';
    tip.append(el('div', 'muted', fmtClock(best.t)));
    for (const s of c.series) {
      const row = el('div');
      const b = el('b', '', s.key === 'p' ? fmtInt(best[s.key]) : fmtRate(best[s.key]));
      b.style.color = s.key === 'a' ? '#9cc0f5' : s.key === 'u' ? '#b9d2f5' : s.key === 'd' ? '#f4a77f' : '#f0c674';
      row.append(`${s.label} `, b);
      tip.append(row);
    }
    tip.hidden = false;
    const tx = Math.min(window.innerWidth - tip.offsetWidth - 8, ev.clientX + 14);
    tip.style.left = `${tx}px`;
    tip.style.top = `${ev.clientY + 14}px`;
  }
  for (const id of ['chart-main', 'chart-parked']) {
    $(id).addEventListener('mousemove', hover);
    $(id).addEventListener('mouseleave', () => { tip.hidden = true; });
  }
  if ('ResizeObserver' in window) {
    const ro = new ResizeObserver(() => drawCharts());
    ro.observe($('chart-main'));
    ro.observe($('chart-parked'));
  } else {
    window.addEventListener('resize', drawCharts);
  }

  /* ---- Task lookup ----------------------------------------------------------------------- */

  let taskId = null;
  let taskBase = 0;
  const TERMINAL = new Set(['done', 'failed', 'cancelled']);
  let taskFinal = false;

  function taskMessage(text, isErr) {
    const m = $('task-msg');
    m.hidden = !text;
    m.textContent = text || '';
    m.classList.toggle('err', !!isErr);
  }

  /* Shows a server time relative to now, kept current by the ticker; `future` times that have
   * passed read "now" (a slot in the past is available). */
  function setRel(elm, abs, future) {
    if (abs == null) { delete elm.dataset.abs; setText(elm, '–'); return; }
    elm.dataset.abs = String(abs);
    if (future) elm.dataset.future = '1'; else delete elm.dataset.future;
    setText(elm, relText(elm));
  }
  function relText(elm) {
    const abs = Number(elm.dataset.abs);
    const future = !!elm.dataset.future;
    const c = future && abs >= 0 && abs > serverNow() ? ` · ${fmtClock(abs)}` : '';
    return fmtRel(abs, future) + c;
  }

  function renderTask(t) {
    const box = $('task');
    const x = t.explain || {};
    const state = t.state || x.state || '';
    box.dataset.state = state;
    taskBase = serverNow();
    setText($('task-title'), `#${t.id}`);
    const st = $('task-state');
    st.className = `state state-${state}`;
    setText(st, state);
    setText($('task-type'), t.type ? `${t.type}` : '');
    setText($('task-explain'), x.text || (state === 'parked' ? 'Waiting for budget.' : `The task is ${state}.`));
    const parked = state === 'parked';
    $('tf-throttled-row').hidden = !parked;
    setRel($('tf-throttled'), parked ? absTime(x.wake_ms, taskBase) : null, true);
    /* position counts the tasks ahead on the key (0 = next); shown from 1. */
    setText($('tf-position'), x.position != null ? (x.queue_length != null ? `${fmtInt(x.position + 1)} of ${fmtInt(x.queue_length)}` : fmtInt(x.position + 1)) : '–');
    $('tf-position').title = x.position != null ? `${x.position} task${x.position === 1 ? '' : 's'} ahead on this key` : '';
    setRel($('tf-start'), absTime(x.estimated_start_ms, taskBase), true);
    const lk = x.limit ? `${x.limit}${x.key ? ` · ${x.key}` : ''}` : '–';
    setText($('tf-limit'), lk);
    $('tf-limit').title = lk;
    setText($('tf-attempt'), t.attempt != null ? fmtInt(t.attempt) : '–');
    setText($('tf-prio'), `${t.priority != null ? t.priority : '–'} · ${t.units != null ? fmtInt(t.units) : '–'}`);
    setRel($('tf-submitted'), absTime(t.submitted_ms, taskBase), false);
    setRel($('tf-lease'), state === 'running' ? absTime(t.lease_until_ms, taskBase) : null, false);
    const fl = $('task-failure');
    if (t.failure && typeof t.failure === 'object') {
      const f = t.failure;
      const parts = [];
      if (f.reason) parts.push(`Failed: ${f.reason}`);
      if (f.message) parts.push(f.message);
      if (f.limit) parts.push(`limit ${f.limit}${f.key ? ` key ${f.key}` : ''}${f.retry_after_ms != null && f.retry_after_ms >= 0 ? `, room in ${fmtDur(f.retry_after_ms)}` : ''}`);
      setText(fl, parts.length ? parts.join(' — ') : JSON.stringify(f));
      fl.hidden = false;
    } else {
      fl.hidden = true;
    }
    box.hidden = false;
    taskFinal = TERMINAL.has(state);
  }

  async function lookup(id, quiet) {
    try {
      const t = await api(`/api/tasks/${encodeURIComponent(id)}`);
      if (taskId !== id) return;
      taskMessage('');
      renderTask(t);
    } catch (err) {
      if (taskId !== id) return;
      if (err.status === 404) {
        $('task').hidden = true;
        taskMessage((err.body && err.body.message) || `No task ${id}.`, true);
        taskFinal = true;
      } else if (!quiet && err.status !== 401) {
        taskMessage(err.status ? err.message : 'The server did not answer.', true);
      }
    }
  }

  $('lookup-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const id = $('task-id').value.trim().replace(/^#/, '');
    if (!/^[0-9]+$/.test(id) || id === '0' || /^0+$/.test(id)) {
      taskId = null;
      $('task').hidden = true;
      taskMessage(id ? 'A task id is a positive whole number.' : '', !!id);
      return;
    }
    taskId = id;
    taskFinal = false;
    taskMessage('Looking up…');
    lookup(id, false);
  });

  /* ---- Events ---------------------------------------------------------------------------- */

  const feed = $('feed');
  let pending = [];
  let feedFrame = 0;
  let feedTotal = 0;

  function eventText(ev) {
    if (ev.text) return ev.text;
    if (ev.message) return ev.message;
    const n = ev.count || 1;
    const tasks = `${fmtInt(n)} task${n === 1 ? '' : 's'}`;
    switch (ev.kind) {
      case 'deferred': return `${tasks} parked${ev.next_slot_ms ? `; next slot ${fmtClock(absTime(ev.next_slot_ms, serverNow()))}` : ''}`;
      case 'throttled': return ev.wanted != null ? `a poll wanted ${ev.wanted}, ${ev.granted || 0} granted` : `${fmtInt(n)} poll${n === 1 ? '' : 's'} throttled`;
      case 'rejected': return `${tasks} failed by the limit`;
      case 'unknown_limit': return `type ${ev.type || '?'} names a limit that does not exist`;
      case 'budget': return ev.wanted != null ? `crossed ${ev.wanted}% of its budget` : 'budget threshold crossed';
      case 'key_cap': return 'the key table is full';
      case 'recurring_too_fast': return `series ${ev.key || '?'} is scheduled every ${(ev.wanted || 0) / 1e9} s, faster than the limit's ${(ev.granted || 0) / 1e9} s: occurrences will wait`;
      case 'dropped': return `${fmtInt(n)} event${n === 1 ? '' : 's'} dropped: this page fell behind`;
      default: return '';
    }
  }

  function eventItem(ev) {
    const li = el('li');
    const summary = ev.summary === true || ev.summary === 1 || ev.summary === '1';
    if (summary) li.classList.add('summary');
    li.dataset.limit = ev.limit || '';
    li.append(el('span', 'ev-time', fmtClock(absTime(ev.at_ms, serverNow())) || '–'));
    const line = el('div', 'ev-line');
    const kind = String(ev.kind || 'event');
    line.append(el('span', `ev-kind k-${kind.replace(/[^a-z_]/gi, '')}`, kind.replace(/_/g, ' ')));
    const w = el('span', 'ev-where', ev.limit || ev.type || '—');
    w.title = ev.limit || '';
    line.append(w);
    if (summary) line.append(el('span', 'ev-tag', `summary ×${fmtInt(ev.count || 0)}`));
    else if (ev.count > 1) line.append(el('span', 'ev-tag', `×${fmtInt(ev.count)}`));
    const ctx = [];
    if (ev.key != null && ev.key !== '') ctx.push(`key ${ev.key}`);
    if (ev.type && ev.limit) ctx.push(`type ${ev.type}`);
    const text = el('span', 'ev-text');
    if (ctx.length && !ev.text && !ev.message) text.append(el('span', 'ev-ctx', ctx.join(' · ')));
    text.append(eventText(ev));
    li.append(line, text);
    li.hidden = $('events-only').checked && (ev.limit || '') !== selected;
    return li;
  }

  function flushEvents() {
    feedFrame = 0;
    const batch = pending.splice(0).slice(-FEED_MAX);
    if (!batch.length) return;
    const keep = feed.scrollTop > 2;
    const h0 = feed.scrollHeight;
    const frag = document.createDocumentFragment();
    for (let i = batch.length - 1; i >= 0; i--) frag.append(eventItem(batch[i]));
    feed.insertBefore(frag, feed.firstChild);
    while (feed.children.length > FEED_MAX) feed.lastChild.remove();
    if (keep) feed.scrollTop += feed.scrollHeight - h0;
    $('feed-empty').hidden = true;
    setText($('events-count'), `${fmtInt(feedTotal)} received`);
  }

  function onEvent(data) {
    let ev;
    try { ev = JSON.parse(data); } catch (err) { return; }
    if (!ev || typeof ev !== 'object') return;
    feedTotal++;
    pending.push(ev);
    if (pending.length > FEED_MAX * 2) pending.splice(0, pending.length - FEED_MAX);
    if (!feedFrame) feedFrame = requestAnimationFrame(flushEvents);
  }

  function applyFeedFilter() {
    const only = $('events-only').checked;
    for (const li of feed.children) li.hidden = only && li.dataset.limit !== selected;
  }
  $('events-only').addEventListener('change', applyFeedFilter);

  /* Reads /api/events as a stream (fetch, so that the password can go in a header, which
   * EventSource cannot send), parsing the text/event-stream format; reconnects when it ends. */
  async function eventsLoop() {
    let wait = 1000;
    for (;;) {
      await authReady();
      let got = false;
      try {
        const res = await fetch('/api/events', { headers: headers('text/event-stream'), cache: 'no-store' });
        if (res.status === 401) { needAuth(); continue; }
        if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
        const reader = res.body.getReader();
        const dec = new TextDecoder();
        let buf = '', data = [];
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          got = true;
          buf += dec.decode(value, { stream: true });
          const lines = buf.split(/\r\n|\r|\n/);
          buf = lines.pop();
          for (const line of lines) {
            if (line === '') {
              if (data.length) onEvent(data.join('\n'));
              data = [];
            } else if (line[0] !== ':') {
              const i = line.indexOf(':');
              const field = i < 0 ? line : line.slice(0, i);
              let val = i < 0 ? '' : line.slice(i + 1);
              if (val[0] === ' ') val = val.slice(1);
              if (field === 'data') data.push(val);
              else if (field === 'retry' && /^\d+$/.test(val)) wait = Math.min(Number(val), 10000);
            }
          }
        }
      } catch (err) {
        /* the server went away; the stats poll shows it */
      }
      await sleep(got ? 500 : wait);
      if (!got) wait = Math.min(wait * 2, 5000);
      else wait = 1000;
    }
  }

  /* ---- The poll loop --------------------------------------------------------------------- */

  let pollTimer = 0, fails = 0, polling = false;

  function kickPoll() {
    clearTimeout(pollTimer);
    pollTimer = setTimeout(poll, 0);
  }

  async function poll() {
    if (polling) return;
    polling = true;
    const started = Date.now();
    let next = POLL_MS;
    try {
      await authReady();
      const st = await api('/api/stats');
      fails = 0;
      setConn('live');
      onStats(st);
      const jobs = [];
      if (metaWanted || Date.now() - metaAt > META_MS) jobs.push(api('/api/limits').then(onMeta).catch(() => {}));
      if (selected) jobs.push(refreshDetail());
      if (taskId && !taskFinal) jobs.push(lookup(taskId, true));
      await Promise.all(jobs);
      next = Math.max(100, POLL_MS - (Date.now() - started));
    } catch (err) {
      if (!(err instanceof HttpError)) console.error('sluice dashboard:', err);
      if (err.status === 401) {
        next = POLL_MS;
      } else {
        fails++;
        gapNext = true;
        setConn('down');
        next = Math.min(5000, 1000 * fails);
      }
    } finally {
      polling = false;
    }
    clearTimeout(pollTimer);
    pollTimer = setTimeout(poll, next);
  }

  /* Relative times count down between polls. */
  setInterval(() => {
    for (const e of document.querySelectorAll('#topkeys-body [data-abs]')) setText(e, fmtRel(Number(e.dataset.abs), true));
    for (const e of document.querySelectorAll('#task [data-abs], #facts [data-abs]')) setText(e, relText(e));
  }, 200);

  setConn('connecting');
  poll();
  eventsLoop();
})();
