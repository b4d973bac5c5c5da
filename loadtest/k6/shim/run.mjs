#!/usr/bin/env node
// A stand-in for `k6 run` where no k6 binary exists (CI):
//
//   node shim/run.mjs [-e NAME=VALUE]... [-u VUS] [-i ITERATIONS] [-d DURATION] [--tag NAME=VALUE]... script.js
//
// It is not k6: it follows k6 v0.54 wherever the verdict depends on it (the
// conformance table in conformance.test.mjs holds it to that, each row
// naming the k6 source it follows):
//
// - VUs run at once, each in its own JS context with its own run of the init
//   code (vu.mjs); hundreds of requests are in flight together.
// - The executors' timing: per-vu-iterations, shared-iterations,
//   constant-vus, constant-arrival-rate and ramping-arrival-rate (k6's
//   formula for when iteration n starts), startTime, maxDuration, duration,
//   gracefulStop; an arrival-rate iteration without a free VU is counted in
//   dropped_iterations. A scenario's env and tags; -u, -i, -d and --tag.
// - An iteration that throws ends there, is logged and still counted in
//   `iterations` (k6 js/runner.go emits it for every iteration that was not
//   interrupted); the run goes on. A check that throws is a failed check.
// - Thresholds: every 2 s while the test runs (metrics that got samples
//   only), for abortOnFail and delayAbortEval; then once more after
//   teardown(), every one of them: an empty Counter is count 0, an empty
//   Trend 0; only an empty Rate has no value and passes.
// - handleSummary() runs after a failed setup() too; it makes no folder.
// - Exit codes as k6's (errext/exitcodes/codes.go): 0 passed, 99 a threshold
//   crossed, 107 the script threw in init, setup() or teardown(), 108
//   exec.test.abort() (which stops the run at once; teardown() still runs).
//
// Not k6: one thread for every VU, so its latencies include its own
// scheduling (README: latency is not judged under it); no --out.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import vm from 'node:vm';
import { add, holds, metrics, parseExpr, parseSubmetric, summaryValues, thresholdValues } from './metrics.mjs';
import { Abort, Interrupt, VU, flight, ms } from './vu.mjs';

// vm.SourceTextModule needs --experimental-vm-modules: run again with it.
if (typeof vm.SourceTextModule !== 'function') {
  const r = spawnSync(process.execPath, ['--experimental-vm-modules', '--no-warnings', ...process.argv.slice(1)], { stdio: 'inherit' });
  process.exit(r.status === null ? 1 : r.status);
}

const EXIT = { thresholds: 99, script: 107, aborted: 108 };

function usage(msg) {
  if (msg) console.error(`k6 runner: ${msg}`);
  console.error('usage: node shim/run.mjs [-e NAME=VALUE]... [-u VUS] [-i ITERATIONS] [-d DURATION] [--tag NAME=VALUE]... script.js');
  process.exit(2);
}

const env = { ...process.env };
let script = '';
/** Options given on the command line; they override the script's (k6 cmd/config.go). */
const cli = /** @type {{vus?: number, iterations?: number, duration?: string}} */ ({});
/** @type {Record<string, string>} --tag NAME=VALUE: tags on every sample (k6's run tags) */
const cliTags = {};
const args = process.argv.slice(2);
if (args[0] === 'run') args.shift();
/** NAME=VALUE -> [NAME, VALUE] */
const pair = (flag, kv) => {
  const j = kv.indexOf('=');
  if (j < 1) usage(`${flag} ${kv}: want NAME=VALUE`);
  return [kv.slice(0, j), kv.slice(j + 1)];
};
const count = (flag, v) => {
  if (!/^\d+$/.test(v || '')) usage(`${flag} ${v}: want a whole number`);
  return Number(v);
};
for (let i = 0; i < args.length; i++) {
  let a = args[i];
  let value = () => args[++i] || '';
  const eq = a.indexOf('=');
  if (a.startsWith('--') && eq > 0) {
    const v = a.slice(eq + 1);
    a = a.slice(0, eq);
    value = () => v;
  }
  if (a === '-e' || a === '--env') {
    const [k, v] = pair(a, value());
    env[k] = v;
  } else if (a === '-u' || a === '--vus') {
    cli.vus = count(a, value());
  } else if (a === '-i' || a === '--iterations') {
    cli.iterations = count(a, value());
  } else if (a === '-d' || a === '--duration') {
    cli.duration = value();
    ms(cli.duration, 0);
  } else if (a === '--tag') {
    const [k, v] = pair(a, value());
    cliTags[k] = v;
  } else if (a === '-o' || a === '--out') {
    console.error(`k6 runner: ${a} ${value()}: this runner is not k6 and has no outputs; run k6 itself for --out (README, "Watch a sale")`);
    process.exit(2);
  } else if (a.startsWith('-')) {
    usage(`unknown flag ${a} (the runner is not k6: -e, -u, -i, -d and --tag only)`);
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
    this.started = performance.now(); // the process: log time stamps
    /** When setup() began and teardown() ended (k6 lib/execution.go MarkStarted, MarkEnded): the test run's duration. */
    this.testStart = 0;
    this.testEnd = 0;
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
    this.abortCode = 0;
    /** @type {Map<string, Map<string, {passes: number, fails: number}>>} group path -> check -> counts */
    this.checks = new Map();
    this.batchLimits = { batch: 20, batchPerHost: 6 };
    /** @type {Record<string, string>} tags of every sample: options.tags, then --tag */
    this.tags = {};
    /** @type {Set<() => void>} */
    this.onAbort = new Set();
  }

  log(level, msg) {
    process.stderr.write(`${level}[${since(this.started)}] ${msg}\n`);
  }

  /** The test run's duration so far, in ms (0 before setup()). */
  duration() {
    if (!this.testStart) return 0;
    return (this.testEnd || performance.now()) - this.testStart;
  }

  check(group, name, ok) {
    let g = this.checks.get(group);
    if (!g) this.checks.set(group, (g = new Map()));
    const c = g.get(name) || { passes: 0, fails: 0 };
    if (ok) c.passes++;
    else c.fails++;
    g.set(name, c);
  }

  /**
   * Stops the run: busy VUs are interrupted, no iteration starts.
   * @param {string} msg
   * @param {VU|null} from the VU that called test.abort(), which stops by itself
   * @param {number} code the exit code (108 test.abort(), 99 a threshold with abortOnFail)
   */
  abort(msg, from, code = EXIT.aborted) {
    if (this.aborted) return;
    this.aborted = msg || 'test aborted';
    this.abortCode = code;
    this.log('ERRO', code === EXIT.aborted ? `test aborted: ${this.aborted}` : this.aborted);
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

/**
 * The script's options with the command line's on top, as k6 consolidates
 * them (lib/options.go Apply): -u replaces vus; -i or -d replace the
 * script's iterations, duration, stages and scenarios alike.
 */
function consolidate(script) {
  const o = { ...script };
  if (cli.vus !== undefined) o.vus = cli.vus;
  if (cli.iterations !== undefined || cli.duration !== undefined) {
    delete o.iterations;
    delete o.duration;
    delete o.stages;
    delete o.scenarios;
    if (cli.iterations !== undefined) o.iterations = cli.iterations;
    if (cli.duration !== undefined) o.duration = cli.duration;
  }
  return o;
}
const options = consolidate(mod.options || {});
run.options = options;
if (options.batch) run.batchLimits.batch = options.batch;
if (options.batchPerHost) run.batchLimits.batchPerHost = options.batchPerHost;
run.tags = { ...(options.tags || {}), ...cliTags };

/**
 * The scenarios, from k6's shortcuts as lib/executor/execution_config_shortcuts.go
 * DeriveScenariosFromShortcuts makes them: iterations -> shared-iterations
 * (duration its maxDuration), duration -> constant-vus, none -> one
 * per-vu-iterations iteration on one VU; a shortcut with scenarios is a
 * conflict (exit 104).
 */
function scenarios() {
  const conflict = (what) => {
    run.log('ERRO', `using an execution configuration shortcut (\`${what}\`) and \`scenarios\` simultaneously is not allowed`);
    process.exit(104);
  };
  if (options.stages && options.stages.length > 0) usage('options.stages (ramping-vus) is not implemented');
  if (options.iterations !== undefined && options.iterations !== null) {
    if (options.scenarios) conflict('iterations');
    return { default: { executor: 'shared-iterations', vus: options.vus || 1, iterations: options.iterations, maxDuration: options.duration } };
  }
  if (options.duration) {
    if (options.scenarios) conflict('duration');
    return { default: { executor: 'constant-vus', vus: options.vus || 1, duration: options.duration } };
  }
  if (options.scenarios && Object.keys(options.scenarios).length > 0) return options.scenarios;
  if (options.vus !== undefined && options.vus !== 1) {
    run.log('WARN', `the \`vus=${options.vus}\` option will be ignored, it only works in conjunction with \`iterations\`, \`duration\`, or \`stages\``);
  }
  return { default: { executor: 'per-vu-iterations', vus: 1, iterations: 1 } };
}

// Thresholds are checked before the run starts, as k6 does (a bad expression is an error, exit 104).
/**
 * @typedef {{expr: string, abortOnFail: boolean, delayAbortEval: number, lastFailed: boolean}} Threshold
 * @typedef {{key: string, name: string, tags: Record<string,string>, list: Threshold[], abort: boolean}} Thresholds
 */
/** @type {Thresholds[]} */
const thresholds = [];
for (const [key, list] of Object.entries(options.thresholds || {})) {
  const [name, tags] = parseSubmetric(key);
  const m = metrics.get(name);
  if (!m) {
    run.log('ERRO', `invalid threshold on ${key}: no metric ${name}`);
    process.exit(104);
  }
  /** @type {Threshold[]} */
  const ts = [];
  for (const e of list) {
    const t = typeof e === 'string' ? { threshold: e } : e;
    parseExpr(t.threshold, m.type);
    ts.push({ expr: t.threshold, abortOnFail: !!t.abortOnFail, delayAbortEval: t.delayAbortEval ? ms(t.delayAbortEval, 0) : -1, lastFailed: false });
  }
  thresholds.push({ key, name, tags, list: ts, abort: false });
}

/** A (sub)metric's samples. */
function samplesOf(th) {
  const m = /** @type {any} */ (metrics.get(th.name));
  return m.samples.filter((s) => Object.entries(th.tags).every(([k, v]) => s.tags[k] === v));
}

/**
 * Evaluates every threshold as k6's metrics/engine/engine.go
 * evaluateThresholds does: during the run (every 2 s) a (sub)metric with no
 * samples is skipped; at the end (ignoreEmpty false) it is evaluated too, an
 * empty Counter as count 0, an empty Trend or Gauge as 0. Only a Rate with
 * no samples has no value, and a threshold without a value passes
 * (metrics/thresholds.go runNoTaint). A failed threshold with abortOnFail
 * sets the abort once delayAbortEval (if any) is behind the test's time.
 * @param {boolean} ignoreEmpty
 * @returns {{crossed: string[], abort: boolean}}
 */
function evaluate(ignoreEmpty) {
  const crossed = [];
  let abort = false;
  const elapsedMs = run.duration();
  for (const th of thresholds) {
    const m = /** @type {any} */ (metrics.get(th.name));
    const samples = samplesOf(th);
    if (ignoreEmpty && samples.length === 0) continue;
    const v = thresholdValues(m.type, samples, elapsedMs / 1000, th.list.map((t) => parseExpr(t.expr, m.type).agg));
    let ok = true;
    for (const t of th.list) {
      const pass = holds(t.expr, m.type, v);
      t.lastFailed = !pass;
      if (pass) continue;
      ok = false;
      if (th.abort || !t.abortOnFail) continue;
      th.abort = t.delayAbortEval < 0 || t.delayAbortEval < elapsedMs;
    }
    if (!ok) {
      crossed.push(th.name);
      if (th.abort) abort = true;
    }
  }
  return { crossed: [...new Set(crossed)].sort(), abort };
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

// Thresholds are evaluated every two seconds from here on (k6
// metrics/engine/engine.go thresholdsRate), for abortOnFail.
const ticker = thresholds.length === 0 ? null : setInterval(() => {
  const { crossed, abort } = evaluate(true);
  if (abort) run.abort(`thresholds on metrics '${crossed.join(', ')}' were crossed; at least one has abortOnFail enabled, stopping test prematurely`, null, EXIT.thresholds);
}, 2000);

/** The setup data as JSON; undefined when setup() returned nothing or there is none (k6 js/runner.go: VUs get undefined). */
let setupJSON;
/** The exit code so far. */
let exitCode = 0;
run.testStart = performance.now();
if (typeof mod.setup === 'function') {
  vu0.phase = 'setup';
  try {
    const data = await vu0.call(mod.setup, []);
    setupJSON = data === undefined ? undefined : JSON.stringify(data);
  } catch (e) {
    if (e instanceof Abort) {
      run.log('ERRO', 'setup() called test.abort()');
      exitCode = EXIT.aborted;
    } else if (e instanceof Interrupt && run.aborted) {
      exitCode = run.abortCode;
    } else {
      run.log('ERRO', `setup() threw: ${e && e.stack ? e.stack : e}`);
      exitCode = EXIT.script;
    }
  }
  vu0.phase = '';
}
const dataFor = () => (setupJSON === undefined ? undefined : JSON.parse(setupJSON));
const vuData = (vu) => {
  if (!('data' in vu)) vu.data = dataFor();
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
  // k6 js/runner.go VU.Activate: the scenario's env over the global one, its tags on every sample.
  vu.context.__ENV = sc.env;
  vu.scenarioTags = sc.tags;
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
    add('iterations', 'counter', 1, vu.tags());
    add('iteration_duration', 'trend', performance.now() - t0, vu.tags(), 'time');
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
  const sc = {
    name, executor: cfg.executor, fn: cfg.exec || 'default', next: 0, perVU: new Map(), startedAt: 0,
    env: { ...env, ...(cfg.env || {}) }, tags: { ...(cfg.tags || {}) },
  };
  if (typeof mod[sc.fn] !== 'function') throw new Error(`scenario ${name}: the script exports no function ${cfg.exec || 'default'}`);
  const grace = ms(cfg.gracefulStop, 30000);
  await waitMs(ms(cfg.startTime, 0) - (performance.now() - scenariosStart));
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
        add('dropped_iterations', 'counter', 1, { ...run.tags, ...sc.tags, scenario: name });
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

// The scenarios and teardown(), unless setup() failed (k6
// execution/scheduler.go Run returns there: no teardown; the thresholds and
// handleSummary still come, from cmd/run.go's deferred calls).
let scenariosStart = performance.now();
if (exitCode === 0) {
  scenariosStart = performance.now();
  flight.most = flight.now; // the scenarios' own, not setup's
  try {
    await Promise.all(Object.entries(plan).map(([n, c]) => scenario(n, c)));
  } catch (e) {
    run.log('ERRO', String(e && e.stack ? e.stack : e));
    process.exit(EXIT.script);
  }
  if (run.aborted) exitCode = run.abortCode;
  run.log('INFO', `at most ${flight.most} requests were in flight at once (scenarios)`);

  // teardown() runs with the global context: a test.abort() or a threshold's abort does not stop it.
  if (typeof mod.teardown === 'function') {
    vu0.phase = 'teardown';
    vu0.reset();
    try {
      await vu0.call(mod.teardown, [dataFor()]);
    } catch (e) {
      if (e instanceof Abort) exitCode = exitCode || EXIT.aborted;
      else {
        run.log('ERRO', `teardown() threw: ${e && e.stack ? e.stack : e}`);
        exitCode = exitCode || EXIT.script;
      }
    }
  }
}
run.testEnd = performance.now();
if (ticker) clearInterval(ticker);

// The thresholds, one last time with empty metrics too (cmd/run.go
// finalizeThresholds), then handleSummary's data in k6's shape.
const { crossed } = evaluate(false);
const elapsed = run.duration() / 1000;
const trendStats = options.summaryTrendStats || ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)'];
/** @type {Record<string, any>} */
const out = {};
// The metrics that got samples, and every metric with a threshold and its
// parent, sampled or not (k6 metrics/engine/engine.go markObserved).
for (const [name, m] of metrics) {
  if (m.samples.length === 0 && !thresholds.some((t) => t.name === name)) continue;
  out[name] = { type: m.type, contains: m.contains, values: summaryValues(m.type, m.samples, elapsed, trendStats) };
}
for (const th of thresholds) {
  const m = /** @type {any} */ (metrics.get(th.name));
  const entry = th.key === th.name ? out[th.name] : (out[th.key] = { type: m.type, contains: m.contains, values: summaryValues(m.type, samplesOf(th), elapsed, trendStats) });
  entry.thresholds = Object.fromEntries(th.list.map((t) => [t.expr, { ok: !t.lastFailed }]));
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
  setup_data: dataFor(),
};
if (typeof mod.handleSummary === 'function') {
  vu0.phase = 'summary';
  vu0.reset();
  try {
    const files = (await vu0.call(mod.handleSummary, [summary])) || {};
    for (const [dest, content] of Object.entries(files)) {
      if (dest === 'stdout') process.stdout.write(String(content));
      else if (dest === 'stderr') process.stderr.write(String(content));
      else {
        // k6 cmd/run.go handleSummaryResult opens the file (O_CREAT): a
        // missing folder is an error, logged; the exit code stays.
        try {
          writeFileSync(dest, typeof content === 'string' ? content : JSON.stringify(content));
        } catch (e) {
          run.log('ERRO', `failed to handle the end-of-test summary: could not open '${dest}': ${e && e.message ? e.message : e}`);
        }
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
