// common.js — what the monitor and chat pages share: a WebSocket that
// reconnects by itself with backoff, number formatting, the cost formula and
// the split of a tokens frame's text into its draft-accepted and target parts.
// Plain ES module with no DOM access at import time (node's tests import it).

/** ws:// or wss:// URL of `path` on the server that served this page. */
export function wsUrl(path) {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${proto}//${location.host}${path}`;
}

/** USD per 1M output tokens for a machine costing pricePerHour USD that
 *  produces tokensPerS tokens/s; null when either is unusable (idle server,
 *  empty or negative price). */
export function costPerMillion(pricePerHour, tokensPerS) {
  if (!Number.isFinite(pricePerHour) || pricePerHour < 0) return null;
  if (!Number.isFinite(tokensPerS) || tokensPerS <= 0) return null;
  return (pricePerHour / (tokensPerS * 3600)) * 1e6;
}

/** Below this many tokens/s the server is idle (its rate is a decaying
 *  average that only approaches 0): a price divided by it would read
 *  "$4,332,431.86 per 1M", so there is nothing to price yet. */
export const MIN_PRICED_TPS = 1;

/** Cost per 1M output tokens at tokensPerS, or null (shown as a dash) while
 *  the rate is below MIN_PRICED_TPS or the price is not a number ≥ 0. */
export function pricedCost(pricePerHour, tokensPerS) {
  if (!Number.isFinite(tokensPerS) || tokensPerS < MIN_PRICED_TPS) return null;
  return costPerMillion(pricePerHour, tokensPerS);
}

const utf8 = new TextEncoder();
const utf8dec = new TextDecoder();

/** Splits `text` after its first `acceptedBytes` UTF-8 bytes (the part that
 *  came from accepted draft tokens) and returns [draftText, targetText]. A
 *  count inside a multi-byte character is moved back to the character's start;
 *  counts outside [0, bytes] are clamped. */
export function splitAccepted(text, acceptedBytes) {
  const b = utf8.encode(text);
  let n = Math.max(0, Math.min(b.length, Math.floor(Number(acceptedBytes) || 0)));
  while (n > 0 && n < b.length && (b[n] & 0xc0) === 0x80) n--;
  return [utf8dec.decode(b.subarray(0, n)), utf8dec.decode(b.subarray(n))];
}

/** Checks what a user typed into a settings field against its rule (the
 *  data-rule attribute): '0..2', '(0,1]', '[0,1)' (numbers in a range),
 *  'int' (any integer), 'int>=0', 'int>=1', 'int1..16', 'int1..8', 'stop' (at
 *  most 4 lines of 1..63 UTF-8 bytes, one stop string each) or 'schema' (a
 *  JSON object or boolean), '-2..2' and '(0,100]' (the penalties). Empty text is always fine (the server's default).
 *  Returns '' when the value is fine, else a sentence saying what is wrong. */
export function checkField(rule, text) {
  const t = String(text ?? '').trim();
  if (t === '' || !rule) return '';
  if (rule === 'stop') {
    const lines = String(text).split('\n').filter((l) => l !== '');
    if (lines.length > 4) return 'at most 4 stop strings (one a line)';
    if (lines.some((l) => utf8.encode(l).length > 63)) return 'a stop string may be at most 63 bytes';
    return '';
  }
  if (rule === 'schema') {
    let v;
    try { v = JSON.parse(t); } catch (e) { return `not valid JSON: ${e.message}`; }
    return (v !== null && typeof v === 'object' && !Array.isArray(v)) || typeof v === 'boolean'
      ? '' : 'a JSON Schema is an object';
  }
  if (rule.startsWith('int')) {
    if (!/^[-+]?\d+$/.test(t)) return 'a whole number';
    const v = Number(t), m = /^int(?:>=(\d+)|(\d+)\.\.(\d+))?$/.exec(rule);
    if (m && m[1] !== undefined && v < Number(m[1])) return `at least ${m[1]}`;
    if (m && m[2] !== undefined && (v < Number(m[2]) || v > Number(m[3]))) return `from ${m[2]} to ${m[3]}`;
    return '';
  }
  const v = Number(t);
  if (!Number.isFinite(v)) return 'a number';
  if (rule === '0..2') return v >= 0 && v <= 2 ? '' : 'from 0 to 2';
  if (rule === '(0,1]') return v > 0 && v <= 1 ? '' : 'above 0, at most 1';
  if (rule === '[0,1)') return v >= 0 && v < 1 ? '' : 'at least 0, below 1';
  if (rule === '-2..2') return v >= -2 && v <= 2 ? '' : 'from -2 to 2';
  if (rule === '(0,100]') return v > 0 && v <= 100 ? '' : 'above 0, at most 100';
  return '';
}

/** Fixed-decimals number, or an em dash for null/NaN. */
export function fmt(x, decimals = 1) {
  return x === null || x === undefined || !Number.isFinite(Number(x)) ? '—' : Number(x).toFixed(decimals);
}

/** Milliseconds, with fewer decimals as they grow. */
export function fmtMs(x) {
  if (x === null || x === undefined || !Number.isFinite(Number(x))) return '—';
  const v = Number(x);
  return `${v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0)} ms`;
}

/** Wall-clock time of unix seconds t as HH:MM:SS (local, 24 h), for chart axes. */
export function fmtClock(t) {
  if (t === null || t === undefined || !Number.isFinite(Number(t))) return '';
  const d = new Date(Number(t) * 1000);
  const two = (n) => String(n).padStart(2, '0');
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

const PROPOSER_LABELS = { draft: 'draft model', ngram: 'n-gram', medusa: 'Medusa', plain: 'plain' };

/** The monitor's proposal.by_method entries ({method, passes, share}) as
 *  [{method, label, share, pct}] for the proposers that made passes, largest
 *  share first; [] when there were none. */
export function proposerShares(byMethod) {
  const list = (Array.isArray(byMethod) ? byMethod : [])
    .filter((x) => x && Number(x.passes) > 0 && typeof x.share === 'number' && Number.isFinite(x.share))
    .map((x) => ({ method: String(x.method), label: PROPOSER_LABELS[x.method] || String(x.method), share: Number(x.share),
      pct: `${(100 * Number(x.share)).toFixed(0)}%` }));
  return list.sort((a, b) => b.share - a.share);
}

/** USD with cents, or with more digits below one cent. */
export function fmtUsd(x) {
  if (x === null || !Number.isFinite(x)) return '—';
  return x >= 0.01 || x === 0 ? `$${x.toFixed(2)}` : `$${x.toPrecision(2)}`;
}

/** Delay before reconnect attempt number `attempt` (1, 2, ...): doubling from
 *  minMs up to maxMs, with up to 20% jitter so many tabs do not return at once. */
export function backoffMs(attempt, minMs = 500, maxMs = 5000, rand = Math.random) {
  const base = Math.min(maxMs, minMs * 2 ** Math.max(0, attempt - 1));
  return Math.round(base * (0.8 + 0.2 * rand()));
}

/**
 * A WebSocket to `url` (subprotocol `protocol`) that reopens itself after a
 * close, waiting backoffMs(attempt) between tries.
 * Callbacks: onMessage(parsedJson), onState(state, info) with state one of
 * 'connecting' | 'open' | 'closed' (info.retryInMs: when the next try starts),
 * onOpen(). send(obj) returns false when the socket is not open.
 */
export class ReconnectingSocket {
  constructor(url, protocol, { onMessage, onState, onOpen, minMs = 500, maxMs = 5000 } = {}) {
    this.url = url;
    this.protocol = protocol;
    this.onMessage = onMessage || (() => {});
    this.onState = onState || (() => {});
    this.onOpen = onOpen || (() => {});
    this.minMs = minMs;
    this.maxMs = maxMs;
    this.attempt = 0;
    this.ws = null;
    this.timer = null;
    this.stopped = false;
  }

  start() {
    this.stopped = false;
    this.connect();
  }

  connect() {
    clearTimeout(this.timer);
    this.timer = null;
    this.onState('connecting', { attempt: this.attempt });
    let ws;
    try {
      ws = new WebSocket(this.url, this.protocol);
    } catch (e) {
      this.scheduleRetry();
      return;
    }
    this.ws = ws;
    ws.onopen = () => {
      this.attempt = 0;
      this.onState('open', {});
      this.onOpen();
    };
    ws.onmessage = (ev) => {
      if (typeof ev.data !== 'string') return;
      let msg;
      try {
        msg = JSON.parse(ev.data);
      } catch {
        return;
      }
      this.onMessage(msg);
    };
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (!this.stopped) this.scheduleRetry();
    };
    ws.onerror = () => {}; // a close event always follows
  }

  scheduleRetry() {
    this.attempt++;
    const ms = backoffMs(this.attempt, this.minMs, this.maxMs);
    this.onState('closed', { retryInMs: ms, attempt: this.attempt });
    this.timer = setTimeout(() => this.connect(), ms);
  }

  /** Tries again now (e.g. the user pressed "retry"). */
  retryNow() {
    if (this.ws || this.stopped) return;
    this.connect();
  }

  isOpen() {
    return !!this.ws && this.ws.readyState === WebSocket.OPEN;
  }

  send(obj) {
    if (!this.isOpen()) return false;
    this.ws.send(JSON.stringify(obj));
    return true;
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.ws) this.ws.close();
    this.ws = null;
  }
}

/** Shows a connection state in element `el` (a status pill). */
export function showConnState(el, state, info) {
  el.dataset.state = state;
  if (state === 'open') el.textContent = 'live';
  else if (state === 'connecting') el.textContent = info && info.attempt ? 'reconnecting…' : 'connecting…';
  else el.textContent = `disconnected — retrying in ${Math.max(1, Math.round((info.retryInMs || 0) / 1000))} s`;
}
