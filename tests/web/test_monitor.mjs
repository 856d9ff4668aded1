// test_monitor.mjs — web/index.html (the live monitor) in a real browser
// (Debian's chromium through playwright-core) against a real `specd serve`
// (stories260K + llama2xs): it loads without console errors, shows the model
// banner; while an independent WebSocket client generates, the charts receive
// points, tokens/s and α change and the sequence table lists the client's
// sessions; a failed policy reload raises the warning and a good one clears
// it; after the server is killed and restarted on the same port the page shows
// "disconnected" and then reconnects by itself.
import fs from 'node:fs';
import path from 'node:path';
import {
  Fail, artifactPath, check, connectWs, launch, main, needBrowser, needSpecd, openPage, sleep, startSpecd, waitFor,
} from './webtest.mjs';

const GOOD = 'speculation:\n  gamma_default: 4\n';
const BAD = 'speculation:\n  gamma_max: 99\n'; // out of range (1..16): the reload must fail

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
  srv = await startSpecd({ port, config: GOOD, dir: srv.dir });
  const before = await snapshots(page);
  await waitFor(async () => (await page.locator('#conn').getAttribute('data-state')) === 'open' && (await snapshots(page)) > before + 2,
    15000, 'the page did not reconnect after the restart');
  // only the expected failed WebSocket attempts while the server was down
  const others = page.problems.filter((p) => !/WebSocket connection to .*\/v1\/monitor.* failed/.test(p));
  check(others.length === 0, `page problems after the restart: ${others.join('; ')}`);
  const rc = await srv.stop('SIGTERM');
  check(rc.code === 0, `specd serve exited ${JSON.stringify(rc)}\n${srv.log()}`);
}

main(run);
