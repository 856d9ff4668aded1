// mock_server.mjs — a stand-in for `specd serve` while developing the web
// pages: serves web/ and /vendor/uplot/ like specd does and pushes made-up
// monitor snapshots (4 per second) on /v1/monitor. Not used by the tests unless
// SPECD_WEB_MOCK=1; run by hand: node tests/web/mock_server.mjs [port]
// (GET /mock/reload-fail and /mock/reload-ok flip the policy reload result).
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { WebSocketServer } from 'ws';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const MIME = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8' };

/** Starts the mock on `port` (0 = any); resolves to { port, close() }. */
export function startMock(port = 0) {
  let reloadOk = true, version = 1;
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    if (url.pathname === '/mock/reload-fail') { reloadOk = false; res.end('ok'); return; }
    if (url.pathname === '/mock/reload-ok') { reloadOk = true; version++; res.end('ok'); return; }
    let file;
    if (url.pathname.startsWith('/vendor/uplot/')) file = path.join(root, 'node_modules/uplot/dist', path.basename(url.pathname));
    else file = path.join(root, 'web', url.pathname === '/' ? 'index.html' : path.normalize(url.pathname));
    if (!file.startsWith(root) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      res.writeHead(404).end('not found\n');
      return;
    }
    res.writeHead(200, { 'content-type': MIME[path.extname(file)] || 'application/octet-stream' });
    fs.createReadStream(file).pipe(res);
  });
  const wss = new WebSocketServer({ noServer: true, handleProtocols: (p) => (p.has('specd.monitor.v1') ? 'specd.monitor.v1' : false) });
  server.on('upgrade', (req, sock, head) => {
    if (new URL(req.url, 'http://x').pathname !== '/v1/monitor') return sock.destroy();
    wss.handleUpgrade(req, sock, head, (ws) => wss.emit('connection', ws));
  });
  const t0 = Date.now();
  const hist = [0, 0, 0, 0, 0];
  wss.on('connection', (ws) => {
    const timer = setInterval(() => {
      const t = (Date.now() - t0) / 1000;
      const tps = 400 + 300 * Math.sin(t / 3);
      hist[Math.floor(Math.random() * hist.length)] += 3;
      const n = 1 + Math.floor(2.5 + 2 * Math.sin(t / 5));
      ws.send(JSON.stringify({
        type: 'snapshot', t_ms: Date.now() - t0, tokens_per_s: tps, running: n, waiting: 0, prefilling: 0,
        kv: { target: { used: 10 * n, free: 256 - 10 * n, total: 256 }, draft: { used: 10 * n, free: 256 - 10 * n, total: 256 } },
        alpha: 0.7 + 0.1 * Math.sin(t), mean_accepted: 2.5 + 0.5 * Math.cos(t),
        per_position: [1, 2, 3, 4].map((p) => ({ position: p, rate: 0.9 - 0.12 * p })),
        accepted_hist: hist, ttft_ms: { p50: 4 + Math.sin(t), p99: 9 }, tpot_ms: { p50: 1.2, p99: 2.5 + Math.sin(t) },
        fallbacks: 1, kv_resets: 0, telemetry_dropped: 0,
        tree: { mode: 'auto', chain_steps: 40, tree_steps: Math.floor(t * 10), branched_steps: Math.floor(t * 8), nodes: Math.floor(t * 60) },
        policy: { version, last_reload_ok: reloadOk, last_reload_message: reloadOk ? 'ok' : 'config.yaml:3:5: gamma_max: 99 is out of range (1..16)' },
        model: { target: 'stories260K', draft: 'llama2xs-281K', backend: 'cpu', simd: 'avx512' },
        sequences: Array.from({ length: n }, (_, i) => ({
          id: `0000000${i}-aaaa-4bbb-8ccc-dddddddddddd`, content_type: 'chat', mode: 'adaptive', gamma: 4, alpha: 0.7,
          shape: i % 2 ? 'tree 8/4/2' : 'chain',
          tokens: Math.floor(t * 10) % 200, tokens_per_s: tps / n,
        })),
      }));
    }, 250);
    ws.on('close', () => clearInterval(timer));
  });
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve({
    port: server.address().port,
    close: () => new Promise((r) => { for (const c of wss.clients) c.terminate(); server.close(r); }),
  })));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const m = await startMock(Number(process.argv[2] || 0));
  console.log(`mock: serving on http://127.0.0.1:${m.port}/`);
}
