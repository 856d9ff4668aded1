// chat.js — the chat page (chat.html): keeps the conversation, sends it as
// "messages" in a generate frame on the /v1/stream WebSocket (subprotocol
// specd.v1), streams the answer in coloured runs (accepted draft text vs
// target text, from each tokens frame's accepted_bytes), cancels on Stop,
// shows the done frame's stats and any server error inline; the JSON toggle
// asks for response_format json_object (or json_schema with a schema) and
// marks whether the answer parses. Settings are checked as they are typed and
// kept in localStorage only when valid (a value the server refuses is dropped
// from storage too); the conversation is kept there, so a reload shows it.
import { ReconnectingSocket, checkField, fmt, fmtMs, showConnState, splitAccepted, wsUrl } from './common.js';

const $ = (id) => document.getElementById(id);
const conv = $('conversation');
const SETTINGS = ['temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed', 'presence_penalty', 'frequency_penalty',
  'repetition_penalty', 'stop_strings', 'mode', 'method', 'tree',
  'tree_budget', 'tree_depth', 'tree_topk', 'gamma', 'gamma_control', 'verify', 'content_type', 'schema', 'system'];
const KEY = 'specd.chat.';
const CONV_KEY = KEY + 'conversation';

let history = [];   // finished turns: {role, content}
let current = null; // the request in flight: {id, userEl, el, textEl, text, frames}
let seq = 0;
const idPrefix = Math.random().toString(36).slice(2, 8);

/* ---- settings ------------------------------------------------------------- */
/** Marks field k as wrong (msg) or right (''): aria-invalid and a line under it. */
function markField(k, msg) {
  const el = $(k);
  let note = document.getElementById(k + '-error');
  if (!msg) {
    el.removeAttribute('aria-invalid');
    note?.remove();
    return;
  }
  el.setAttribute('aria-invalid', 'true');
  if (!note) {
    note = document.createElement('small');
    note.id = k + '-error';
    note.className = 'field-error';
    note.setAttribute('role', 'alert');
    el.insertAdjacentElement('afterend', note);
    el.setAttribute('aria-describedby', note.id);
  }
  note.textContent = msg;
}
/** '' when field k holds a value this page accepts, else why not. */
const fieldProblem = (k) => checkField($(k).dataset.rule, $(k).value);
/* a stored value is used only when it is still valid (an older page may have stored a wrong one) */
for (const k of SETTINGS) {
  const v = localStorage.getItem(KEY + k), el = $(k);
  if (v !== null && (el.tagName !== 'SELECT' || [...el.options].some((o) => o.value === v))) {
    const before = el.value;
    el.value = v;
    if (fieldProblem(k)) {
      el.value = before;
      localStorage.removeItem(KEY + k);
    }
  }
  const check = () => {
    const why = fieldProblem(k);
    markField(k, why);
    if (!why) localStorage.setItem(KEY + k, el.value);
    else localStorage.removeItem(KEY + k); // not kept: a reload shows the default again
  };
  el.addEventListener('input', check);
  el.addEventListener('change', check);
}
/* What a seed buys with these settings (shown under the verification choice). */
function seedNote() {
  const t = numberField('temperature'), seed = numberField('seed'), v = $('verify').value;
  if (t === 0) return 'greedy: the same answer with any speculation settings';
  if (seed === undefined) return 'no seed: a new sample each time';
  // the server verifies a seeded request coupled unless it asks for rejection, Medusa or a tree
  const rejection = v === 'rejection' || (v === '' && ($('method').value === 'medusa' || ['auto', 'fixed'].includes($('tree').value)));
  if (!rejection) {
    return 'reproducible: this seed gives the same answer whatever γ, proposer or server load' +
      (v === '' ? ' (the server verifies seeded requests coupled)' : '');
  }
  return 'reproducible only at a fixed γ and proposer (rejection verification); choose coupled or the server ' +
    'default to make this seed give the same answer across settings';
}
function updateSeedNote() { $('seed-note').textContent = seedNote(); }
for (const k of ['temperature', 'seed', 'verify', 'method', 'tree']) $(k).addEventListener('input', updateSeedNote);
for (const k of ['temperature', 'seed', 'verify', 'method', 'tree']) $(k).addEventListener('change', updateSeedNote);
updateSeedNote();
const colourBox = $('colour');
colourBox.checked = localStorage.getItem(KEY + 'colour') !== '0';
conv.classList.toggle('colour', colourBox.checked);
colourBox.addEventListener('change', () => {
  conv.classList.toggle('colour', colourBox.checked);
  localStorage.setItem(KEY + 'colour', colourBox.checked ? '1' : '0');
});

const jsonBox = $('json');
jsonBox.checked = localStorage.getItem(KEY + 'json') === '1';
jsonBox.addEventListener('change', () => localStorage.setItem(KEY + 'json', jsonBox.checked ? '1' : '0'));

/** The number in input `id`, or undefined when it is empty (= server default). */
function numberField(id) {
  const el = $(id);
  if (el.value.trim() === '') return undefined;
  const v = Number(el.value);
  return Number.isFinite(v) ? v : undefined;
}

/** The first settings field holding a value the page refuses, with why; null when all are fine. */
function badField() {
  for (const k of SETTINGS) {
    const why = fieldProblem(k);
    if (why) return { k, why };
  }
  return null;
}

function buildRequest(id, messages) {
  const req = { type: 'generate', id, messages };
  for (const k of ['temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed', 'presence_penalty', 'frequency_penalty',
    'repetition_penalty']) {
    const v = numberField(k);
    if (v !== undefined) req[k] = v;
  }
  const stop = $('stop_strings').value.split('\n').filter((l) => l !== '');
  if (stop.length) req.stop = stop;
  const spec = { mode: $('mode').value };
  if ($('method').value) spec.method = $('method').value;
  if ($('tree').value) spec.tree = $('tree').value;
  for (const k of ['tree_budget', 'tree_depth', 'tree_topk']) {
    const v = numberField(k);
    if (v !== undefined) spec[k] = v;
  }
  const g = numberField('gamma');
  if (g !== undefined) spec.gamma = g;
  if ($('gamma_control').value) spec.adaptive = $('gamma_control').value === 'adaptive';
  if ($('verify').value) spec.verify = $('verify').value;
  req.speculation = spec;
  if ($('content_type').value) req.content_type = $('content_type').value;
  if (jsonBox.checked) {
    const schema = $('schema').value.trim();
    req.response_format = schema
      ? { type: 'json_schema', json_schema: { name: 'chat_page_schema', schema: JSON.parse(schema), strict: true } }
      : { type: 'json_object' };
  }
  return req;
}

/* ---- the conversation, kept across reloads -------------------------------- */
/** Stores the finished turns and what the page shows of them. */
function saveConversation() {
  const view = [...conv.querySelectorAll('article.msg')].map((el) => ({
    cls: el.className, who: el.querySelector('.who')?.textContent || '',
    runs: [...el.querySelector('.text').childNodes].map((n) => [n.nodeType === 1 ? n.className : '', n.textContent]),
    stats: el.querySelector('.stats')?.textContent || null, data: { ...el.dataset },
    role: el.getAttribute('role'), title: el.title || '',
  }));
  try {
    localStorage.setItem(CONV_KEY, JSON.stringify({ history, view }));
  } catch { /* storage full or off: the page still works, only without memory */ }
}

function restoreConversation() {
  let saved;
  try { saved = JSON.parse(localStorage.getItem(CONV_KEY) || 'null'); } catch { saved = null; }
  if (!saved || !Array.isArray(saved.history) || !Array.isArray(saved.view) || !saved.view.length) return;
  history = saved.history.filter((m) => m && typeof m.role === 'string' && typeof m.content === 'string');
  $('placeholder')?.remove();
  for (const m of saved.view) {
    const el = document.createElement('article');
    el.className = String(m.cls || 'msg');
    if (m.role) el.setAttribute('role', m.role);
    if (m.title) el.title = m.title;
    for (const [k, v] of Object.entries(m.data || {})) el.dataset[k] = String(v);
    const h = document.createElement('div');
    h.className = 'who';
    h.textContent = m.who || '';
    const body = document.createElement('div');
    body.className = 'text';
    for (const [cls, t] of m.runs || []) {
      if (!cls) body.append(String(t));
      else {
        const span = document.createElement('span');
        span.className = String(cls);
        span.textContent = String(t);
        body.appendChild(span);
      }
    }
    el.append(h, body);
    if (m.stats !== null && m.stats !== undefined) {
      const p = document.createElement('p');
      p.className = 'stats';
      p.textContent = String(m.stats);
      el.appendChild(p);
    }
    conv.appendChild(el);
  }
  conv.scrollTop = conv.scrollHeight;
  document.body.dataset.restored = String(saved.view.length);
}

/* ---- conversation view ---------------------------------------------------- */
function addMessage(kind, who, text) {
  $('placeholder')?.remove();
  const el = document.createElement('article');
  el.className = `msg ${kind}`;
  const h = document.createElement('div');
  h.className = 'who';
  h.textContent = who;
  const body = document.createElement('div');
  body.className = 'text';
  if (text) body.textContent = text;
  el.append(h, body);
  conv.appendChild(el);
  conv.scrollTop = conv.scrollHeight;
  return el;
}

/** Runs fn (which grows the conversation) and keeps the view on the newest
 * text if it was there: a reader who scrolled up is left where they are. */
function following(fn) {
  const atEnd = conv.scrollHeight - conv.scrollTop - conv.clientHeight < 40;
  fn();
  if (atEnd) conv.scrollTop = conv.scrollHeight;
}

/** Appends s to the last run of textEl when it has class cls, else starts a new run. */
function appendRun(textEl, cls, s) {
  if (!s) return;
  const last = textEl.lastElementChild;
  if (last && last.className === cls) last.firstChild.appendData(s);
  else {
    const span = document.createElement('span');
    span.className = cls;
    span.textContent = s;
    textEl.appendChild(span);
  }
}

function showError(el, code, message) {
  el.className = 'msg error';
  el.setAttribute('role', 'alert');
  el.querySelector('.who').textContent = 'error';
  const body = el.querySelector('.text');
  body.textContent = code ? `${message} (${code})` : message;
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
  document.body.dataset.busy = busy ? '1' : '0';
}

/* ---- protocol ------------------------------------------------------------- */
function onFrame(f) {
  if (!current || f.id !== current.id) {
    // an error that names no request (bad frame) still deserves a line
    if (f.type === 'error' && (f.id === undefined || f.id === null)) showError(addMessage('error', 'error'), f.code, f.message);
    return;
  }
  const c = current;
  if (f.type === 'start') {
    c.session = f.session;
    c.el.dataset.session = f.session || '';
  } else if (f.type === 'tokens') {
    const [draft, target] = splitAccepted(f.text || '', f.accepted_bytes);
    following(() => {
      appendRun(c.textEl, 'd', draft);
      appendRun(c.textEl, 't', target);
    });
    c.text += f.text || '';
    c.frames++;
    c.el.dataset.frames = String(c.frames);
  } else if (f.type === 'done') {
    finish(f);
  } else if (f.type === 'error') {
    if (f.code === 'unknown_id' && c.cancelSent) return; // the cancel raced the end; done follows or came
    showError(c.el, f.code, f.message);
    c.userEl.classList.add('failed');
    c.userEl.title = 'Not sent again with later messages: the server refused it.';
    // a refused setting ("field 'speculation.gamma' must be ..."): marked, and not kept for the next visit
    const m = /field '([a-z_.]+)/.exec(f.message || '');
    const k = m && m[1].split('.').pop();
    if (k && SETTINGS.includes(k)) {
      markField(k, f.message);
      localStorage.removeItem(KEY + k);
    }
    current = null;
    setBusy(false);
    saveConversation();
  }
}

function finish(d) {
  const c = current;
  current = null;
  history.push({ role: 'user', content: c.userText }, { role: 'assistant', content: c.text });
  const parts = [`TTFT ${fmtMs(d.ttft_ms)}`, `TPOT ${fmtMs(d.tpot_ms)}`];
  if (d.speculation && d.speculation.verify_steps > 0) {
    parts.push(`α ${fmt(d.alpha, 2)}`, `mean accepted ${fmt(d.mean_accepted, 2)}`, `γ ${fmt(d.gamma_used, 1)}`);
    const bm = d.speculation.by_method || {};
    const used = Object.keys(bm).filter((k) => bm[k].verify_steps > 0);
    if (used.length) parts.push(`method ${used.map((k) => `${k} ×${bm[k].verify_steps}`).join(', ')}`);
  } else parts.push('no speculation');
  parts.push(`${d.usage ? d.usage.completion_tokens : '?'} tokens`);
  const why = { length: 'max tokens reached', stop: 'finished', cancelled: 'stopped', error: 'engine error' }[d.finish_reason];
  parts.push(why || d.finish_reason);
  if (c.json) { // the grammar keeps the answer JSON; say whether it parses (a stopped one may not be complete)
    let ok = true;
    try { JSON.parse(c.text); } catch { ok = false; }
    c.el.dataset.json = ok ? 'valid' : 'invalid';
    parts.push(ok ? 'valid JSON' : 'not valid JSON');
  }
  const p = document.createElement('p');
  p.className = 'stats';
  p.textContent = parts.join(' · ');
  c.el.appendChild(p);
  c.el.dataset.finish = d.finish_reason;
  setBusy(false);
  saveConversation();
}

function send(text) {
  if (current) return false;
  const bad = badField();
  if (bad) { // the page knows this value is wrong: say so at the field, send nothing
    markField(bad.k, bad.why);
    $(bad.k).focus();
    return false;
  }
  const id = `${idPrefix}-${++seq}`;
  const messages = [];
  const sys = $('system').value.trim();
  if (sys) messages.push({ role: 'system', content: sys });
  messages.push(...history, { role: 'user', content: text });
  const userEl = addMessage('user', 'you', text);
  const el = addMessage('assistant', 'specd');
  current = { id, userText: text, userEl, el, textEl: el.querySelector('.text'), text: '', frames: 0, cancelSent: false,
    json: jsonBox.checked };
  el.dataset.id = id;
  if (!sock.send(buildRequest(id, messages))) {
    showError(el, '', 'Not connected to the server; the message was not sent. It reconnects by itself — try again in a moment.');
    userEl.classList.add('failed');
    current = null;
    return true;
  }
  setBusy(true);
  return true;
}

/* ---- wiring --------------------------------------------------------------- */
const sock = new ReconnectingSocket(wsUrl('/v1/stream'), 'specd.v1', {
  onMessage: onFrame,
  onState: (state, info) => {
    showConnState($('conn'), state, info);
    document.body.dataset.conn = state;
    if (state === 'closed' && current) {
      showError(current.el, '', 'The connection to the server was lost during this answer.');
      current.userEl.classList.add('failed');
      current = null;
      setBusy(false);
      saveConversation();
    }
  },
});

$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('prompt').value;
  if (!text.trim() || current) return;
  if (send(text)) $('prompt').value = '';
});
$('prompt').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    $('composer').requestSubmit();
  }
});
$('stop').addEventListener('click', () => {
  if (!current) return;
  current.cancelSent = true;
  sock.send({ type: 'cancel', id: current.id });
});
$('clear').addEventListener('click', () => {
  if (current) return;
  history = [];
  conv.replaceChildren();
  const p = document.createElement('p');
  p.className = 'placeholder';
  p.id = 'placeholder';
  p.textContent = 'New conversation.';
  conv.appendChild(p);
  localStorage.removeItem(CONV_KEY);
});
restoreConversation();
setBusy(false);
sock.start();
