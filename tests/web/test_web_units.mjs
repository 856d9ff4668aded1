// test_web_units.mjs — the pure helpers of web/common.js under node (no
// browser): the draft/target split by accepted_bytes (multi-byte text
// included), the cost per 1M tokens formula, the reconnect backoff, the chart
// clock, the proposer shares and the settings fields' checks.
import assert from 'node:assert/strict';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const SRC = process.env.SPECD_SRC || path.resolve(import.meta.dirname, '..', '..');
const { splitAccepted, costPerMillion, pricedCost, MIN_PRICED_TPS, backoffMs, fmtUsd, fmtClock, proposerShares, checkField } = await import(pathToFileURL(path.join(SRC, 'web', 'common.js')).href);

// split: byte counts, clamping, never inside a UTF-8 sequence
assert.deepEqual(splitAccepted(' the cat', 4), [' the', ' cat']);
assert.deepEqual(splitAccepted('abc', 0), ['', 'abc']);
assert.deepEqual(splitAccepted('abc', 3), ['abc', '']);
assert.deepEqual(splitAccepted('abc', 99), ['abc', '']);
assert.deepEqual(splitAccepted('abc', -2), ['', 'abc']);
assert.deepEqual(splitAccepted('abc', undefined), ['', 'abc']);
assert.deepEqual(splitAccepted('héllo', 3), ['hé', 'llo']);   // é is 2 bytes
assert.deepEqual(splitAccepted('héllo', 2), ['h', 'éllo']);   // inside é: moved back
assert.deepEqual(splitAccepted('a😀b', 5), ['a😀', 'b']);      // 4-byte emoji
for (let n = 0; n <= 6; n++) {
  const [a, b] = splitAccepted('a😀b', n);
  assert.equal(a + b, 'a😀b', `split at ${n} loses text`);
}

// cost: price / (tokens/s × 3600) × 1e6; the brief's row: $8/h at 56 tok/s ≈ $39.68
assert.ok(Math.abs(costPerMillion(8, 56) - 39.68) < 0.01);
assert.ok(Math.abs(costPerMillion(3.6, 1000) - 1) < 1e-12);
assert.equal(costPerMillion(8, 0), null);
assert.equal(costPerMillion(8, null), null);
assert.equal(costPerMillion(-1, 10), null);
assert.equal(costPerMillion(NaN, 10), null);
assert.equal(costPerMillion(0, 10), 0);
// the monitor's cost card: a dash while idle, not "$4,332,431.86 per 1M" from a decaying rate
assert.equal(pricedCost(8, 0.000513), null);
assert.equal(fmtUsd(pricedCost(8, 0.000513)), '—');
assert.equal(pricedCost(8, MIN_PRICED_TPS - 1e-9), null);
assert.ok(Math.abs(pricedCost(8, 56) - 39.68) < 0.01);
assert.equal(fmtUsd(39.6825), '$39.68');
assert.equal(fmtUsd(null), '—');

// backoff: doubles from the minimum, capped, jitter within 80..100 %
assert.equal(backoffMs(1, 500, 5000, () => 1), 500);
assert.equal(backoffMs(2, 500, 5000, () => 1), 1000);
assert.equal(backoffMs(3, 500, 5000, () => 1), 2000);
assert.equal(backoffMs(10, 500, 5000, () => 1), 5000);
assert.equal(backoffMs(1, 500, 5000, () => 0), 400);

// the time axis: HH:MM:SS of local time, never uPlot's ':26.000'
{
  const t = new Date(2026, 0, 2, 9, 5, 26).getTime() / 1000;
  assert.equal(fmtClock(t), '09:05:26');
  assert.equal(fmtClock(t + 0.5), '09:05:26');
  assert.equal(fmtClock(null), '');
}

// the proposers' shares of the target passes: largest first, none that made no pass
{
  const sh = proposerShares([{ method: 'draft', passes: 30, share: 0.6 }, { method: 'ngram', passes: 0, share: 0 },
    { method: 'plain', passes: 20, share: 0.4 }]);
  assert.deepEqual(sh.map((x) => [x.label, x.pct]), [['draft model', '60%'], ['plain', '40%']]);
  assert.deepEqual(proposerShares(undefined), []);
  assert.deepEqual(proposerShares([{ method: 'ngram', passes: 5, share: null }]), []);
}

// settings fields: empty is the server's default; wrong values are named
{
  for (const [rule, ok, bad] of [
    ['0..2', ['0', '0.7', '2'], ['-1', '2.5', 'abc']],
    ['(0,1]', ['0.01', '1'], ['0', '1.5']],
    ['[0,1)', ['0', '0.5'], ['1', '-0.1']],
    ['int>=0', ['0', '40'], ['-1', '1.5', 'x']],
    ['int>=1', ['1', '200'], ['0']],
    ['int', ['-1', '123456789'], ['1e3', '0.5']],
    ['int1..16', ['1', '16'], ['0', '17']],
    ['-2..2', ['-2', '0.5', '2'], ['-2.1', '3']],
    ['(0,100]', ['0.5', '1.1', '100'], ['0', '101']],
    ['stop', ['END', 'a\nb\nc\nd'], ['a\nb\nc\nd\ne', 'x'.repeat(64)]],
    ['schema', ['{"type":"object"}', 'true'], ['{', '[1]', '3']],
  ]) {
    assert.equal(checkField(rule, ''), '', `${rule}: empty`);
    for (const v of ok) assert.equal(checkField(rule, v), '', `${rule}: ${v} should pass`);
    for (const v of bad) assert.notEqual(checkField(rule, v), '', `${rule}: ${v} should fail`);
  }
}

console.log('PASS');
