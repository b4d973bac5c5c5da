#!/usr/bin/env node
// A stand-in for `k6 run` where no k6 binary exists (CI):
//
//   node shim/run.mjs [-e NAME=VALUE]... script.js
//
// It follows k6 wherever the verdict depends on it (the conformance table in
// conformance.test.mjs holds it to that):
//
// - VUs run at once, each in its own JS context with its own run of the init
//   code (vu.mjs); hundreds of requests are in flight together.
// - The executors' timing: per-vu-iterations, shared-iterations,
//   constant-vus, constant-arrival-rate and ramping-arrival-rate (k6's
//   formula for when iteration n starts), startTime, maxDuration, duration,
//   gracefulStop; an arrival-rate iteration without a free VU is counted in
//   dropped_iterations.
// - An iteration that throws ends there, is logged and still counted in
//   `iterations` (k6 js/runner.go emits it for every iteration that was not
//   interrupted); the run goes on.
// - Thresholds are evaluated after teardown(); one whose (sub)metric got no
//   samples is not evaluated and does not fail the run.
// - Exit codes as k6's (errext/exitcodes/codes.go): 0 passed, 99 a threshold
//   crossed, 107 the script threw in init, setup() or teardown(), 108
//   exec.test.abort() (which stops the run at once; teardown() still runs).
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import vm from 'node:vm';
import { holds, metrics, parseExpr, parseSubmetric, values, add } from './metrics.mjs';
import { Abort, Interrupt, VU, flight, ms } from './vu.mjs';

// vm.SourceTextModule needs --experimental-vm-modules: run again with it.
if (typeof vm.SourceTextModule !== 'function') {
  const r = spawnSync(process.execPath, ['--experimental-vm-modules', '--no-warnings', ...process.argv.slice(1)], { stdio: 'inherit' });
  process.exit(r.status === null ? 1 : r.status);
}

const EXIT = { thresholds: 99, script: 107, aborted: 108 };

function usage(msg) {
  if (msg) console.error(`k6 runner: ${msg}`);
  console.error('usage: node shim/run.mjs [-e NAME=VALUE]... script.js');
  process.exit(2);
}

const env = { ...process.env };
let script = '';
const args = process.argv.slice(2);
if (args[0] === 'run') args.shift();
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === '-e' || a === '--env') {
    const kv = args[++i] || '';
    const j = kv.indexOf('=');
    if (j < 1) usage(`-e ${kv}: want NAME=VALUE`);
    env[kv.slice(0, j)] = kv.slice(j + 1);
  } else if (a.startsWith('-')) {
    usage(`unknown flag ${a}`);
  } else if (script) {
    usage(`one script, got ${script} and ${a}`);
  } else {
    script = a;
  }
}
if (!script) usage('no script');

const since = (t0) => ((performance.now() - t0) / 1000).toFixed(0).padStart(4, '0');
const waitMs = (n) => new Promise((r) => setTimeout(r, Math.max(0, n)));

class Run {
  constructor() {
    this.options = {};
    this.started = performance.now();
    this.completed = 0;
    this.interrupted = 0;
    this.active = 0;
    this.initialized = 0;
    this.lastId = 0;
    /** @type {VU[]} */
    this.free = [];
    /** @type {Set<VU>} */
    this.busy = new Set();
    this.aborted = '';
    /** @type {Map<string, Map<string, {passes: number, fails: number}>>} group path -> check -> counts */
    this.checks = new Map();
    this.batchLimits = { batch: 20, batchPerHost: 6 };
    /** @type {Set<() => void>} */
    this.onAbort = new Set();
  }

  log(level, msg) {
    process.stderr.write(`${level}[${since(this.started)}] ${msg}\n`);
  }

  check(group, name, ok) {
    let g = this.checks.get(group);
    if (!g) this.checks.set(group, (g = new Map()));
    const c = g.get(name) || { passes: 0, fails: 0 };
    if (ok) c.passes++;
    else c.fails++;
    g.set(name, c);
  }

  abort(msg, from) {
    if (this.aborted) return;
    this.aborted = msg || 'test aborted';
    this.log('ERRO', `test aborted: ${this.aborted}`);
    for (const vu of this.busy) if (vu !== from) vu.interrupt();
    for (const f of this.onAbort) f();
  }

  async newVU() {
    const vu = new VU(++this.lastId, script, env, this);
    await vu.init();
    this.initialized++;
    return vu;
  }

  /** Up to n initialised VUs (more are made as needed). */
  async take(n) {
    const got = this.free.splice(0, n);
    while (got.length < n) got.push(await this.newVU());
    return got;
  }
}

const run = new Run();

// The first context: options, setup(), teardown(), handleSummary() (k6 runs
// those in a VU of their own, __VU 0).
const vu0 = new VU(0, script, env, run);
let mod;
try {
  mod = await vu0.init();
} catch (e) {
  run.log('ERRO', `the script's init code threw: ${e && e.stack ? e.stack : e}`);
  process.exit(EXIT.script);
}
const options = mod.options || {};
run.options = options;
if (options.batch) run.batchLimits.batch = options.batch;
if (options.batchPerHost) run.batchLimits.batchPerHost = options.batchPerHost;

/** The scenarios, with k6's shortcuts (vus/iterations/duration) and defaults. */
function scenarios() {
  if (options.scenarios) return options.scenarios;
  if (options.stages) usage('options.stages (ramping-vus) is not implemented');
  if (options.duration) return { default: { executor: 'constant-vus', vus: options.vus || 1, duration: options.duration } };
  return { default: { executor: 'shared-iterations', vus: options.vus || 1, iterations: options.iterations || 1 } };
}

// Thresholds are checked before the run starts, as k6 does (a bad expression is an error, exit 104).
/** @type {[string, string, Record<string,string>, string[]][]} */
const thresholds = [];
for (const [key, list] of Object.entries(options.thresholds || {})) {
  const [name, tags] = parseSubmetric(key);
  const exprs = list.map((e) => (typeof e === 'string' ? e : e.threshold));
  const m = metrics.get(name);
  if (!m) {
    run.log('ERRO', `invalid threshold on ${key}: no metric ${name}`);
    process.exit(104);
  }
  for (const e of exprs) parseExpr(e, m.type);
  thresholds.push([key, name, tags, exprs]);
}

// Pre-allocate the VUs every scenario starts with, before setup() as k6
// does (lib/execution.go Init), so that the scenarios start right after it.
const plan = scenarios();
const need = Object.values(plan).reduce((a, c) => a + (c.executor.endsWith('arrival-rate') ? c.preAllocatedVUs || 1 : c.vus || 1), 0);
try {
  run.free.push(...(await Promise.all(Array.from({ length: need }, () => run.newVU()))));
  run.free.sort((a, b) => a.id - b.id);
} catch (e) {
  run.log('ERRO', `a VU's init code threw: ${e && e.stack ? e.stack : e}`);
  process.exit(EXIT.script);
}
let setupJSON = 'null';
if (typeof mod.setup === 'function') {
  vu0.phase = 'setup';
  try {
    const data = await vu0.call(mod.setup, []);
    setupJSON = data === undefined ? 'null' : JSON.stringify(data);
  } catch (e) {
    if (e instanceof Abort) {
      run.log('ERRO', 'setup() called test.abort()');
      process.exit(EXIT.aborted);
    }
    run.log('ERRO', `setup() threw: ${e && e.stack ? e.stack : e}`);
    process.exit(EXIT.script);
  }
  vu0.phase = '';
}
const vuData = (vu) => {
  if (!('data' in vu)) vu.data = JSON.parse(setupJSON);
  return vu.data;
};

/**
 * One iteration of a scenario on a VU. Resolves when it ends; never rejects.
 * @param {VU} vu
 * @param {any} sc the scenario's state
 */
async function iterate(vu, sc) {
  vu.reset();
  run.busy.add(vu);
  run.active++;
  vu.iterations++;
  vu.context.__ITER = vu.iterations - 1;
  vu.scenario = { name: sc.name, executor: sc.executor, startTime: sc.startedAt, iterationInTest: sc.next++, iterationInScenario: sc.perVU.get(vu) || 0 };
  sc.perVU.set(vu, vu.scenario.iterationInScenario + 1);
  const t0 = performance.now();
  let full = true;
  try {
    await vu.call(vu.exports[sc.fn], [vuData(vu)]);
  } catch (e) {
    if (e instanceof Interrupt || (run.aborted && !(e instanceof Abort))) {
      full = false;
    } else if (!(e instanceof Abort)) {
      run.log('ERRO', `${e && e.stack ? e.stack : e}  executor=${sc.executor} scenario=${sc.name} vu=${vu.id} source=stacktrace`);
    }
  }
  run.busy.delete(vu);
  run.active--;
  if (full) {
    add('iterations', 'counter', 1, { scenario: sc.name });
    add('iteration_duration', 'trend', performance.now() - t0, { scenario: sc.name }, 'time');
    run.completed++;
  } else {
    run.interrupted++;
  }
}

/** When iteration n (1, 2, ...) of a ramping-arrival-rate starts, in ms (k6 RampingArrivalRateConfig.cal). */
function* rampingTimes(sc) {
  const unit = ms(sc.timeUnit, 1000);
  let from = (sc.startRate || 0) / unit, start = 0, done = 0, end = 0, i = 1;
  for (const st of sc.stages) {
    const to = st.target / unit, dur = ms(st.duration, 0);
    if (from !== to) {
      end += dur * ((to - from) / 2 + from);
      for (; i <= end + 1e-9; i++) yield start + (from * dur - Math.sqrt(Math.max(0, dur * (from * from * dur + 2 * (i - done) * (to - from))))) / (from - to);
    } else {
      end += dur * to;
      for (; i <= end + 1e-9; i++) yield start + (i - done) / to;
    }
    done = end;
    from = to;
    start += dur;
  }
}

/** constant-arrival-rate: iteration k at k * timeUnit / rate, from 0, while inside duration. */
function* constantTimes(sc) {
  const period = ms(sc.timeUnit, 1000) / sc.rate, dur = ms(sc.duration, 0);
  for (let k = 0; k * period < dur; k++) yield k * period;
}

/** Runs one scenario to its end (or the graceful stop). */
async function scenario(name, cfg) {
  const sc = { name, executor: cfg.executor, fn: cfg.exec || 'default', next: 0, perVU: new Map(), startedAt: 0 };
  if (typeof mod[sc.fn] !== 'function') throw new Error(`scenario ${name}: the script exports no function ${cfg.exec || 'default'}`);
  const grace = ms(cfg.gracefulStop, 30000);
  await waitMs(ms(cfg.startTime, 0) - (performance.now() - run.testStart));
  if (run.aborted) return;
  sc.startedAt = Date.now();
  const t0 = performance.now();
  const arrival = cfg.executor === 'constant-arrival-rate' || cfg.executor === 'ramping-arrival-rate';
  const iterationBased = cfg.executor === 'per-vu-iterations' || cfg.executor === 'shared-iterations';
  let stopAt;
  if (iterationBased) stopAt = ms(cfg.maxDuration, 600000);
  else if (cfg.executor === 'constant-vus' || cfg.executor === 'constant-arrival-rate') stopAt = ms(cfg.duration, 0);
  else if (cfg.executor === 'ramping-arrival-rate') stopAt = cfg.stages.reduce((a, st) => a + ms(st.duration, 0), 0);
  else throw new Error(`scenario ${name}: executor ${cfg.executor} is not implemented`);
  const vus = await run.take(arrival ? cfg.preAllocatedVUs || 1 : cfg.vus || 1);
  const mine = new Set(vus);
  // At the end of the graceful stop, whatever still runs is interrupted.
  let hard;
  const hardStop = new Promise((r) => { hard = setTimeout(r, stopAt + grace); });
  hardStop.then(() => { for (const vu of mine) if (run.busy.has(vu)) vu.interrupt(); });
  const time = () => performance.now() - t0;
  const live = () => !run.aborted && time() < stopAt;

  const loops = [];
  if (cfg.executor === 'per-vu-iterations') {
    for (const vu of vus) loops.push((async () => { for (let k = 0; k < (cfg.iterations || 1) && live(); k++) await iterate(vu, sc); })());
  } else if (cfg.executor === 'shared-iterations') {
    let left = cfg.iterations || 1;
    for (const vu of vus) loops.push((async () => { while (left > 0 && live()) { left--; await iterate(vu, sc); } })());
  } else if (cfg.executor === 'constant-vus') {
    for (const vu of vus) loops.push((async () => { while (live()) await iterate(vu, sc); })());
  } else {
    const max = Math.max(cfg.maxVUs || 0, vus.length);
    const idle = [...vus];
    let total = vus.length, dropped = 0, growing = false;
    const running = new Set();
    const times = cfg.executor === 'constant-arrival-rate' ? constantTimes(cfg) : rampingTimes(cfg);
    let lag = 0;
    for (const at of times) {
      // Every start due inside the duration is made, late if this process
      // was starved (k6 starts a late one at once, too); the lag is reported.
      if (run.aborted || at >= stopAt) break;
      if (at > time()) await waitMs(at - time());
      if (run.aborted) break;
      lag = Math.max(lag, time() - at);
      const vu = idle.pop();
      if (!vu) {
        dropped++;
        add('dropped_iterations', 'counter', 1, { scenario: name });
        // Like k6, start one more VU in the background while below maxVUs.
        if (total < max && !growing) {
          growing = true;
          total++;
          run.take(1).then(([v]) => { mine.add(v); idle.push(v); growing = false; });
        }
        continue;
      }
      const p = iterate(vu, sc).then(() => { running.delete(p); idle.push(vu); });
      running.add(p);
    }
    if (lag > 100) run.log('WARN', `scenario ${name}: iterations started up to ${lag.toFixed(0)} ms late (this machine is busy; timings are unreliable)`);
    if (dropped > 0) run.log('WARN', `scenario ${name}: ${dropped} iterations dropped (no free VU; maxVUs ${max})`);
    loops.push(...running);
  }
  await Promise.race([Promise.all(loops), hardStop]);
  // Interrupted iterations end at their next wait; let them.
  await Promise.all(loops);
  clearTimeout(hard);
  for (const vu of mine) run.free.push(vu);
}

run.testStart = performance.now();
flight.most = flight.now; // the scenarios' own, not setup's
let exitCode = 0;
try {
  await Promise.all(Object.entries(plan).map(([n, c]) => scenario(n, c)));
} catch (e) {
  run.log('ERRO', String(e && e.stack ? e.stack : e));
  process.exit(EXIT.script);
}
if (run.aborted) exitCode = EXIT.aborted;
run.log('INFO', `at most ${flight.most} requests were in flight at once (scenarios)`);

if (typeof mod.teardown === 'function') {
  vu0.phase = 'teardown';
  vu0.reset();
  try {
    await vu0.call(mod.teardown, [JSON.parse(setupJSON)]);
  } catch (e) {
    if (e instanceof Abort) exitCode = EXIT.aborted;
    else {
      run.log('ERRO', `teardown() threw: ${e && e.stack ? e.stack : e}`);
      exitCode = exitCode || EXIT.script;
    }
  }
}

// Thresholds and handleSummary's data, in k6's shape.
const elapsed = (performance.now() - run.started) / 1000;
const trendStats = options.summaryTrendStats || ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)'];
const pick = (type, v) => (type === 'trend' ? Object.fromEntries(trendStats.map((s) => [s, v[s]])) : v);
/** @type {Record<string, any>} */
const out = {};
for (const [name, m] of metrics) {
  if (m.samples.length === 0) continue; // k6 reports only metrics that got samples
  out[name] = { type: m.type, contains: m.contains, values: pick(m.type, values(m.type, m.samples, elapsed, trendStats.filter((s) => s.startsWith('p(')))) };
}
const crossed = [];
for (const [key, name, tags, exprs] of thresholds) {
  const m = /** @type {any} */ (metrics.get(name));
  const samples = m.samples.filter((s) => Object.entries(tags).every(([k, v]) => s.tags[k] === v));
  if (samples.length === 0) continue; // no samples: not evaluated (k6 metrics/engine)
  const wanted = exprs.map((e) => parseExpr(e, m.type).agg).filter((a) => a.startsWith('p('));
  const v = values(m.type, samples, elapsed, [...new Set([...wanted, ...trendStats.filter((s) => s.startsWith('p('))])]);
  /** @type {Record<string, {ok: boolean}>} */
  const th = {};
  for (const e of exprs) {
    const ok = holds(e, m.type, v);
    th[e] = { ok };
    if (!ok && !crossed.includes(key)) crossed.push(key);
  }
  out[key] = { type: m.type, contains: m.contains, values: pick(m.type, v), thresholds: th };
}

/** The checks as k6's root_group: nested groups, each with its checks. */
function groups() {
  const root = { name: '', path: '', id: '', groups: [], checks: [] };
  const find = (path) => {
    let g = root;
    for (const part of path.split('::').slice(1)) {
      let c = g.groups.find((x) => x.name === part);
      if (!c) g.groups.push((c = { name: part, path: `${g.path}::${part}`, id: '', groups: [], checks: [] }));
      g = c;
    }
    return g;
  };
  for (const [path, checks] of run.checks) {
    const g = find(path);
    for (const [name, c] of checks) g.checks.push({ name, path: `${path}::${name}`, id: '', passes: c.passes, fails: c.fails });
  }
  return root;
}

const summary = {
  metrics: out,
  root_group: groups(),
  options: { summaryTrendStats: trendStats, summaryTimeUnit: '', noColor: true },
  state: { isStdOutTTY: false, isStdErrTTY: false, testRunDurationMs: elapsed * 1000 },
};
if (typeof mod.handleSummary === 'function') {
  vu0.phase = 'summary';
  try {
    const files = (await vu0.call(mod.handleSummary, [summary])) || {};
    for (const [dest, content] of Object.entries(files)) {
      if (dest === 'stdout') process.stdout.write(String(content));
      else if (dest === 'stderr') process.stderr.write(String(content));
      else {
        mkdirSync(dirname(resolve(dest)), { recursive: true });
        writeFileSync(dest, typeof content === 'string' ? content : JSON.stringify(content));
      }
    }
  } catch (e) {
    run.log('ERRO', `handleSummary() threw: ${e && e.stack ? e.stack : e}`);
  }
} else {
  for (const [n, m] of Object.entries(out)) process.stdout.write(`  ${n}: ${JSON.stringify(m.values)}\n`);
}
if (crossed.length > 0) {
  run.log('ERRO', `thresholds on metrics '${crossed.join(', ')}' have been crossed`);
  if (exitCode === 0) exitCode = EXIT.thresholds;
}
process.exit(exitCode);
