// monitor.js — the live monitor page (index.html): reads JSON snapshots from
// the /v1/monitor WebSocket (subprotocol specd.monitor.v1), keeps the last few
// minutes of them for the uPlot charts, and updates the tiles, the banner and
// the running-sequence table in place. Reconnects by itself (common.js).
import { MIN_PRICED_TPS, ReconnectingSocket, fmt, fmtClock, fmtMs, fmtUsd, pricedCost, proposerShares, showConnState,
  wsUrl } from './common.js';

const WINDOW_S = 300; // seconds of history in the time charts
const PRICE_KEY = 'specd.monitor.price_per_hour';
const DEFAULT_PRICE = 8; // USD/h: about an on-demand 4×A100 machine ($39.68 per 1M at 56 tok/s)

// uPlot comes from /vendor/uplot/uPlot.iife.min.js (a script tag in index.html,
// installed with the pages); without it the page still shows every number,
// only the charts are missing.
const uPlot = window.uPlot || null;
if (!uPlot) for (const box of document.querySelectorAll('.chart-box')) box.textContent = 'Chart library not available.';

const $ = (id) => document.getElementById(id);
const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

/* ---- time series ---------------------------------------------------------- */
// Column arrays in uPlot's layout: x (unix seconds) then one array per value.
const series = {
  x: [], tps: [], alpha: [], meanAcc: [], prop: [], ttft50: [], ttft99: [], tpot50: [], tpot99: [],
  eagleAcc: [], liveAcc: [], // learning from traffic: the EAGLE head's served acceptance, its held-out figure
};
// head swaps seen in the feed (learn.head_version changed): {t, version}, drawn as markers on the learning chart
const swaps = [];
let swapsSeen = 0;
let lastHeadVersion = null;
const eagleRate = (s) => {
  const e = (s?.proposal?.by_method || []).find((x) => x && x.method === 'eagle');
  return e ? num(e.accept_rate) : null;
};
const fmtNum = (v) => fmtMs(v).replace(' ms', '');
const num = (v) => (v === null || v === undefined || !Number.isFinite(Number(v)) ? null : Number(v));

function pushPoint(t, s) {
  series.x.push(t);
  series.tps.push(s ? num(s.tokens_per_s) : null);
  series.alpha.push(s ? num(s.alpha) : null);
  series.meanAcc.push(s ? num(s.mean_accepted) : null);
  series.prop.push(s ? num(s.proposal?.per_step) : null);
  series.ttft50.push(s ? num(s.ttft_ms?.p50) : null);
  series.ttft99.push(s ? num(s.ttft_ms?.p99) : null);
  series.tpot50.push(s ? num(s.tpot_ms?.p50) : null);
  series.tpot99.push(s ? num(s.tpot_ms?.p99) : null);
  series.eagleAcc.push(s ? eagleRate(s) : null);
  series.liveAcc.push(s && s.learn?.enabled && s.learn.rounds > 0 ? num(s.learn.live_accept) : null);
  while (series.x.length && series.x[0] < t - WINDOW_S) for (const k in series) series[k].shift();
  while (swaps.length && swaps[0].t < t - WINDOW_S) swaps.shift();
}

/* ---- charts --------------------------------------------------------------- */
const charts = [];

function axisStyle() {
  return { stroke: css('--muted'), grid: { stroke: css('--line'), width: 1 }, ticks: { stroke: css('--line') } };
}

function makeChart(boxId, opts, data) {
  if (!uPlot) return null;
  const box = $(boxId);
  // for tests and curious users: the x axis's tick labels as drawn (uPlot draws them on a canvas)
  const hooks = { draw: [(u) => { box.dataset.xlabels = JSON.stringify(u.axes[0]._values || []); },
    ...(opts.hooks?.draw || [])] };
  const u = new uPlot({ width: Math.max(200, box.clientWidth), height: 180, legend: { live: false }, ...opts, hooks },
    data, box);
  new ResizeObserver(() => u.setSize({ width: Math.max(200, box.clientWidth), height: 180 })).observe(box);
  charts.push(u);
  return u;
}

// the time axis: wall-clock HH:MM:SS at whole seconds (uPlot's default reads ":26.000" at this zoom)
function timeAxis() {
  return { ...axisStyle(), space: 70, incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300, 600],
    values: (u, splits) => splits.map((v) => fmtClock(v)) };
}
const timeScale = { time: true };

const line = (label, colour, extra = {}) => ({ label, stroke: colour, width: 2, spanGaps: false, points: { show: false }, ...extra });

const chartTps = makeChart('chart-tps', {
  series: [{ value: (u, v) => fmtClock(v) }, line('tokens/s', css('--s1'), { fill: css('--s1') + '22', value: (u, v) => fmt(v, 1) })],
  axes: [timeAxis(), axisStyle()],
  scales: { x: timeScale, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
}, [series.x, series.tps]);

const chartAlpha = makeChart('chart-alpha', {
  series: [{ value: (u, v) => fmtClock(v) },
    line('α', css('--s1'), { scale: 'a', value: (u, v) => fmt(v, 2) }),
    line('mean accepted', css('--s2'), { scale: 'm', value: (u, v) => fmt(v, 2) }),
    line('proposed / step', css('--s4'), { scale: 'm', dash: [4, 3], value: (u, v) => fmt(v, 2) })],
  axes: [timeAxis(), { ...axisStyle(), scale: 'a' }, { ...axisStyle(), scale: 'm', side: 1, grid: { show: false } }],
  scales: { x: timeScale, a: { range: [0, 1] }, m: { range: (u, min, max) => [0, Math.max(1, Math.ceil(max))] } },
}, [series.x, series.alpha, series.meanAcc, series.prop]);

const chartLat = makeChart('chart-lat', {
  series: [{ value: (u, v) => fmtClock(v) },
    line('TTFT p50', css('--s1'), { value: (u, v) => fmt(v, 1) }),
    line('TTFT p99', css('--s1'), { dash: [6, 4], value: (u, v) => fmt(v, 1) }),
    line('TPOT p50', css('--s3'), { value: (u, v) => fmt(v, 2) }),
    line('TPOT p99', css('--s3'), { dash: [6, 4], value: (u, v) => fmt(v, 2) })],
  axes: [timeAxis(), axisStyle()],
  scales: { x: timeScale, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
}, [series.x, series.ttft50, series.ttft99, series.tpot50, series.tpot99]);

const chartHist = makeChart('chart-hist', {
  scales: { x: { time: false, range: (u, min, max) => [min - 0.5, max + 0.5] }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
  series: [{ label: 'accepted' },
    { label: 'verify steps', stroke: css('--s4'), fill: css('--s4') + '88', width: 1,
      paths: uPlot ? uPlot.paths.bars({ size: [0.7, 60] }) : undefined, points: { show: false } }],
  axes: [{ ...axisStyle(), incrs: [1], values: (u, vals) => vals.map((v) => String(v)) }, axisStyle()],
}, [[0], [0]]);

// a dashed vertical line with its version at each head swap inside the chart's time range
function drawSwaps(u) {
  const { ctx, bbox } = u;
  ctx.save();
  ctx.strokeStyle = css('--s2');
  ctx.fillStyle = css('--s2');
  ctx.lineWidth = 1.5 * devicePixelRatio;
  ctx.setLineDash([5 * devicePixelRatio, 4 * devicePixelRatio]);
  ctx.font = `${11 * devicePixelRatio}px sans-serif`;
  for (const sw of swaps) {
    const x = Math.round(u.valToPos(sw.t, 'x', true));
    if (x < bbox.left || x > bbox.left + bbox.width) continue;
    ctx.beginPath();
    ctx.moveTo(x, bbox.top);
    ctx.lineTo(x, bbox.top + bbox.height);
    ctx.stroke();
    ctx.fillText(`v${sw.version}`, x + 3 * devicePixelRatio, bbox.top + 12 * devicePixelRatio);
  }
  ctx.restore();
}

const chartLearn = makeChart('chart-learn', {
  series: [{ value: (u, v) => fmtClock(v) },
    line('α (all proposers)', css('--s1'), { scale: 'a', value: (u, v) => fmt(v, 2) }),
    line('EAGLE head acceptance', css('--s3'), { scale: 'a', value: (u, v) => fmt(v, 2) }),
    line('held-out accepted / pass', css('--s4'), { scale: 'm', dash: [4, 3], value: (u, v) => fmt(v, 2) })],
  axes: [timeAxis(), { ...axisStyle(), scale: 'a' }, { ...axisStyle(), scale: 'm', side: 1, grid: { show: false } }],
  scales: { x: timeScale, a: { range: [0, 1] }, m: { range: (u, min, max) => [0, Math.max(1, Math.ceil(max))] } },
  hooks: { draw: [drawSwaps] },
}, [series.x, series.alpha, series.eagleAcc, series.liveAcc]);

function redrawCharts() {
  const data = [series.x, series.tps];
  if (chartTps) chartTps.setData(data);
  if (chartAlpha) chartAlpha.setData([series.x, series.alpha, series.meanAcc, series.prop]);
  if (chartLat) chartLat.setData([series.x, series.ttft50, series.ttft99, series.tpot50, series.tpot99]);
  if (chartLearn && !$('learn-panel').hidden) chartLearn.setData([series.x, series.alpha, series.eagleAcc, series.liveAcc]);
  // for tests and curious users: how many snapshot points the time charts hold
  $('chart-tps').dataset.points = String(series.tps.filter((v) => v !== null).length);
}

/* ---- tiles, banner, tables ------------------------------------------------ */
function setText(id, text) {
  const el = $(id);
  if (el.textContent !== text) el.textContent = text;
}

function showKv(id, kv) {
  const meter = $(id);
  const total = kv && kv.total > 0 ? kv.total : 0;
  meter.max = Math.max(1, total);
  meter.value = kv ? kv.used : 0;
  setText('v-' + id, kv ? `${kv.used} used / ${kv.free} free of ${kv.total}` : '—');
}

let lastTps = null;
function showCost() {
  const price = Number($('price').value);
  // a dash until there is throughput to price (idle: the rate decays towards 0)
  setText('v-cost', fmtUsd(lastTps === null ? null : pricedCost(price, lastTps)));
  const busy = series.tps.filter((v) => v !== null && v >= MIN_PRICED_TPS);
  const avg = busy.length ? busy.reduce((a, b) => a + b, 0) / busy.length : null;
  setText('v-cost-avg', avg ? `${fmtUsd(pricedCost(price, avg))} at the ${WINDOW_S / 60}-min busy average (${fmt(avg, 0)} tok/s)`
    : lastTps !== null ? `idle: no throughput to price yet (at $${fmt(price, 2)}/h)` : `at $${fmt(price, 2)}/h and the current rate`);
}

const rows = new Map(); // session id → <tr>
function showSequences(seqs) {
  const body = $('seq-body');
  const seen = new Set();
  for (const s of seqs || []) {
    const id = String(s.id);
    seen.add(id);
    let tr = rows.get(id);
    if (!tr) {
      tr = document.createElement('tr');
      tr.dataset.id = id;
      for (let i = 0; i < 7; i++) tr.appendChild(document.createElement('td'));
      tr.cells[0].className = 'id';
      tr.cells[0].title = id;
      tr.cells[1].className = tr.cells[2].className = 'txt';
      rows.set(id, tr);
      body.appendChild(tr);
    }
    const vals = [id.slice(0, 8), s.content_type || '—', (s.mode || '—') + (s.method && s.method !== 'plain' ? ' · ' + s.method : '') + (s.shape && s.shape !== 'chain' ? ' · ' + s.shape : '') + (s.prefilling ? ' · prefill' : ''), String(s.gamma ?? '—'), fmt(s.alpha, 2),
      String(s.tokens ?? '—'), fmt(s.tokens_per_s, 1)];
    vals.forEach((v, i) => { if (tr.cells[i].textContent !== v) tr.cells[i].textContent = v; });
  }
  for (const [id, tr] of rows) {
    if (!seen.has(id)) {
      tr.remove();
      rows.delete(id);
    }
  }
  const empty = body.querySelector('tr.empty');
  if (rows.size && empty) empty.remove();
  if (!rows.size && !empty) {
    const tr = document.createElement('tr');
    tr.className = 'empty';
    tr.innerHTML = '<td colspan="7">No running sequences</td>';
    body.appendChild(tr);
  }
}

function showPositions(pp) {
  const body = $('pos-body');
  const list = Array.isArray(pp) ? pp : [];
  while (body.rows.length > list.length) body.deleteRow(-1);
  while (body.rows.length < list.length) {
    const tr = body.insertRow();
    tr.insertCell();
    tr.insertCell();
  }
  list.forEach((p, i) => {
    const a = String(p.position), b = p.rate === null || p.rate === undefined ? '—' : `${fmt(100 * p.rate, 1)} %`;
    if (body.rows[i].cells[0].textContent !== a) body.rows[i].cells[0].textContent = a;
    if (body.rows[i].cells[1].textContent !== b) body.rows[i].cells[1].textContent = b;
  });
}

function showBanner(s) {
  const m = s.model || {};
  setText('model-target', m.target || '—');
  setText('model-draft', m.draft ? m.draft : 'none');
  setText('backend', m.backend_desc || (m.backend ? (m.simd ? `${m.backend} (${m.simd})` : m.backend) : '—'));
  const p = s.policy || {};
  setText('policy-version', p.version !== undefined ? `v${p.version}` : '—');
  const warn = $('policy-warning');
  const failed = p.last_reload_ok === false;
  const msg = failed ? `⚠ The last policy reload failed — still serving policy v${p.version}. ${p.last_reload_message || ''}` : '';
  if (warn.hidden === failed) warn.hidden = !failed;
  if (warn.textContent !== msg) warn.textContent = msg;
}

// the server-wide proposal size and each proposer's share of the target passes (snapshot.proposal)
function showProposal(p) {
  const per = p ? num(p.per_step) : null, trees = p ? num(p.tree_share) : null;
  setText('v-gamma', fmt(per, 2));
  setText('v-gamma-sub', per === null ? 'drafted tokens (γ) or tree nodes: no verify steps lately'
    : trees ? `tokens or tree nodes per verify step · ${fmt(100 * trees, 0)}% trees` : 'drafted tokens (γ) per verify step');
  const shares = proposerShares(p?.by_method);
  const bar = $('share-bar');
  const key = shares.map((x) => `${x.method}:${x.pct}`).join(',');
  if (bar.dataset.key !== key) {
    bar.dataset.key = key;
    bar.replaceChildren(...shares.filter((x) => x.share > 0).map((x) => {
      const seg = document.createElement('span');
      seg.className = `seg m-${x.method}`;
      seg.style.width = `${(100 * x.share).toFixed(2)}%`;
      seg.title = `${x.label}: ${x.pct}`;
      return seg;
    }));
  }
  setText('v-share', shares.length ? shares.map((x) => `${x.label} ${x.pct}`).join(' · ') : 'no target passes lately');
}

// learning from traffic (snapshot.learn; the panel is hidden while learning is off)
const MIB = 1024 * 1024;
function showLearn(t, l) {
  const panel = $('learn-panel');
  const on = !!(l && l.enabled);
  if (panel.hidden === on) panel.hidden = !on;
  if (!on) return;
  const v = Number(l.head_version);
  if (lastHeadVersion !== null && v !== lastHeadVersion) {
    swaps.push({ t, version: v });
    swapsSeen++;
  }
  lastHeadVersion = v;
  $('chart-learn').dataset.swaps = String(swapsSeen);
  setText('l-head', l.has_head ? `v${v}` : 'none');
  setText('l-state', `${l.state || '—'} · ${l.swaps} swaps, ${l.rejected} rejected, ${l.rollbacks} rollbacks`);
  const r = l.ring || {};
  const meter = $('l-ring');
  meter.max = Math.max(1, Number(r.cap) || 0);
  meter.value = Number(r.bytes) || 0;
  setText('l-ring-sub', `${fmt((Number(r.bytes) || 0) / MIB, 1)} of ${fmt((Number(r.cap) || 0) / MIB, 0)} MiB · ${r.samples ?? 0} requests, `
    + `${r.positions ?? 0} positions · ${l.opted_out ?? 0} opted out`);
  setText('l-rate', l.rounds > 0 ? fmt(l.train_pos_per_s, 0) : '—');
  setText('l-cpu', `CPU share ${l.rounds > 0 ? `${fmt(100 * l.train_cpu_share, 0)}%` : '—'} · ${l.rounds} rounds, `
    + `${l.train_positions} positions`);
  setText('l-accept', l.rounds > 0 ? fmt(l.live_accept, 2) : '—');
  setText('l-cand', l.rounds > 0 ? `last candidate ${fmt(l.cand_accept, 2)} on ${l.eval_rows} held-out positions` : 'no round yet');
  setText('l-msg', l.message || '');
}

let snapshots = 0;
function onSnapshot(s) {
  if (!s || s.type !== 'snapshot') return;
  snapshots++;
  const now = Date.now() / 1000;
  pushPoint(now, s);
  showLearn(now, s.learn);
  lastTps = num(s.tokens_per_s);
  setText('v-tps', fmt(s.tokens_per_s, 1));
  setText('v-alpha', fmt(s.alpha, 2));
  setText('v-mean-acc', fmt(s.mean_accepted, 2));
  setText('v-running', `${s.running ?? '—'} running`);
  setText('v-waiting', String(s.waiting ?? '—'));
  setText('v-prefilling', String(s.prefilling ?? '—'));
  setText('v-ttft', `${fmtNum(s.ttft_ms?.p50)} / ${fmtNum(s.ttft_ms?.p99)}`);
  setText('v-tpot', `${fmtNum(s.tpot_ms?.p50)} / ${fmtNum(s.tpot_ms?.p99)} ms`);
  setText('v-fallbacks', `${s.fallbacks ?? '—'} · ${s.kv_resets ?? '—'}`);
  setText('v-dropped', String(s.telemetry_dropped ?? '—'));
  const pc = s.prefix_cache;
  setText('v-prefix', !pc ? '—' : !pc.enabled ? 'off' : pc.prompt_tokens ? `${(100 * pc.hit_ratio).toFixed(1)}%` : '—');
  setText('v-prefix-sub', pc && pc.enabled ? `${pc.reused_tokens} of ${pc.prompt_tokens} prompt tokens reused` : 'prompt tokens reused');
  const tr = s.tree;
  const trSteps = tr ? tr.chain_steps + tr.tree_steps : 0;
  setText('v-tree', !tr ? '—' : tr.mode === 'off' ? 'off' : trSteps ? `${(100 * tr.tree_steps / trSteps).toFixed(1)}%` : '—');
  setText('v-tree-sub', !tr || tr.mode === 'off' ? 'of tree-enabled steps'
    : `${tr.mode} · ${tr.tree_steps} trees, ${tr.chain_steps} chain-path steps`);
  showProposal(s.proposal);
  showKv('kv-target', s.kv?.target);
  showKv('kv-draft', s.kv?.draft);
  showBanner(s);
  showSequences(s.sequences);
  showPositions(s.per_position);
  const hist = Array.isArray(s.accepted_hist) ? s.accepted_hist : [];
  if (chartHist && hist.length) chartHist.setData([hist.map((_, i) => i), hist.map(Number)]);
  redrawCharts();
  showCost();
  document.body.dataset.snapshots = String(snapshots);
}

/* ---- wiring --------------------------------------------------------------- */
const priceInput = $('price');
const saved = Number(localStorage.getItem(PRICE_KEY));
priceInput.value = String(localStorage.getItem(PRICE_KEY) !== null && Number.isFinite(saved) ? saved : DEFAULT_PRICE);
priceInput.addEventListener('input', () => {
  if (priceInput.value !== '' && Number(priceInput.value) >= 0) localStorage.setItem(PRICE_KEY, priceInput.value);
  showCost();
});
showCost();

const conn = $('conn');
const sock = new ReconnectingSocket(wsUrl('/v1/monitor'), 'specd.monitor.v1', {
  onMessage: onSnapshot,
  onState: (state, info) => {
    showConnState(conn, state, info);
    document.body.dataset.conn = state;
    if (state === 'closed') {
      // a gap in the lines where the server was away; stale rows go
      if (series.x.length && series.tps[series.tps.length - 1] !== null) pushPoint(Date.now() / 1000, null);
      redrawCharts();
      showSequences([]);
      lastTps = null;
      lastHeadVersion = null; // a restarted server starts again at version 0: not a swap
      setText('v-tps', '—');
      showCost();
    }
  },
});
sock.start();
