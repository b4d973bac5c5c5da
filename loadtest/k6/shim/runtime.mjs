// The shim's shared state: metrics and the VU being run. One instance per
// process (the shim runs VUs one after another in one thread, so "VU-local"
// state of a script is keyed by exec.vu.idInTest, as lib/shop.js does).

/** @typedef {{type: 'counter'|'rate'|'trend'|'gauge', samples: {value: number, tags: Record<string,string>}[], thresholds: string[]}} Metric */

/** @type {Map<string, Metric>} */
export const metrics = new Map();

export const state = {
  vu: { idInTest: 0, iterationInScenario: 0, iterationInInstance: 0 },
  scenario: { name: '', iterationInTest: 0, executor: '' },
  inSetup: false,
  responseCallback: /** @type {undefined | null | ((res: any) => boolean)} */ (undefined),
  group: '',
  started: Date.now(),
  /** @type {Map<string, {passes: number, fails: number}>} */
  checks: new Map(),
  completed: 0,
};

export function metric(name, type) {
  let m = metrics.get(name);
  if (!m) {
    m = { type, samples: [], thresholds: [] };
    metrics.set(name, m);
  } else if (m.type !== type) {
    throw new Error(`metric ${name} is a ${m.type}, not a ${type}`);
  }
  return m;
}

export function add(name, type, value, tags) {
  metric(name, type).samples.push({ value: Number(value), tags: tags || {} });
}

// The built-in metrics, present even when nothing was sent.
for (const [n, t] of [['http_reqs', 'counter'], ['http_req_failed', 'rate'], ['http_req_duration', 'trend'],
  ['checks', 'rate'], ['iterations', 'counter'], ['iteration_duration', 'trend'], ['data_received', 'counter'], ['data_sent', 'counter']]) {
  metric(n, /** @type {any} */ (t));
}

/** percentile of sorted values, k6's way (linear interpolation). */
function pct(sorted, p) {
  if (sorted.length === 0) return 0;
  const idx = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(idx), hi = Math.ceil(idx);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (idx - lo);
}

/** The values k6 reports for a metric, from some of its samples. */
export function values(type, samples, elapsedS) {
  const vs = samples.map((s) => s.value);
  switch (type) {
    case 'counter': {
      const count = vs.reduce((a, b) => a + b, 0);
      return { count, rate: elapsedS > 0 ? count / elapsedS : 0 };
    }
    case 'gauge':
      return { value: vs.length ? vs[vs.length - 1] : 0, min: vs.length ? Math.min(...vs) : 0, max: vs.length ? Math.max(...vs) : 0 };
    case 'rate': {
      const passes = vs.filter((v) => v !== 0).length;
      return { rate: vs.length ? passes / vs.length : 0, passes, fails: vs.length - passes };
    }
    case 'trend': {
      const s = [...vs].sort((a, b) => a - b);
      const out = {
        avg: s.length ? s.reduce((a, b) => a + b, 0) / s.length : 0,
        min: s.length ? s[0] : 0,
        med: pct(s, 50),
        max: s.length ? s[s.length - 1] : 0,
        'p(90)': pct(s, 90),
        'p(95)': pct(s, 95),
      };
      return { ...out, _sorted: s };
    }
    default:
      throw new Error(`unknown metric type ${type}`);
  }
}

/**
 * Evaluates one threshold expression ("rate<0.01", "count<=500",
 * "p(99)<5000", "avg<200") against a metric's values. Returns whether it
 * holds; throws on an expression k6 would reject.
 */
export function holds(expr, type, v) {
  const m = /^\s*(count|rate|value|avg|min|max|med|p\((\d+(?:\.\d+)?)\))\s*(<=|>=|==|===|!=|<|>)\s*(-?\d+(?:\.\d+)?)\s*$/.exec(expr);
  if (!m) throw new Error(`threshold ${JSON.stringify(expr)}: not an expression k6 understands`);
  const agg = m[1], op = m[3], want = Number(m[4]);
  const allowed = { counter: ['count', 'rate'], rate: ['rate'], gauge: ['value'], trend: ['avg', 'min', 'max', 'med', 'p'] }[type];
  const kind = agg.startsWith('p(') ? 'p' : agg;
  if (!allowed.includes(kind)) throw new Error(`threshold ${JSON.stringify(expr)}: ${agg} is not an aggregate of a ${type} metric`);
  const got = kind === 'p' ? pct(v._sorted, Number(m[2])) : v[agg];
  switch (op) {
    case '<': return got < want;
    case '<=': return got <= want;
    case '>': return got > want;
    case '>=': return got >= want;
    case '!=': return got !== want;
    default: return got === want;
  }
}

/** "name{tag:value,...}" -> [name, {tag: value}] */
export function parseSubmetric(key) {
  const m = /^([^{]+)(?:\{(.*)\})?$/.exec(key);
  if (!m) throw new Error(`threshold key ${key}`);
  /** @type {Record<string,string>} */
  const tags = {};
  if (m[2]) {
    for (const kv of m[2].split(',')) {
      const i = kv.indexOf(':');
      if (i < 0) throw new Error(`threshold key ${key}: tag ${kv} has no value`);
      tags[kv.slice(0, i).trim()] = kv.slice(i + 1).trim();
    }
  }
  return [m[1].trim(), tags];
}
