#!/usr/bin/env node
// A small stand-in for `k6 run`, for smoke runs where no k6 binary exists:
//
//   node shim/run.mjs [-e NAME=VALUE]... [--max-iterations N] script.js
//
// It runs the script's setup(), then its scenarios (per-vu-iterations,
// shared-iterations, constant-vus and the arrival-rate executors) one VU
// after another in this thread, with k6's synchronous HTTP (see http.mjs),
// then teardown(), evaluates the thresholds and calls handleSummary.
// --max-iterations caps each scenario's iterations (a smoke run).
//
// Exit status, as k6's: 0 passed; 99 a threshold failed; 107 setup() or the
// script threw. Stricter than k6: an exception inside an iteration (k6
// logs it and goes on) also exits 108, since in a smoke run it means a
// wrong URL, status or body shape.
import { mkdirSync, writeFileSync } from 'node:fs';
import { register } from 'node:module';
import { dirname, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { holds, metrics, parseSubmetric, state, values, add } from './runtime.mjs';

function usage(msg) {
  if (msg) console.error(`k6 shim: ${msg}`);
  console.error('usage: node shim/run.mjs [-e NAME=VALUE]... [--max-iterations N] script.js');
  process.exit(2);
}

const env = { ...process.env };
let maxIterations = Infinity;
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
  } else if (a === '--max-iterations') {
    maxIterations = Number(args[++i]);
    if (!(maxIterations > 0)) usage('--max-iterations wants a positive number');
  } else if (a.startsWith('-')) {
    usage(`unknown flag ${a}`);
  } else if (script) {
    usage(`one script, got ${script} and ${a}`);
  } else {
    script = a;
  }
}
if (!script) usage('no script');

globalThis.__ENV = env;
globalThis.__VU = 0;
globalThis.__ITER = 0;
register('./loader.mjs', import.meta.url);

/** "30s", "5m", "1h30m" -> seconds */
function seconds(d) {
  if (typeof d === 'number') return d / 1000;
  let total = 0;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  let m, seen = '';
  while ((m = re.exec(String(d)))) {
    total += Number(m[1]) * { ms: 0.001, s: 1, m: 60, h: 3600 }[m[2]];
    seen += m[0];
  }
  if (seen !== String(d)) throw new Error(`duration ${d}`);
  return total;
}

/** The iterations of one scenario, as [vu, iterationInScenario] pairs. */
function plan(name, sc) {
  const out = [];
  const push = (vu, n) => out.push([vu, n]);
  switch (sc.executor) {
    case 'per-vu-iterations': {
      const vus = sc.vus ?? 1, its = sc.iterations ?? 1;
      for (let v = 1; v <= vus; v++) for (let k = 0; k < its; k++) push(v, k);
      break;
    }
    case 'shared-iterations': {
      const vus = sc.vus ?? 1, its = sc.iterations ?? 1;
      const per = new Array(vus + 1).fill(0);
      for (let k = 0; k < its; k++) { const v = (k % vus) + 1; push(v, per[v]++); }
      break;
    }
    case 'constant-arrival-rate':
    case 'ramping-arrival-rate': {
      const unit = seconds(sc.timeUnit || '1s');
      let total;
      if (sc.executor === 'constant-arrival-rate') total = Math.round((sc.rate * seconds(sc.duration)) / unit);
      else total = Math.round((sc.stages || []).reduce((a, st) => a + ((st.target + (sc.startRate || 0)) / 2) * seconds(st.duration) / unit, 0));
      const vus = Math.max(1, sc.preAllocatedVUs || 1);
      const per = new Array(vus + 1).fill(0);
      for (let k = 0; k < total; k++) { const v = (k % vus) + 1; push(v, per[v]++); }
      break;
    }
    case 'constant-vus': {
      for (let v = 1; v <= (sc.vus ?? 1); v++) push(v, 0);
      break;
    }
    default:
      throw new Error(`scenario ${name}: executor ${sc.executor} is not supported by the shim`);
  }
  return out.slice(0, Math.min(out.length, maxIterations));
}

let exitCode = 0;
let iterationErrors = 0;
const mod = await import(pathToFileURL(resolve(script)).href);
const options = mod.options || {};
const scenarios = options.scenarios || {
  default: { executor: options.iterations ? 'shared-iterations' : 'constant-vus', vus: options.vus || 1, iterations: options.iterations || 1 },
};

let data;
try {
  if (typeof mod.setup === 'function') {
    state.inSetup = true;
    state.group = '::setup';
    data = mod.setup();
    state.inSetup = false;
    state.group = '';
  }
} catch (e) {
  console.error(`ERRO[shim] setup() threw: ${e && e.stack ? e.stack : e}`);
  process.exit(107);
}
const vuData = () => (data === undefined ? undefined : JSON.parse(JSON.stringify(data)));

let iterationInTest = 0;
for (const [name, sc] of Object.entries(scenarios)) {
  const fn = mod[sc.exec || 'default'];
  if (typeof fn !== 'function') throw new Error(`scenario ${name}: the script exports no ${sc.exec || 'default'} function`);
  state.scenario.name = name;
  state.scenario.executor = sc.executor;
  let inScenario = 0;
  for (const [vu, k] of plan(name, sc)) {
    state.vu.idInTest = vu;
    state.vu.iterationInScenario = k;
    state.vu.iterationInInstance = k;
    state.scenario.iterationInTest = inScenario++;
    globalThis.__VU = vu;
    globalThis.__ITER = k;
    const t0 = performance.now();
    try {
      fn(vuData());
      state.completed++;
    } catch (e) {
      iterationErrors++;
      console.error(`ERRO[shim] scenario ${name}, VU ${vu}, iteration ${k}: ${e && e.stack ? e.stack : e}`);
    }
    add('iterations', 'counter', 1, { scenario: name });
    add('iteration_duration', 'trend', performance.now() - t0, { scenario: name });
    iterationInTest++;
  }
}
if (typeof mod.teardown === 'function') {
  try {
    mod.teardown(vuData());
  } catch (e) {
    console.error(`ERRO[shim] teardown() threw: ${e}`);
    exitCode = 107;
  }
}

// Thresholds and the summary data, in k6's shape.
const elapsed = (Date.now() - state.started) / 1000;
/** @type {Record<string, any>} */
const out = {};
const contains = (n) => (/_duration$|^iteration_duration$/.test(n) ? 'time' : n.startsWith('data_') ? 'data' : 'default');
for (const [name, m] of metrics) {
  const v = values(m.type, m.samples, elapsed);
  delete v._sorted;
  out[name] = { type: m.type, contains: contains(name), values: v };
}
const crossed = [];
for (const [key, exprs] of Object.entries(options.thresholds || {})) {
  const [name, tags] = parseSubmetric(key);
  const m = metrics.get(name);
  if (!m) throw new Error(`threshold on ${key}: no metric ${name}`);
  const samples = m.samples.filter((s) => Object.entries(tags).every(([k, v]) => s.tags[k] === v));
  const v = values(m.type, samples, elapsed);
  /** @type {Record<string, {ok: boolean}>} */
  const th = {};
  for (const e of exprs) {
    const src = typeof e === 'string' ? e : e.threshold;
    const ok = holds(src, m.type, v);
    th[src] = { ok };
    if (!ok) crossed.push(key);
  }
  delete v._sorted;
  out[key] = { ...(out[key] || { type: m.type, contains: contains(name), values: v }), thresholds: th };
}
const summary = {
  metrics: out,
  root_group: { name: '', path: '', checks: [...state.checks].map(([n, c]) => ({ name: n, path: `::${n}`, passes: c.passes, fails: c.fails })), groups: [] },
  options: { summaryTrendStats: ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)'] },
  state: { isStdOutTTY: false, isStdErrTTY: false, testRunDurationMs: elapsed * 1000 },
};

if (typeof mod.handleSummary === 'function') {
  const files = mod.handleSummary(summary) || {};
  for (const [dest, content] of Object.entries(files)) {
    if (dest === 'stdout') process.stdout.write(String(content));
    else if (dest === 'stderr') process.stderr.write(String(content));
    else {
      mkdirSync(dirname(resolve(dest)), { recursive: true });
      writeFileSync(dest, String(content));
    }
  }
} else {
  for (const [n, m] of Object.entries(out)) console.log(`  ${n}: ${JSON.stringify(m.values)}`);
}
for (const c of summary.root_group.checks) {
  console.error(`${c.fails === 0 ? '  ✓' : '  ✗'} ${c.name}${c.fails ? `  (${c.passes} passed, ${c.fails} failed)` : ''}`);
}
if (crossed.length > 0) {
  console.error(`ERRO[shim] thresholds on metrics '${[...new Set(crossed)].join(', ')}' have been crossed`);
  exitCode = 99;
}
if (iterationErrors > 0 && exitCode === 0) {
  console.error(`ERRO[shim] ${iterationErrors} iteration(s) threw`);
  exitCode = 108;
}
process.exit(exitCode);
