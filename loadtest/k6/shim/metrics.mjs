// Samples of the whole run, and k6's rules to sum them up and judge them.

/** @typedef {'counter'|'rate'|'trend'|'gauge'} Kind */
/** @typedef {{type: Kind, contains: string, samples: {value: number, tags: Record<string,string>}[]}} Metric */

/** @type {Map<string, Metric>} */
export const metrics = new Map();

/** Registers a metric (k6 rejects a name reused with another type). */
export function metric(name, type, contains = 'default') {
  if (!/^[A-Za-z0-9_]{1,128}$/.test(name)) throw new Error(`invalid metric name ${JSON.stringify(name)}`);
  let m = metrics.get(name);
  if (!m) {
    m = { type, contains, samples: [] };
    metrics.set(name, m);
  } else if (m.type !== type) {
    throw new Error(`metric ${name} is a ${m.type}, not a ${type}`);
  }
  return m;
}

export function add(name, type, value, tags, contains) {
  metric(name, type, contains).samples.push({ value: Number(value), tags: tags || {} });
}

// The built-in metrics the scripts read. k6 shows a metric only once it has
// samples; registering them here changes nothing else.
for (const [n, t, c] of [['http_reqs', 'counter'], ['http_req_failed', 'rate'], ['http_req_duration', 'trend', 'time'],
  ['checks', 'rate'], ['iterations', 'counter'], ['iteration_duration', 'trend', 'time'], ['dropped_iterations', 'counter']]) {
  metric(n, /** @type {Kind} */ (t), c);
}

/**
 * A percentile as k6's TrendSink.P computes it (metrics/sink.go): linear
 * interpolation between the two nearest ranks of the sorted values.
 */
function pct(sorted, p) {
  if (sorted.length === 0) return 0;
  const idx = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(idx), hi = Math.ceil(idx);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (idx - lo);
}

/**
 * The values k6 reports for a metric (handleSummary's data.metrics[x].values).
 * @param {Kind} type
 * @param {{value: number}[]} samples
 * @param {number} elapsedS the test's duration, for a counter's rate
 * @param {string[]} [extra] percentiles thresholds ask for, e.g. 'p(99)'
 */
export function values(type, samples, elapsedS, extra = []) {
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
      /** @type {Record<string, number>} */
      const out = {
        avg: s.length ? s.reduce((a, b) => a + b, 0) / s.length : 0,
        min: s.length ? s[0] : 0,
        med: pct(s, 50),
        max: s.length ? s[s.length - 1] : 0,
        'p(90)': pct(s, 90),
        'p(95)': pct(s, 95),
      };
      for (const p of extra) out[p] = pct(s, Number(/^p\((.*)\)$/.exec(p)[1]));
      return out;
    }
    default:
      throw new Error(`unknown metric type ${type}`);
  }
}

const EXPR = /^\s*(count|rate|value|avg|min|max|med|p\((\d+(?:\.\d+)?)\))\s*(<=|>=|==|===|!=|<|>)\s*(-?\d+(?:\.\d+)?)\s*$/;

/** Throws on a threshold expression k6 would reject for this metric type. */
export function parseExpr(expr, type) {
  const m = EXPR.exec(expr);
  if (!m) throw new Error(`threshold ${JSON.stringify(expr)}: not an expression k6 understands`);
  const agg = m[1], kind = agg.startsWith('p(') ? 'p' : agg;
  const allowed = { counter: ['count', 'rate'], rate: ['rate'], gauge: ['value'], trend: ['avg', 'min', 'max', 'med', 'p'] }[type];
  if (!allowed.includes(kind)) throw new Error(`threshold ${JSON.stringify(expr)}: ${agg} is not an aggregate of a ${type} metric`);
  return { agg, op: m[3], want: Number(m[4]) };
}

/** Whether one threshold expression holds for a metric's values. */
export function holds(expr, type, v) {
  const { agg, op, want } = parseExpr(expr, type);
  const got = v[agg];
  // No value (a Rate without samples): the threshold passes (k6 metrics/thresholds.go runNoTaint).
  if (got === undefined) return true;
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
      tags[kv.slice(0, i).trim()] = kv.slice(i + 1).trim().replace(/^"(.*)"$/, '$1');
    }
  }
  return [m[1].trim(), tags];
}

/**
 * The values a threshold is judged on, as k6's metrics/thresholds.go
 * Thresholds.Run makes them from a sink: a Counter count and rate (over the
 * test run's duration), a Gauge value, a Trend min, max, avg, med and the
 * percentiles asked for (all 0 when empty: metrics/sink.go TrendSink); a
 * Rate's rate only once it has samples (no value: the threshold passes).
 * @param {Kind} type
 * @param {{value: number}[]} samples
 * @param {number} elapsedS
 * @param {string[]} aggs the aggregates the thresholds name, e.g. 'p(99)'
 * @returns {Record<string, number>}
 */
export function thresholdValues(type, samples, elapsedS, aggs) {
  if (type === 'rate') return samples.length === 0 ? {} : { rate: values('rate', samples, elapsedS).rate };
  if (type === 'gauge') return { value: samples.length ? samples[samples.length - 1].value : 0 };
  if (type === 'counter') {
    const count = samples.reduce((a, s) => a + s.value, 0);
    return { count, rate: count / elapsedS };
  }
  return values(type, samples, elapsedS, aggs.filter((a) => a.startsWith('p(')));
}

/**
 * A metric's values in handleSummary's data (k6 js/summary.go
 * metricValueGetter): a Counter's count and rate, a Gauge's value, min and
 * max, a Rate's rate, passes and fails, a Trend's summaryTrendStats; zeros
 * for a metric without samples.
 * @param {Kind} type
 * @param {{value: number}[]} samples
 * @param {number} elapsedS
 * @param {string[]} trendStats
 */
export function summaryValues(type, samples, elapsedS, trendStats) {
  const v = values(type, samples, elapsedS, trendStats.filter((s) => s.startsWith('p(')));
  if (type !== 'trend') return v;
  /** @type {Record<string, number>} */
  const out = {};
  for (const s of trendStats) out[s] = s === 'count' ? samples.length : v[s];
  return out;
}
