// The runner's conformance table: small k6 scripts and what k6 itself gives
// for each (exit code, metric values, timing), from k6's documentation and
// source (grafana/k6; paths below). Only what the shop's scripts rely on.
//
//   node --test shim/        (make k6-check runs it)
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
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
function k6(name, src, args = [], summary = SUMMARY) {
  const file = join(dir, `${name}.js`);
  writeFileSync(file, `${src}\n${summary}\n`);
  return new Promise((done) => {
    const t0 = performance.now();
    const p = spawn(process.execPath, [runner, '-e', `BASE=${base}`, ...args, file], { stdio: ['ignore', 'pipe', 'pipe'] });
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

test('at the end every threshold is evaluated: an empty Counter is 0, an empty Trend 0, an empty Rate has no value', async () => {
  // k6 metrics/engine/engine.go: evaluateThresholds(ignoreEmptySinks=true)
  // while the test runs, evaluateThresholds(false) once it ended; an empty
  // CounterSink gives count 0, an empty TrendSink 0 (metrics/sink.go), and
  // only an empty RateSink gives no value, which passes
  // (metrics/thresholds.go Thresholds.Run, runNoTaint).
  const empty = (name, thresholds) => k6(name, `
import { Counter, Rate, Trend, Gauge } from 'k6/metrics';
const c = new Counter('c'); const r = new Rate('r'); const t = new Trend('t'); const g = new Gauge('g');
export const options = { iterations: 1, thresholds: ${JSON.stringify(thresholds)} };
export default function () { if (false) { c.add(1); r.add(1); t.add(1); g.add(1); } }
`);
  let r = await empty('empty-count-gt0', { c: ['count>0'] });
  assert.equal(r.code, 99, r.err);
  assert.match(r.err, /thresholds on metrics 'c' have been crossed/);
  r = await empty('empty-count-eq0', { c: ['count==0'], 'iterations{scenario:nope}': ['count==0'] });
  assert.equal(r.code, 0, r.err);
  // A metric with a threshold is in the summary although it got no sample (engine.go markObserved).
  assert.deepEqual(r.metrics.c, { count: 0, rate: 0 });
  r = await empty('empty-trend', { t: ['avg>1'] });
  assert.equal(r.code, 99, r.err);
  r = await empty('empty-trend-ok', { t: ['p(99)<100', 'max==0'], g: ['value==0'] });
  assert.equal(r.code, 0, r.err);
  r = await empty('empty-rate', { r: ['rate>0.99'], 'checks{check:never}': ['rate==1'] });
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(r.metrics.r, { rate: 0, passes: 0, fails: 0 });
  r = await empty('empty-submetric', { 'iterations{scenario:nope}': ['count>5'] });
  assert.equal(r.code, 99, r.err);
});

test('a throwing iteration ends there, is counted, and the run goes on', async () => {
  // k6 js/runner.go: iterations and iteration_duration are emitted for every
  // iteration that was not interrupted, exception or not; the error is
  // logged and the exit code stays 0. A check whose function throws is
  // recorded as failed, then throws out of check() (js/modules/k6/k6.go Check).
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
  assert.deepEqual(r.metrics.checks, { rate: 0, passes: 0, fails: 4 });
  assert.equal(r.checks[0].fails, 4);
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

test("a response's request.headers: canonical names, each a list of values; a check's name reaches handleSummary", async () => {
  // k6 lib/netext/httpext/request.go: Request.Headers is map[string][]string
  // from Go's http.Header (canonical names); checks are listed by name in
  // root_group (k6 lib/models.go Group.Checks), whatever the name.
  const r = await k6('request-headers', `
import http from 'k6/http';
import { check } from 'k6';
export const options = { iterations: 1 };
export default function () {
  const res = http.get(__ENV.BASE + '/', { headers: { traceparent: 'tp-1', 'x-ONE': 'a' } });
  check(res, { ['sent ' + res.request.headers.Traceparent[0] + ' ' + res.request.headers['X-One'][0]]: () => true });
}
`);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(r.checks.map((c) => c.name), ['sent tp-1 a']);
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

test('abortOnFail stops the run at the next evaluation, exit 99; teardown and handleSummary still run', async () => {
  // k6 metrics/engine/engine.go StartThresholdCalculations: every 2 s
  // (thresholdsRate) the thresholds with samples are evaluated; a failed one
  // with abortOnFail aborts the run with ThresholdsHaveFailed (99).
  // execution/scheduler.go runs teardown() with the global context after an
  // abort; cmd/run.go's deferred handleSummary runs last.
  const r = await k6('abortonfail', `
import { sleep } from 'k6';
import { Counter } from 'k6/metrics';
const bad = new Counter('bad');
export const options = { scenarios: { s: { executor: 'constant-vus', vus: 2, duration: '30s' } },
  thresholds: { bad: [{ threshold: 'count==0', abortOnFail: true }] } };
export default function () { bad.add(1); sleep(0.1); }
export function teardown() { console.log('teardown ran'); }
`);
  assert.equal(r.code, 99, r.err);
  assert.match(r.err, /abortOnFail/);
  assert.match(r.err, /teardown ran/);
  assert.ok(r.metrics.bad.count > 0, 'the summary came');
  assert.ok(r.ms < 10000, `ran ${r.ms} ms: not stopped`);
});

test('delayAbortEval: no abort before the delay', async () => {
  // k6 metrics/thresholds.go runAll: a failed abortOnFail threshold aborts only once
  // delayAbortEval (AbortGracePeriod) is shorter than the time spent in the test.
  const r = await k6('delayabort', `
import { sleep } from 'k6';
import { Counter } from 'k6/metrics';
const bad = new Counter('bad');
export const options = { scenarios: { s: { executor: 'constant-vus', vus: 1, duration: '30s' } },
  thresholds: { bad: [{ threshold: 'count==0', abortOnFail: true, delayAbortEval: '5s' }] } };
export function setup() { return { t0: Date.now() }; }
export default function () { bad.add(1); sleep(0.1); }
export function teardown(d) { console.log('ran ' + (Date.now() - d.t0) + ' ms'); }
`);
  assert.equal(r.code, 99, r.err);
  const ran = Number(/ran (\d+) ms/.exec(r.err)?.[1]);
  assert.ok(ran >= 5000 && ran < 9000, `aborted after ${ran} ms, want after the 5 s delay, at the next 2 s evaluation`);
});

test('setup() returning nothing gives VUs and teardown undefined', async () => {
  // k6 js/runner.go: Runner.Setup keeps setupData nil for undefined; VU.runFn
  // and Teardown then pass sobek.Undefined().
  const r = await k6('undefined-setup', `
import { Counter } from 'k6/metrics';
const undef = new Counter('undef');
export const options = { iterations: 2, thresholds: { undef: ['count==3'] } };
export function setup() {}
export default function (d) { if (d === undefined) undef.add(1); }
export function teardown(d) { if (d === undefined) undef.add(1); }
`);
  assert.equal(r.code, 0, r.err);
});

for (const [what, body, code] of /** @type {[string, string, number][]} */ ([
  ['test.abort()', "exec.test.abort('no')", 108],
  ['a throw', "throw new Error('no')", 107],
])) {
  test(`handleSummary runs after ${what} in setup(), teardown does not`, async () => {
    // k6 cmd/run.go: handleSummary is deferred before the scheduler runs, so it runs
    // whatever Run returned; execution/scheduler.go Run returns at a failed setup(),
    // before teardown().
    const r = await k6(`setup-fails-${code}`, `
import exec from 'k6/execution';
export function setup() { ${body}; }
export default function () {}
export function teardown() { console.log('teardown ran'); }
`);
    assert.equal(r.code, code, r.err);
    assert.ok(r.metrics, 'handleSummary wrote its line');
    assert.doesNotMatch(r.err, /teardown ran/);
  });
}

test('handleSummary into a missing folder: an error logged, no folder made, the exit code stays', async () => {
  // k6 cmd/run.go handleSummaryResult: fs.OpenFile(path, O_WRONLY|O_CREAT|O_TRUNC),
  // which does not make folders; the error is logged ("failed to handle the
  // end-of-test summary") and changes no exit code.
  const missing = join(dir, 'no-such-dir', 'x.json');
  const r = await k6('missing-dir', `export default function () {}`, [],
    `export function handleSummary() { return { ${JSON.stringify(missing)}: '{}', stdout: '{"metrics":{}}\\n' }; }`);
  assert.equal(r.code, 0, r.err);
  assert.match(r.err, /failed to handle the end-of-test summary/);
  assert.equal(existsSync(join(dir, 'no-such-dir')), false);
});

test("a scenario's env and tags apply to its iterations; --tag to every sample", async () => {
  // k6 js/runner.go VU.Activate: __ENV is the global env with the scenario's
  // env over it; every sample carries the run tags (--tag, options.tags) and
  // the scenario's tags (lib/executor/base_config.go env, tags).
  const r = await k6('scenario-env-tags', `
import { Counter } from 'k6/metrics';
const seen = new Counter('seen');
export const options = {
  scenarios: {
    a: { executor: 'shared-iterations', iterations: 2, env: { WHO: 'a' }, tags: { kind: 'alpha' } },
    b: { executor: 'shared-iterations', iterations: 3 },
  },
  thresholds: {
    'seen{who:a,kind:alpha,run:r1}': ['count==2'], 'seen{who:global,run:r1}': ['count==3'],
    'iterations{kind:alpha}': ['count==2'], 'iterations{run:r1}': ['count==5'],
  },
};
export default function () { seen.add(1, { who: __ENV.WHO }); }
`, ['-e', 'WHO=global', '--tag', 'run=r1']);
  assert.equal(r.code, 0, r.err);
});

test("a Counter's rate is over the test run's duration, from setup() to the end of teardown()", async () => {
  // k6 execution/scheduler.go Run: MarkStarted right before setup(),
  // MarkEnded after teardown(); metrics/thresholds.go and js/summary.go
  // divide a Counter by that duration (lib/execution.go GetCurrentTestRunDuration).
  const r = await k6('counter-rate', `
import { sleep } from 'k6';
import { Counter } from 'k6/metrics';
const c = new Counter('c');
let x = 0; for (let i = 0; i < 3e7; i++) x += i; // init code: not in the test run
export const options = { iterations: 1 };
export function setup() { sleep(0.5); }
export default function () { c.add(10); sleep(0.5); }
export function teardown() { sleep(0.5); }
`);
  assert.equal(r.code, 0, r.err);
  near(r.metrics.c.rate, 10 / 1.5, 'count per second of the test run');
});

test('-u, -i and -d override the script as k6 run does; --out is refused', async () => {
  // k6 lib/options.go Apply: -i or -d clear the script's scenarios and
  // shortcuts; lib/executor/execution_config_shortcuts.go turns iterations
  // into shared-iterations with vus VUs, duration into constant-vus, and
  // nothing into one per-vu-iterations iteration.
  const src = `
import exec from 'k6/execution';
import { Counter } from 'k6/metrics';
const vus = new Counter('vus');
export const options = { scenarios: { s: { executor: 'per-vu-iterations', vus: 2, iterations: 2 } } };
export default function () { if (exec.vu.iterationInInstance === 0) vus.add(1); }
`;
  let r = await k6('cli-u-i', src, ['-u', '3', '-i', '9']);
  assert.equal(r.code, 0, r.err);
  assert.equal(r.metrics.iterations.count, 9);
  assert.equal(r.metrics.vus.count, 3);
  r = await k6('cli-none', src);
  assert.equal(r.metrics.iterations.count, 4);
  r = await k6('cli-out', src, ['--out', 'json=x.json']);
  assert.equal(r.code, 2);
  assert.match(r.err, /not k6/);
});
