// End-to-end test of the demo page: the real shop binary with its embedded
// default (SQLite + in-process Redis) on a free port, driven in headless
// Chromium through playwright-core. Run it with e2e/run.sh.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const SHOP_BIN = process.env.SHOP_BIN || path.join(here, '..', 'bin', 'shop-e2e');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOTS = process.env.SCREENSHOT_DIR || path.join(here, '..', 'docs', 'screenshots');
const ADMIN = 'e2e-admin-token-' + Math.random().toString(36).slice(2, 12);
const USER = 4242;
const UI = 30_000; // ms an expectation may wait: the CI machine is small and busy

let shop, base, tmp, context, page, shopLog = '';
const pageErrors = [];

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

async function waitReady(url, ms) {
  const end = Date.now() + ms;
  for (;;) {
    if (shop.exitCode !== null) throw new Error('the shop exited with ' + shop.exitCode + ':\n' + shopLog);
    try {
      const r = await fetch(url + '/readyz');
      if (r.ok) return;
    } catch { /* not listening yet */ }
    if (Date.now() > end) throw new Error('the shop is not ready after ' + ms + ' ms:\n' + shopLog);
    await new Promise((r) => setTimeout(r, 200));
  }
}

before(async () => {
  assert.ok(fs.existsSync(SHOP_BIN), `no shop binary at ${SHOP_BIN} (e2e/run.sh builds it)`);
  assert.ok(fs.existsSync(CHROMIUM), `no Chromium at ${CHROMIUM} (e2e/run.sh installs the Debian package)`);
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'shop-e2e-'));
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  // The embedded default: no SHOP_* setting but the address and a known
  // admin token; the SQLite file lands in the temporary working directory.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SHOP_')));
  env.SHOP_ADDR = `127.0.0.1:${port}`;
  env.SHOP_ADMIN_TOKEN = ADMIN;
  shop = spawn(SHOP_BIN, [], { cwd: tmp, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const keep = (b) => { shopLog = (shopLog + b).slice(-20_000); };
  shop.stdout.on('data', keep);
  shop.stderr.on('data', keep);
  await waitReady(base, 60_000);

  context = await chromium.launchPersistentContext(path.join(tmp, 'chromium-profile'), {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic',
      '--no-first-run', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1360, height: 900 },
    deviceScaleFactor: 1,
  });
  page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(UI);
  page.on('pageerror', (e) => pageErrors.push('pageerror: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error' && !/status of (4|5)\d\d/.test(m.text())) pageErrors.push('console: ' + m.text()); });
  // The page must need nothing from outside: fail any request elsewhere.
  await context.route((url) => !url.href.startsWith(base), (route) => {
    pageErrors.push('external request: ' + route.request().url());
    return route.abort();
  });
});

after(async () => {
  await context?.close().catch(() => {});
  if (shop && shop.exitCode === null) {
    shop.kill('SIGTERM');
    await new Promise((r) => { shop.once('exit', r); setTimeout(r, 15_000); });
  }
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

const text = (sel) => page.locator(sel).innerText();
const expectText = (sel, re) => page.waitForFunction(
  ([s, src, flags]) => new RegExp(src, flags).test(document.querySelector(s)?.innerText || ''),
  [sel, re.source, re.flags], { timeout: UI });

async function operatorTab() {
  await page.click('#tab-operator');
  await page.waitForSelector('#view-operator:not([hidden])');
}

async function shopperTab() {
  await page.click('#tab-shopper');
  await page.waitForSelector('#view-shopper:not([hidden])');
}

let productId;

test('the page is served offline from the binary', async () => {
  const res = await page.goto(base + '/');
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-type'], /^text\/html/);
  assert.match(await page.title(), /Seckill shop/);
});

test('operator: admin token, create a sale, credit a wallet (and replay the credit)', async () => {
  await operatorTab();
  await page.fill('#admin-token', ADMIN);
  await page.click('#admin-btn');
  await expectText('#strategy', /lock-fence/);

  await page.fill('#create-name', 'Limited sneakers');
  await page.fill('#create-price', '15.00');
  await page.fill('#create-stock', '5');
  await page.click('#create-btn');
  await expectText('#create-result', /201 Created/);
  const created = await text('#create-result');
  productId = Number((created.match(/#(\d+) Limited sneakers/) || [])[1]);
  assert.ok(productId > 0, created);

  await page.fill('#credit-user', String(USER));
  await page.fill('#credit-amount', '100.00');
  await page.click('#credit-btn');
  await expectText('#credit-result', /200 OK.*\$100\.00/);
  await page.click('#credit-retry');
  await page.waitForSelector('#credit-result [data-testid=replay]');
  await expectText('#credit-result', /\$100\.00/); // replayed, not credited twice
});

test('shopper: log in, buy in the flash sale, pay, see the wallet change', async () => {
  await shopperTab();
  await page.fill('#login-user', String(USER));
  await page.click('#login-btn');
  await expectText('#who', new RegExp(`user ${USER}`));
  await expectText('#wallet-balance', /\$100\.00/);

  const row = `#products-table tr[data-id="${productId}"]`;
  await expectText(`${row} .stock`, /^5$/);
  await page.click(`[data-testid=buy-${productId}]`);
  await expectText('#buy-result', /201 Created/);
  await expectText(`${row} .stock`, /^4$/); // the live stock follows
  await page.waitForSelector('#orders-table tr[data-status=pending]');

  // A repeat is the same order, answered as a replay.
  await page.click(`[data-testid=buy-${productId}]`);
  await expectText('#buy-result', /200 OK.*your existing order/);
  await page.waitForSelector('#buy-result [data-testid=replay]');

  await page.click('#orders-table tr[data-status=pending] button:has-text("Pay")');
  await expectText('#orders-result', /200 OK.*paid order/);
  await page.waitForSelector('#orders-table tr[data-status=paid]');
  await expectText('#wallet-balance', /\$85\.00/);
});

test('shopper: regular order with Idempotency-Key, retry replays, cancel returns stock, errors show', async () => {
  await page.selectOption('#order-product', String(productId));
  await page.fill('#order-qty', '2');
  await page.click('#order-btn');
  await expectText('#order-result', /201 Created/);
  await expectText(`#products-table tr[data-id="${productId}"] .stock`, /^2$/);
  await page.click('#order-retry');
  await page.waitForSelector('#order-result [data-testid=replay]');
  await expectText('#order-result', /201 Created/); // the stored answer, byte for byte
  await expectText(`#products-table tr[data-id="${productId}"] .stock`, /^2$/); // not ordered twice

  await page.click('#orders-table tr[data-status=pending] button:has-text("Cancel")');
  await expectText('#orders-result', /200 OK.*cancelled/);
  await page.waitForSelector('#orders-table tr[data-status=cancelled]');
  await expectText(`#products-table tr[data-id="${productId}"] .stock`, /^4$/);

  // An error is shown as its problem+json title and detail.
  await page.fill('#order-qty', '50');
  await page.click('#order-btn');
  await expectText('#order-result', /409 Conflict\s*Insufficient stock/);

  // A pending order for the screenshot, then the picture.
  await page.fill('#order-qty', '1');
  await page.click('#order-btn');
  await expectText('#order-result', /201 Created/);
  await page.waitForSelector('#orders-table tr[data-status=pending]');
  await expectText('#wallet-balance', /\$85\.00/);
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, 'shopper.png'), fullPage: true });
});

test('operator: a race of 300 buyers for 30 units ends with 30 orders and a green audit', async () => {
  await operatorTab();
  await page.selectOption('#race-product', '');
  await page.fill('#race-stock', '30');
  await page.fill('#race-buyers', '300');
  await page.fill('#race-conc', '50');
  await page.click('#race-btn');
  await expectText('#race-result', /202 Accepted/);
  await page.waitForSelector('#race[data-done=true]', { timeout: 240_000 });
  assert.equal(await page.getAttribute('#race-verdict', 'data-ok'), 'true', await text('#race-verdict'));
  assert.equal(await text('[data-testid=race-created]'), '30');
  assert.equal(await text('[data-testid=race-oversold]'), '0');
  assert.equal(await text('[data-testid=race-stock]'), '0');
  await page.waitForSelector('#race-chart svg path.created');

  await page.click('#audit-btn');
  await page.waitForSelector('#audit-verdict[data-ok=true]');
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: path.join(SHOTS, 'operator.png'), fullPage: true });
});

test('the page raised no script error and asked nothing of the network', () => {
  assert.deepEqual(pageErrors, []);
});
