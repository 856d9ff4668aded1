// test_monitor.mjs — web/index.html (the live monitor) in a real browser
// (Debian's chromium through playwright-core) against a real `specd serve`
// (stories260K + llama2xs): it loads without console errors, shows the model
// banner; while an independent WebSocket client generates, the charts receive
// points, tokens/s and α change and the sequence table lists the client's
// sessions, the server-wide proposal per verify step and each proposer's share
// of the target passes appear (and agree with the feed), the time axes read
// HH:MM:SS, the 12 tiles fill whole rows at four widths (no lone tile), the
// chart library comes from /vendor/uplot/; a failed policy reload raises the
// warning and a good one clears it; after the server is killed and restarted on the same port the page shows
// "disconnected" and then reconnects by itself; the restarted server learns from traffic (--learn): the learning
// panel appears, the ring fills and the learning chart marks the head swap.
import fs from 'node:fs';
import path from 'node:path';
import {
  Fail, artifactPath, check, connectWs, launch, main, needBrowser, needSpecd, openPage, sleep, startSpecd, waitFor,
} from './webtest.mjs';

const GOOD = 'speculation:\n  gamma_default: 4\n';
const BAD = 'speculation:\n  gamma_max: 99\n'; // out of range (1..16): the reload must fail
// the restarted server learns: a first round after 16 positions, short, and any gain is swapped in
const LEARN = GOOD + '  learn_min_positions: 16\n  learn_steps: 120\n  learn_margin: 0\n';

const text = (page, sel) => page.locator(sel).textContent();
const snapshots = (page) => page.evaluate(() => Number(document.body.dataset.snapshots || 0));

/** Keeps `streams` greedy generations running on one specd.v1 socket until
 *  stop() is called; sessions collects the session uuid of every start frame. */
function background(ws, streams) {
  const bg = { sessions: new Set(), finished: 0, running: true, errors: [] };
  let n = 0;
  const next = () => {
    if (!bg.running) return;
    ws.send(JSON.stringify({
      type: 'generate', id: `bg${++n}`, prompt: 'Once upon a time', max_tokens: 1500, temperature: 0,
      speculation: { mode: 'auto' },
    }));
  };
  ws.on('message', (data) => {
    const f = JSON.parse(String(data));
    if (f.type === 'start') bg.sessions.add(f.session);
    else if (f.type === 'done') { bg.finished++; next(); }
    else if (f.type === 'error') bg.errors.push(f);
  });
  for (let i = 0; i < streams; i++) next();
  bg.stop = () => {
    bg.running = false;
    for (let i = 1; i <= n; i++) ws.send(JSON.stringify({ type: 'cancel', id: `bg${i}` }));
  };
  return bg;
}

async function run() {
  const { chromium, WebSocket } = needBrowser();
  needSpecd();
  let srv = await startSpecd({ config: GOOD });
  const cfgPath = path.join(srv.dir, 'config.yaml');
  const port = srv.port;

  // the feed must exist (an independent client reads one snapshot first)
  const mon = await connectWs(WebSocket, `ws://127.0.0.1:${port}/v1/monitor`, 'specd.monitor.v1')
    .catch((e) => { throw new Fail(`/v1/monitor does not answer: ${e.message}`); });
  const first = await mon.next((f) => f.type === 'snapshot', 5000);
  mon.terminate();

  const ctx = await launch(chromium, port);
  const page = await openPage(ctx, srv.url);
  await waitFor(async () => (await snapshots(page)) >= 3, 10000, 'the page shows no snapshots');
  check((await page.locator('#conn').getAttribute('data-state')) === 'open', 'connection pill is not "open"');
  check((await text(page, '#model-target')) === first.model.target && first.model.target, `banner target: ${await text(page, '#model-target')}`);
  check((await text(page, '#model-draft')) === first.model.draft && first.model.draft, `banner draft: ${await text(page, '#model-draft')}`);
  check((await text(page, '#backend')).startsWith('cpu'), `banner backend: ${await text(page, '#backend')}`);
  check(/^v\d+$/.test(await text(page, '#policy-version')), `banner policy: ${await text(page, '#policy-version')}`);
  check(await page.locator('#policy-warning').isHidden(), 'policy warning shown after a good start');
  check((await page.locator('#seq-body tr.empty').count()) === 1, 'sequence table is not empty while idle');
  check(first.learn && first.learn.enabled === false && await page.locator('#learn-panel').isHidden(),
    `learning panel with learning off: ${JSON.stringify(first.learn)}`);
  check(first.tree && first.tree.mode === 'off' && first.tree.tree_steps === 0, `snapshot tree: ${JSON.stringify(first.tree)}`);
  check((await text(page, '#v-tree')) === 'off', `tree tile with trees off: ${await text(page, '#v-tree')}`);

  // generation from an independent client: values move, the table lists its sessions
  const ws = await connectWs(WebSocket, `ws://127.0.0.1:${port}/v1/stream`, 'specd.v1');
  const bg = background(ws, 2);
  const pts0 = Number(await page.locator('#chart-tps').getAttribute('data-points'));
  const tpsSeen = new Set(), alphaSeen = new Set();
  let listed = null;
  const t0 = Date.now();
  while (Date.now() - t0 < 20000) {
    tpsSeen.add(await text(page, '#v-tps'));
    alphaSeen.add(await text(page, '#v-alpha'));
    const ids = await page.locator('#seq-body tr[data-id]').evaluateAll((trs) => trs.map((t) => t.dataset.id));
    if (!listed) listed = ids.find((id) => bg.sessions.has(id)) || null;
    if (listed && tpsSeen.size >= 3 && alphaSeen.size >= 3) break;
    await sleep(250);
  }
  check(bg.errors.length === 0, `background client got errors: ${JSON.stringify(bg.errors)}`);
  check(listed, `the sequence table never listed a running session of the client (sessions ${[...bg.sessions]})`);
  const tpsNum = [...tpsSeen].map(Number).filter((v) => v > 0);
  check(tpsNum.length >= 2, `tokens/s did not show changing non-zero values: ${[...tpsSeen]}`);
  check([...alphaSeen].filter((v) => v !== '—').length >= 2, `α did not change: ${[...alphaSeen]}`);
  const row = page.locator(`#seq-body tr[data-id="${listed}"]`);
  if (await row.count()) {
    const cells = await row.locator('td').allTextContents();
    check(cells[0] === listed.slice(0, 8) && /^\d+$/.test(cells[3]) && /^\d+$/.test(cells[5]), `sequence row: ${cells}`);
  }
  const pts = async () => Number(await page.locator('#chart-tps').getAttribute('data-points'));
  await waitFor(async () => (await pts()) >= pts0 + 8, 10000, `the charts did not receive points (${pts0} → ${await pts()})`);
  check(/^\$\d/.test(await text(page, '#v-cost')), `no cost shown while busy: ${await text(page, '#v-cost')}`);
  // the server-wide proposal size and the proposers' shares, as the feed says
  const feed = await connectWs(WebSocket, `ws://127.0.0.1:${port}/v1/monitor`, 'specd.monitor.v1');
  const busy = await feed.next((f) => f.type === 'snapshot' && f.proposal && f.proposal.per_step > 0, 10000);
  feed.terminate();
  check(busy.proposal.per_step >= 1 && busy.proposal.per_step <= 16, `proposal.per_step: ${JSON.stringify(busy.proposal)}`);
  const bm = busy.proposal.by_method;
  check(Array.isArray(bm) && bm.some((x) => x.method === 'draft' && x.passes > 0)
    && Math.abs(bm.reduce((a, x) => a + (x.share || 0), 0) - 1) < 1e-6, `proposal.by_method: ${JSON.stringify(bm)}`);
  await waitFor(async () => Number(await text(page, '#v-gamma')) >= 1, 5000, `no proposal figure: ${await text(page, '#v-gamma')}`);
  check(/per verify step/.test(await text(page, '#v-gamma-sub')), `proposal tile: ${await text(page, '#v-gamma-sub')}`);
  check(/draft model \d+%/.test(await text(page, '#v-share')), `share tile: ${await text(page, '#v-share')}`);
  check((await page.locator('#share-bar .seg').count()) >= 1, 'share bar has no segment');
  const segW = await page.locator('#share-bar .seg').evaluateAll((ss) => ss.map((e) => e.getBoundingClientRect().width));
  check(segW.every((w) => w > 0), `share bar segments: ${segW}`);
  // the time axes: wall-clock labels, never uPlot's ":26.000"
  const xl = JSON.parse((await page.locator('#chart-tps').getAttribute('data-xlabels')) || '[]');
  check(xl.length >= 2 && xl.every((l) => /^\d\d:\d\d:\d\d$/.test(l)), `time axis labels: ${JSON.stringify(xl)}`);
  const xa = JSON.parse((await page.locator('#chart-alpha').getAttribute('data-xlabels')) || '[]');
  check(xa.every((l) => /^\d\d:\d\d:\d\d$/.test(l)), `α chart time labels: ${JSON.stringify(xa)}`);
  check(await page.evaluate(() => !!window.uPlot && document.querySelectorAll('.chart-box canvas').length >= 4),
    'the charts are not drawn (uPlot from /vendor/uplot/uPlot.iife.min.js)');
  check(!/4×A100 table|brief/.test(await text(page, '.hint')), `help text: ${await text(page, '.hint')}`);
  // the tiles fill whole rows at every width: no tile alone on a row
  for (const width of [1280, 1000, 700, 400]) {
    await page.setViewportSize({ width, height: 860 });
    await sleep(150);
    const tops = await page.locator('.tiles .tile').evaluateAll((ts) => ts.map((t) => Math.round(t.getBoundingClientRect().top)));
    const rows = new Map();
    for (const t of tops) rows.set(t, (rows.get(t) || 0) + 1);
    const counts = [...rows.values()];
    check(tops.length === 12 && counts.every((c) => c === counts[0]) && counts[0] >= 2,
      `at ${width} px the 12 tiles sit in rows of ${counts.join(', ')}`);
    if (width === 400) await page.screenshot({ path: artifactPath('web-monitor-narrow.png'), fullPage: true });
  }
  await page.setViewportSize({ width: 1280, height: 860 });
  // the price input drives the cost and is remembered
  await page.locator('#price').fill('16');
  check(await page.evaluate(() => localStorage.getItem('specd.monitor.price_per_hour')) === '16', 'price not saved');
  await page.screenshot({ path: artifactPath('web-monitor.png'), fullPage: true });

  bg.stop();
  await waitFor(async () => (await page.locator('#seq-body tr[data-id]').count()) === 0, 20000,
    'sequence table still lists sequences after the client stopped');
  ws.terminate();

  // a failed reload shows the warning; a good one clears it
  const v0 = await text(page, '#policy-version');
  fs.writeFileSync(cfgPath, BAD);
  srv.proc.kill('SIGHUP');
  await waitFor(() => page.locator('#policy-warning').isVisible(), 10000, 'no warning after a failed reload');
  const warn = await text(page, '#policy-warning');
  check(/reload failed/i.test(warn) && /gamma_max/.test(warn) && /still serving policy v\d/.test(warn), `warning text: ${warn}`);
  check((await text(page, '#policy-version')) === v0, 'policy version moved on a failed reload');
  await page.screenshot({ path: artifactPath('web-monitor-reload-failed.png') });
  fs.writeFileSync(cfgPath, GOOD);
  srv.proc.kill('SIGHUP');
  await waitFor(() => page.locator('#policy-warning').isHidden(), 10000, 'warning stays after a good reload');
  check((await text(page, '#policy-version')) !== v0, 'policy version did not move on a good reload');

  check(page.problems.length === 0, `page problems: ${page.problems.join('; ')}`);
  check(ctx.external.length === 0, `the page reached outside the server: ${ctx.external.join(', ')}`);

  // kill the server: "disconnected"; restart on the same port: back by itself
  await srv.stop('SIGKILL');
  await waitFor(async () => (await page.locator('#conn').getAttribute('data-state')) === 'closed', 10000,
    'page does not show the lost connection');
  check(/disconnected/.test(await text(page, '#conn')), `pill while down: ${await text(page, '#conn')}`);
  check((await page.locator('#seq-body tr[data-id]').count()) === 0, 'stale sequences stay while disconnected');
  await sleep(1500); // a few retries fail meanwhile
  srv = await startSpecd({ port, config: LEARN, dir: srv.dir, extra: ['--learn', '--learn-dir', path.join(srv.dir, 'heads')] });
  const before = await snapshots(page);
  await waitFor(async () => (await page.locator('#conn').getAttribute('data-state')) === 'open' && (await snapshots(page)) > before + 2,
    15000, 'the page did not reconnect after the restart');
  // only the expected failed WebSocket attempts while the server was down
  const others = page.problems.filter((p) => !/WebSocket connection to .*\/v1\/monitor.* failed/.test(p));
  check(others.length === 0, `page problems after the restart: ${others.join('; ')}`);

  // learning from traffic: the panel, the ring's fill, the trainer, a marker at the head swap
  await waitFor(() => page.locator('#learn-panel').isVisible(), 5000, 'no learning panel on a --learn server');
  check((await text(page, '#l-head')) === 'none', `learned head before any traffic: ${await text(page, '#l-head')}`);
  const lws = await connectWs(WebSocket, `ws://127.0.0.1:${port}/v1/stream`, 'specd.v1');
  let done = 0;
  lws.on('message', (d) => { if (JSON.parse(String(d)).type === 'done') done++; });
  const prompts = ['Once upon a time', 'The little dog', 'Tim and Sue went', 'One day a bird', 'The sun was'];
  for (let i = 0; i < 16; i++) {
    lws.send(JSON.stringify({ type: 'generate', id: `l${i}`, prompt: prompts[i % prompts.length], max_tokens: 40,
      temperature: 0.8, seed: i }));
  }
  await waitFor(() => done >= 16, 60000, `learning traffic: ${done} of 16 requests done`);
  await waitFor(async () => /^[1-9]\d* requests?/.test((await text(page, '#l-ring-sub')).split(' · ')[1] || ''), 5000,
    `the ring's fill does not show the requests: ${await text(page, '#l-ring-sub')}`);
  check(Number(await page.locator('#l-ring').evaluate((m) => m.value)) > 0, 'the ring meter is empty');
  await waitFor(async () => Number(await page.locator('#chart-learn').getAttribute('data-swaps')) >= 1, 90000,
    `no head swap marked: ${await text(page, '#l-state')} / ${await text(page, '#l-msg')}`);
  check(/^v[1-9]/.test(await text(page, '#l-head')) && Number(await text(page, '#l-rate')) > 0
    && /CPU share \d+%/.test(await text(page, '#l-cpu')),
  `learning tiles after a swap: ${await text(page, '#l-head')} / ${await text(page, '#l-rate')} / ${await text(page, '#l-cpu')}`);
  await page.locator('#learn-panel').screenshot({ path: artifactPath('web-monitor-learn.png') });
  lws.terminate();
  const rc = await srv.stop('SIGTERM');
  check(rc.code === 0, `specd serve exited ${JSON.stringify(rc)}\n${srv.log()}`);
}

main(run);
