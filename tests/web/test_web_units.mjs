// test_web_units.mjs — the pure helpers of web/common.js under node (no
// browser): the draft/target split by accepted_bytes (multi-byte text
// included), the cost per 1M tokens formula and the reconnect backoff.
import assert from 'node:assert/strict';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const SRC = process.env.SPECD_SRC || path.resolve(import.meta.dirname, '..', '..');
const { splitAccepted, costPerMillion, pricedCost, MIN_PRICED_TPS, backoffMs, fmtUsd } = await import(pathToFileURL(path.join(SRC, 'web', 'common.js')).href);

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

console.log('PASS');
