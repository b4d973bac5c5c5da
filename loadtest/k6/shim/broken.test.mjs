// The scripts' exit code is their verdict: each broken shop of the table in
// README.md ("Which broken shop fails which threshold") against the script
// meant to catch it, under the runner, must exit 99 naming the threshold;
// the same scripts against a correct shop exit 0. The shops are
// fakeshop.mjs (the broken ones no lab strategy of the real shop provides);
// smoke.sh proves the rows the real shop's lab switches provide.
//
//   node --test shim/        (make k6-check runs it)
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fakeShop } from './fakeshop.mjs';

const here = new URL('..', import.meta.url).pathname;
const summaries = mkdtempSync(join(tmpdir(), 'k6-broken-'));
let runs = 0;

/**
 * Runs a script against a fake shop in this mode.
 * @returns {Promise<{code: number|null, out: string}>}
 */
async function k6(mode, script, env) {
  const shop = await fakeShop(mode);
  try {
    const args = [join(here, 'shim/run.mjs'), '-e', `BASE_URL=${shop.url}`, '-e', `ADMIN_TOKEN=${shop.admin}`, '-e', `RUN_ID=broken${++runs}`,
      '-e', `SUMMARY_DIR=${summaries}`, '-e', 'SLO_P99_MS=0'];
    for (const [k, v] of Object.entries(env)) args.push('-e', `${k}=${v}`);
    args.push(join(here, `${script}.js`));
    return await new Promise((done) => {
      const p = spawn(process.execPath, args, { cwd: here, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      p.stdout.on('data', (b) => { out += b; });
      p.stderr.on('data', (b) => { out += b; });
      p.on('close', (code) => done({ code, out }));
    });
  } finally {
    await shop.close();
  }
}

const RACE = { SCENARIO: 'race', USERS: '30', STOCK: '10', VUS: '30' };
const SPIKE = { SCENARIO: 'spike', USERS: '30', STOCK: '10', RATE: '30' };
const STORM = { USERS: '20', STOCK: '5', RATE: '20', RETRIES: '2' };
const ORDERS = { USERS: '10', STOCK: '30', VUS: '5' };
const PAY = { USERS: '6', VUS: '3' };

for (const [script, env] of /** @type {[string, Record<string,string>][]} */ ([
  ['seckill-race', RACE], ['seckill-race', SPIKE], ['retry-storm', STORM], ['orders-idempotency', ORDERS], ['pay-retry', PAY],
])) {
  test(`a correct shop passes ${script} ${env.SCENARIO || ''}`, async () => {
    const r = await k6('ok', script, env);
    assert.equal(r.code, 0, r.out);
    assert.doesNotMatch(r.out, /✗/);
  });
}

// [broken shop, script, its settings, the threshold that must fail]
for (const [mode, script, env, threshold] of /** @type {[string, string, Record<string,string>, string][]} */ ([
  ['oversell', 'seckill-race', RACE, 'oversold_units count==0'],
  ['oversell', 'seckill-race', RACE, `orders_created count<=${RACE.STOCK}`],
  ['duplicate', 'retry-storm', STORM, 'duplicate_orders count==0'],
  ['duplicate', 'orders-idempotency', ORDERS, 'duplicate_orders count==0'],
  ['undersell', 'seckill-race', RACE, 'undersold_units count==0'],
  ['undersell', 'seckill-race', SPIKE, 'undersold_units count==0'],
  ['unavailable', 'seckill-race', { ...RACE, USERS: '10', VUS: '10' }, 'answered rate>=0.9'],
  ['unavailable', 'seckill-race', { ...RACE, USERS: '10', VUS: '10' }, 'orders_created count>0'],
  ['unavailable', 'pay-retry', { USERS: '3', VUS: '3' }, 'orders_created count>0'],
  ['error', 'seckill-race', RACE, 'server_errors count==0'],
  ['error', 'retry-storm', STORM, 'server_errors count==0'],
  ['error', 'orders-idempotency', ORDERS, 'server_errors count==0'],
  ['error', 'pay-retry', PAY, 'server_errors count==0'],
  ['double-charge', 'pay-retry', PAY, 'double_charges count==0'],
])) {
  test(`${script} ${env.SCENARIO || ''} fails a shop that does ${mode}: ${threshold}`, async () => {
    const r = await k6(mode, script, env);
    assert.equal(r.code, 99, r.out);
    assert.ok(r.out.includes(`✗ ${threshold} `), `no ✗ ${threshold} in:\n${r.out}`);
  });
}
