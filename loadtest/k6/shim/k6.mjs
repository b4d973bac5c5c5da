// The 'k6' module: check, group, sleep, fail.
import { add, state } from './runtime.mjs';

const sleeper = new Int32Array(new SharedArrayBuffer(4));

/** Blocks this thread, as k6's sleep blocks its VU. */
export function sleep(seconds) {
  const ms = Math.max(0, Number(seconds) * 1000);
  if (ms > 0) Atomics.wait(sleeper, 0, 0, ms);
}

/**
 * Runs each named check on val, records it in the "checks" rate, and
 * returns whether all passed. A check that throws fails (k6 would abort the
 * iteration; the shim counts it and says why).
 */
export function check(val, sets, tags) {
  let all = true;
  for (const [name, fn] of Object.entries(sets)) {
    let ok;
    try {
      ok = typeof fn === 'function' ? !!fn(val) : !!fn;
    } catch (e) {
      console.error(`ERRO[shim] check ${JSON.stringify(name)} threw: ${e}`);
      ok = false;
    }
    add('checks', 'rate', ok ? 1 : 0, { ...(tags || {}), check: name, ...(state.group ? { group: state.group } : {}) });
    const c = state.checks.get(name) || { passes: 0, fails: 0 };
    if (ok) c.passes++;
    else c.fails++;
    state.checks.set(name, c);
    all = all && ok;
  }
  return all;
}

export function group(name, fn) {
  const outer = state.group;
  state.group = `${outer}::${name}`;
  try {
    return fn();
  } finally {
    state.group = outer;
  }
}

export function fail(msg) {
  throw new Error(msg || 'fail() called');
}

export default { check, group, sleep, fail };
