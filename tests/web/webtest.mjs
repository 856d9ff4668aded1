// webtest.mjs — helpers for the browser tests of web/: skip rules, a real
// `specd serve` child (stories260K + llama2xs) on 127.0.0.1, Debian's chromium
// driven by playwright-core with a fresh profile and no network besides the
// server, and an independent WebSocket client (the `ws` package).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

export const SRC = process.env.SPECD_SRC || path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const require = createRequire(path.join(SRC, 'package.json'));
export const CHROMIUM = process.env.SPECD_CHROMIUM || '/usr/bin/chromium';
export const SKIP = 77;

export class Fail extends Error {}
export function check(cond, msg) {
  if (!cond) throw new Fail(msg);
}
export function skip(msg) {
  console.log('SKIP: ' + msg);
  process.exit(SKIP);
}
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Runs the async test body; a thrown error is exit 1 with its message. */
export async function main(fn) {
  const t0 = Date.now();
  try {
    await fn();
  } catch (e) {
    console.log('FAIL: ' + (e instanceof Fail ? e.message : e && e.stack ? e.stack : String(e)));
    await cleanupAll();
    process.exit(1);
  }
  await cleanupAll();
  console.log(`PASS (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  process.exit(0);
}

const cleanups = [];
async function cleanupAll() {
  while (cleanups.length) {
    try {
      await cleanups.pop()();
    } catch {
      /* best effort */
    }
  }
}

/** playwright-core, ws and the chromium binary, or exit 77 naming what is missing. */
export function needBrowser() {
  if (!fs.existsSync(CHROMIUM)) skip(`${CHROMIUM} is missing (apt-get install chromium)`);
  let pw, ws;
  try {
    pw = require('playwright-core');
    ws = require('ws');
  } catch {
    skip(`node_modules is missing under ${SRC} (npm ci)`);
  }
  return { chromium: pw.chromium, WebSocket: ws.WebSocket };
}

/** (specd binary, target, draft); exit 77 when any is missing. */
export function needSpecd() {
  const specd = process.env.SPECD, models = process.env.SPECD_MODELS;
  if (!specd || !fs.existsSync(specd)) skip('SPECD is not set to the specd binary');
  if (!models) skip('SPECD_MODELS is not set');
  const target = path.join(models, 'stories260K.gguf'), draft = path.join(models, 'llama2xs-281K.gguf');
  for (const p of [target, draft]) if (!fs.existsSync(p)) skip('model file missing: ' + p);
  return { specd, target, draft };
}

/** A free TCP port on 127.0.0.1 (bound and released at once). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
}

const READY_RE = /serving on http:\/\/([0-9.]+):([0-9]+)\//;

/**
 * Starts `specd serve` on `port` (0 = any) in a private temporary directory,
 * with web/ as its web root; resolves once the ready line names the port.
 * Returns { port, url, proc, dir, stop(signal), log() }.
 */
export async function startSpecd({ port = 0, extra = [], config = null, dir = null, timeoutMs = 120000 } = {}) {
  const { specd, target, draft } = needSpecd();
  dir = dir || fs.mkdtempSync(path.join(os.tmpdir(), 'specd-web-'));
  const args = ['serve', '-m', target, '--draft', draft, '--host', '127.0.0.1', '--port', String(port), '-t', '1',
    '--web-root', path.join(SRC, 'web')];
  if (config !== null) {
    fs.writeFileSync(path.join(dir, 'config.yaml'), config);
    args.push('-c', path.join(dir, 'config.yaml'));
  }
  args.push(...extra);
  const proc = spawn(specd, args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '', err = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (err += d));
  const exited = new Promise((r) => proc.on('exit', (code, sig) => r({ code, sig })));
  const srv = {
    proc, dir, exited,
    log: () => `--- stdout\n${out}--- stderr\n${err.slice(-4000)}`,
    async stop(signal = 'SIGTERM', waitMs = 30000) {
      if (proc.exitCode !== null || proc.signalCode !== null) return exited;
      proc.kill(signal);
      const r = await Promise.race([exited, sleep(waitMs).then(() => null)]);
      if (!r) {
        proc.kill('SIGKILL');
        return exited;
      }
      return r;
    },
  };
  cleanups.push(() => srv.stop('SIGKILL', 5000));
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const m = READY_RE.exec(out);
    if (m) {
      srv.port = Number(m[2]);
      srv.url = `http://127.0.0.1:${srv.port}/`;
      return srv;
    }
    if (proc.exitCode !== null || proc.signalCode !== null) throw new Fail(`specd serve exited before it was ready\n${srv.log()}`);
    if (Date.now() > deadline) throw new Fail(`specd serve not ready after ${timeoutMs} ms\n${srv.log()}`);
    await sleep(50);
  }
}

/**
 * Launches chromium headless with a fresh profile (removed afterwards). Every
 * request that is not to 127.0.0.1:`port` is aborted and recorded in
 * ctx.external, so a page reaching for the network fails its test.
 */
export async function launch(chromium, port) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'specd-web-profile-'));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 860 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  ctx.external = [];
  await ctx.route('**/*', (route) => {
    const u = new URL(route.request().url());
    if ((u.protocol === 'http:' || u.protocol === 'ws:') && u.hostname === '127.0.0.1' && Number(u.port) === port) return route.continue();
    if (u.protocol === 'data:') return route.continue();
    ctx.external.push(u.href);
    return route.abort();
  });
  cleanups.push(async () => {
    await ctx.close();
    fs.rmSync(profile, { recursive: true, force: true });
  });
  return ctx;
}

/** Opens a page recording console errors and uncaught exceptions in page.problems. */
export async function openPage(ctx, url) {
  const page = await ctx.newPage();
  page.problems = [];
  page.on('console', (m) => { if (m.type() === 'error') page.problems.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => page.problems.push(`exception: ${e.message}`));
  await page.goto(url, { waitUntil: 'load' });
  return page;
}

/** Polls fn() (sync or async) until it returns a truthy value; fails with msg after ms. */
export async function waitFor(fn, ms, msg, every = 100) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Fail(`timed out after ${ms} ms: ${msg}`);
    await sleep(every);
  }
}

/** An open WebSocket (the `ws` package) to url with subprotocol proto; frames
 *  arrive parsed in sock.frames, and sock.next(pred, ms) waits for one. */
export function connectWs(WebSocket, url, proto) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, proto);
    ws.frames = [];
    ws.waiters = [];
    ws.on('message', (data) => {
      const f = JSON.parse(String(data));
      ws.frames.push(f);
      for (const w of ws.waiters.slice()) if (w.pred(f)) { ws.waiters.splice(ws.waiters.indexOf(w), 1); w.resolve(f); }
    });
    ws.next = (pred, ms = 30000) => new Promise((res, rej) => {
      const w = { pred, resolve: res };
      ws.waiters.push(w);
      setTimeout(() => rej(new Fail(`no matching frame within ${ms} ms on ${url}`)), ms);
    });
    ws.on('open', () => resolve(ws));
    ws.on('error', reject);
    cleanups.push(() => ws.terminate());
  });
}

/** Runs one generate on a specd.v1 socket; resolves to {text, tokens:[frames], done, error}. */
export async function generate(ws, msg, ms = 60000) {
  const id = msg.id;
  const r = { text: '', tokens: [], done: null, error: null };
  const onMsg = (data) => {
    const f = JSON.parse(String(data));
    if (f.id !== id) return;
    if (f.type === 'tokens') {
      r.tokens.push(f);
      r.text += f.text;
    }
  };
  ws.on('message', onMsg);
  ws.send(JSON.stringify({ type: 'generate', ...msg }));
  const end = await ws.next((f) => f.id === id && (f.type === 'done' || f.type === 'error'), ms);
  ws.off('message', onMsg);
  if (end.type === 'done') r.done = end;
  else r.error = end;
  return r;
}

/** Where screenshots go: the test's working directory (meson: the build dir). */
export function artifactPath(name) {
  const dir = process.env.SPECD_WEB_ARTIFACTS || process.cwd();
  fs.mkdirSync(dir, { recursive: true });
  return path.join(dir, name);
}
