// The runner's conformance table: small k6 scripts and what k6 itself gives
// for each (exit code, metric values, timing), from k6's documentation and
// source (grafana/k6; paths below). Only what the shop's scripts rely on.
//
//   node --test shim/        (make k6-check runs it)
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

const runner = new URL('./run.mjs', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'k6-conformance-'));

// A server that answers after ?ms= milliseconds and counts the requests it
// holds at once (the most since the last GET /reset).
let inFlight = 0, most = 0;
const server = http.createServer((req, res) => {
  if (req.url === '/reset') {
    most = 0;
    return res.end('');
  }
  inFlight++;
  most = Math.max(most, inFlight);
  const wait = Number(new URL(req.url || '/', 'http://x').searchParams.get('ms') || 0);
  setTimeout(() => {
    inFlight--;
    res.end('{}');
  }, wait);
});
let base = '';
before(() => new Promise((done) => server.listen(0, '127.0.0.1', () => {
  base = `http://127.0.0.1:${/** @type {any} */ (server.address()).port}`;
  done(undefined);
})));
after(() => server.close());

// Every script ends with this handleSummary: the metrics as one JSON line.
const SUMMARY = `
export function handleSummary(data) {
  const m = {};
  for (const [k, v] of Object.entries(data.metrics)) m[k] = v.values;
  return { stdout: JSON.stringify({ metrics: m, checks: data.root_group.checks }) + '\\n' };
}`;

/** Runs a script; resolves with its exit code, metric values, checks, wall time. */
function k6(name, src) {
  const file = join(dir, `${name}.js`);
  writeFileSync(file, `${src}\n${SUMMARY}\n`);
  return new Promise((done) => {
    const t0 = performance.now();
    const p = spawn(process.execPath, [runner, '-e', `BASE=${base}`, file], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    p.stdout.on('data', (b) => { out += b; });
    p.stderr.on('data', (b) => { err += b; });
    p.on('close', (code) => {
      const line = out.trim().split('\n').pop() || '{}';
      let parsed = { metrics: {}, checks: [] };
      try { parsed = JSON.parse(line); } catch (_) { /* no summary: a script error */ }
      done({ code, ...parsed, ms: performance.now() - t0, err });
    });
  });
}

const near = (got, want, what) => assert.ok(Math.abs(got - want) <= want * 0.1, `${what}: ${got}, want ${want} ±10%`);

test('VUs run at once, each with its own init code', async () => {
  // k6 lib/executor/per_vu_iterations.go starts every VU together; each VU
  // has its own JS runtime and runs the init code itself (js/runner.go NewVU).
  await fetch(`${base}/reset`);
  const r = await k6('vus', `
import http from 'k6/http';
import { Counter } from 'k6/metrics';
const seen = new Counter('seen');
let mine = 0; // init code: one per VU
export const options = { scenarios: { s: { executor: 'per-vu-iterations', vus: 50, iterations: 2 } } };
export default function () { mine++; seen.add(1, { n: String(mine) }); http.get(__ENV.BASE + '/?ms=300'); }
export const thresholds = {};
`.replace('export const thresholds = {};', "options.thresholds = { 'seen{n:1}': ['count==50'], 'seen{n:2}': ['count==50'] };"));
  assert.equal(r.code, 0, r.err);
  assert.ok(most >= 45, `at most ${most} requests in flight, want about 50`);
});

test('a threshold whose metric got no samples is not evaluated', async () => {
  // k6 skips the thresholds of a metric that got no samples and passes the
  // run (grafana/k6 issues #1053 and #1346; metrics/engine).
  const r = await k6('nosamples', `
import { Rate } from 'k6/metrics';
const never = new Rate('never');
export const options = { iterations: 1, thresholds: { never: ['rate>0.99'], 'iterations{scenario:nope}': ['count>5'] } };
export default function () { if (false) never.add(1); }
`);
  assert.equal(r.code, 0, r.err);
});

test('a throwing iteration ends there, is counted, and the run goes on', async () => {
  // k6 js/runner.go: iterations and iteration_duration are emitted for every
  // iteration that was not interrupted, exception or not; the error is
  // logged and the exit code stays 0. A check whose function throws throws
  // out of check() (js/modules/k6/k6.go).
  const r = await k6('throws', `
import { check } from 'k6';
import { Counter } from 'k6/metrics';
const before = new Counter('before');
const afterCheck = new Counter('after_check');
export const options = { scenarios: { s: { executor: 'shared-iterations', vus: 2, iterations: 4 } } };
export default function () {
  before.add(1);
  check(1, { 'throws': () => { throw new Error('boom'); } });
  afterCheck.add(1);
}
`);
  assert.equal(r.code, 0, r.err);
  assert.equal(r.metrics.iterations.count, 4);
  assert.equal(r.metrics.before.count, 4);
  assert.equal(r.metrics.after_check, undefined);
  assert.match(r.err, /boom/);
});

for (const [name, src, code] of /** @type {[string, string, number][]} */ ([
  // errext/exitcodes/codes.go: ThresholdsHaveFailed 99, ScriptException 107, ScriptAborted 108.
  ['threshold crossed: 99', `import { Counter } from 'k6/metrics';
const bad = new Counter('bad');
export const options = { iterations: 1, thresholds: { bad: ['count==0'] } };
export default function () { bad.add(1); }`, 99],
  ['setup() throws: 107', `export function setup() { throw new Error('no'); }
export default function () {}`, 107],
  ['init code throws: 107', `throw new Error('init');
export default function () {}`, 107],
]))  {
  test(`exit code: ${name}`, async () => {
    const r = await k6(name.replace(/\W+/g, '-'), src);
    assert.equal(r.code, code, r.err);
  });
}

test('exec.test.abort() stops the run at once: 108, teardown still runs', async () => {
  // k6 docs, k6/execution, test.abort(): "It aborts the test run with the exit
  // code 108 ... Aborting the test will not prevent the teardown() execution."
  const r = await k6('abort', `
import exec from 'k6/execution';
import { sleep } from 'k6';
export const options = { scenarios: { s: { executor: 'constant-vus', vus: 3, duration: '20s' } } };
export default function () { sleep(0.2); if (exec.vu.idInTest === 1) exec.test.abort('enough'); }
export function teardown() { console.log('teardown ran'); }
`);
  assert.equal(r.code, 108, r.err);
  assert.match(r.err, /teardown ran/);
  assert.ok(r.ms < 8000, `ran ${r.ms} ms after abort`);
});

test('samples carry the scenario tag', async () => {
  // k6 lib/executor/helpers.go getMetricTags: every sample of a scenario is tagged scenario=<name>.
  const r = await k6('scenario', `
export const options = {
  scenarios: { one: { executor: 'shared-iterations', iterations: 2 }, two: { executor: 'shared-iterations', iterations: 3 } },
  thresholds: { 'iterations{scenario:one}': ['count==2'], 'iterations{scenario:two}': ['count==3'] },
};
export default function () {}
`);
  assert.equal(r.code, 0, r.err);
});

test('http.batch sends at most six requests at once to one host', async () => {
  // k6 lib/options.go: batchPerHost defaults to 6 (batch, all hosts: 20).
  await fetch(`${base}/reset`);
  const r = await k6('batch', `
import http from 'k6/http';
export default function () {
  const reqs = [];
  for (let i = 0; i < 18; i++) reqs.push(['GET', __ENV.BASE + '/?ms=150']);
  http.batch(reqs);
}
`);
  assert.equal(r.code, 0, r.err);
  assert.equal(most, 6);
});

test('constant-arrival-rate: rate x duration iterations, from t=0, one per period', async () => {
  // k6 lib/executor/constant_arrival_rate.go: iteration k starts at k*timeUnit/rate, while inside duration.
  const r = await k6('car', `
import { Trend } from 'k6/metrics';
import exec from 'k6/execution';
const at = new Trend('at');
export const options = { scenarios: { s: { executor: 'constant-arrival-rate', rate: 20, timeUnit: '1s', duration: '2s', preAllocatedVUs: 5 } } };
export default function () { at.add(Date.now() - exec.scenario.startTime); }
`);
  assert.equal(r.code, 0, r.err);
  assert.equal(r.metrics.iterations.count, 40);
  near(r.metrics.at.max, 1950, 'last start');
  near(r.metrics.at.med, 975, 'median start');
});

test('ramping-arrival-rate, three stages: iteration n starts where the area under the rate reaches n', async () => {
  // k6 lib/executor/ramping_arrival_rate.go RampingArrivalRateConfig.cal.
  const r = await k6('rar', `
import { Trend } from 'k6/metrics';
import exec from 'k6/execution';
const at = new Trend('at');
export const options = {
  summaryTrendStats: ['min', 'med', 'max', 'p(25)'],
  scenarios: { s: { executor: 'ramping-arrival-rate', startRate: 0, timeUnit: '1s', preAllocatedVUs: 5,
    stages: [{ target: 40, duration: '1s' }, { target: 40, duration: '1s' }, { target: 0, duration: '1s' }] } },
};
export default function () { at.add(Date.now() - exec.scenario.startTime); }
`);
  assert.equal(r.code, 0, r.err);
  // 20 in the ramp up, 40 while it holds, 20 in the ramp down.
  assert.ok(r.metrics.iterations.count >= 79 && r.metrics.iterations.count <= 80, `${r.metrics.iterations.count} iterations`);
  near(r.metrics.at.min, Math.sqrt(2 / 40) * 1000, 'first start (area 1 of a 0->40/s ramp)');
  near(r.metrics.at['p(25)'], 1000, 'the 20th start (end of the ramp)');
  near(r.metrics.at.med, 1500, 'median start');
});

test('arrival-rate without a free VU: dropped_iterations', async () => {
  // k6 ramping_arrival_rate.go / constant_arrival_rate.go: no free VU and maxVUs reached -> dropped_iterations += 1.
  const r = await k6('dropped', `
import { sleep } from 'k6';
export const options = { scenarios: { s: { executor: 'constant-arrival-rate', rate: 10, timeUnit: '1s', duration: '1s', preAllocatedVUs: 1, maxVUs: 1 } },
  thresholds: { dropped_iterations: ['count==0'] } };
export default function () { sleep(0.45); }
`);
  assert.equal(r.code, 99, r.err);
  assert.equal(r.metrics.iterations.count + r.metrics.dropped_iterations.count, 10);
  assert.ok(r.metrics.dropped_iterations.count >= 6, `${r.metrics.dropped_iterations.count} dropped`);
});

test('per-vu-iterations, shared-iterations, constant-vus with duration', async () => {
  // k6 lib/executor: per_vu_iterations.go (vus x iterations), shared_iterations.go
  // (iterations in all), constant_vus.go (iterations start while inside duration).
  const r = await k6('loops', `
import { sleep } from 'k6';
export const options = {
  scenarios: {
    per: { executor: 'per-vu-iterations', vus: 3, iterations: 2 },
    shared: { executor: 'shared-iterations', vus: 3, iterations: 7 },
    cvus: { executor: 'constant-vus', vus: 2, duration: '1s', exec: 'slow' },
  },
  thresholds: { 'iterations{scenario:per}': ['count==6'], 'iterations{scenario:shared}': ['count==7'], 'iterations{scenario:cvus}': ['count==8'] },
};
export default function () {}
export function slow() { sleep(0.3); }
`);
  assert.equal(r.code, 0, r.err);
});

test('maxDuration and gracefulStop end an iteration-based scenario; startTime delays one', async () => {
  // k6 lib/executor/base_config.go: maxDuration (default 10m) then gracefulStop
  // (default 30s), after which iterations are interrupted and not counted;
  // startTime offsets a scenario from the test start.
  const r = await k6('maxdur', `
import { sleep } from 'k6';
import { Trend } from 'k6/metrics';
const late = new Trend('late');
export const options = {
  scenarios: {
    capped: { executor: 'per-vu-iterations', vus: 1, iterations: 100, maxDuration: '1s', gracefulStop: '0s' },
    later: { executor: 'shared-iterations', iterations: 1, startTime: '1s', exec: 'later' },
  },
};
export function setup() { return { t0: Date.now() }; }
export default function () { sleep(0.1); }
export function later(d) { late.add(Date.now() - d.t0); }
`);
  assert.equal(r.code, 0, r.err);
  const capped = r.metrics.iterations.count - 1;
  assert.ok(capped >= 8 && capped <= 10, `${capped} iterations in 1 s of 0.1 s each`);
  near(r.metrics.late.max, 1000, 'startTime');
});
