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
const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 390, height: 844 };

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
    viewport: DESKTOP,
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
    if (shop.exitCode === null && shop.signalCode === null) shop.kill('SIGKILL'); // never leave a stuck shop behind
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

// layoutProblems lists what is wrong with the layout as shown: a page wider
// than the window (sideways scroll), a control or tile outside its card, a
// title on more than two lines, a tile whose figure is cut.
function layoutProblems() {
  return page.evaluate(() => {
    const out = [];
    const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.dataset.testid ? `[${el.dataset.testid}]` : '') +
      (el.textContent.trim() ? ` "${el.textContent.trim().slice(0, 24)}"` : '');
    const de = document.documentElement;
    if (de.scrollWidth > window.innerWidth) {
      out.push(`the page is ${de.scrollWidth}px wide in a ${window.innerWidth}px window`);
      // What sticks out: the deepest boxes that overflow (text that does not wrap).
      const over = [...document.body.querySelectorAll('*')].filter((el) => getComputedStyle(el).display !== 'inline' &&
        el.scrollWidth > el.clientWidth + 1 && ![...el.children].some((c) => c.scrollWidth > c.clientWidth + 1));
      for (const el of over.slice(0, 5)) out.push(`  ${name(el)} holds ${el.scrollWidth}px in ${el.clientWidth}px`);
    }
    const shown = (el) => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden';
    for (const el of document.querySelectorAll('.card button, .card input, .card select, .card .stat, .card table, .card .chart, .card .side, .card .tl-bar')) {
      if (!shown(el)) continue;
      const c = el.closest('.card').getBoundingClientRect();
      const r = el.getBoundingClientRect();
      if (r.left < c.left - 0.5 || r.right > c.right + 0.5) out.push(`${name(el)} spans x ${r.left.toFixed(0)}..${r.right.toFixed(0)}, outside its card (${c.left.toFixed(0)}..${c.right.toFixed(0)})`);
    }
    const brand = document.querySelector('.brand');
    const fs = parseFloat(getComputedStyle(brand).fontSize);
    if (brand.getBoundingClientRect().height > fs * 1.4 * 2) out.push(`the title takes ${brand.getBoundingClientRect().height}px: more than two lines`);
    for (const v of document.querySelectorAll('.stat .v')) {
      if (shown(v) && v.scrollWidth > v.clientWidth + 1) out.push(`tile ${name(v)} is cut`);
    }
    return out;
  });
}

async function checkLayout(what) {
  assert.deepEqual(await layoutProblems(), [], what);
}

test('the page is served offline from the binary', async () => {
  const res = await page.goto(base + '/');
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-type'], /^text\/html/);
  assert.match(await page.title(), /Seckill shop/);
});

// idOf is the id of the shopper list's product named name.
const idOf = (name) => page.$$eval('#products-table tbody tr',
  (trs, n) => Number(trs.find((tr) => tr.querySelector('.name')?.textContent === n)?.dataset.id), name);

test('shopper: a fresh embedded shop shows its demo catalog before any admin action', async () => {
  await page.waitForFunction(() => document.querySelectorAll('#products-table tbody tr').length >= 3);
  const names = await page.$$eval('#products-table tbody .name', (tds) => tds.map((t) => t.textContent));
  assert.ok(names.some((n) => n.startsWith('Flash sale')), names.join(', '));
  assert.equal(await page.locator('#products-empty').isHidden(), true);
});

test('shopper: a wallet short of an order says by how much, not "empty"', async () => {
  await page.fill('#login-user', '2'); // a demo user: $100.00
  await page.click('#login-btn');
  await expectText('#who', /user 2\b/);
  await expectText('#wallet-balance', /\$100\.00/);
  const id = await idOf('Noise-cancelling headphones'); // $199.00, a regular product
  assert.ok(id > 0);
  await page.click(`[data-testid=order-${id}]`); // selects it in Regular order
  await page.fill('#order-qty', '1');
  await page.click('#order-btn');
  await expectText('#order-result', /201 Created/);
  await page.waitForSelector('#wallet-empty:not([hidden])');
  await expectText('#wallet-empty', /balance \$100\.00 is less than \$199\.00.*credit.*\$99\.00/);
  assert.doesNotMatch(await text('#wallet-empty'), /empty/);
  await page.click('#orders-table tr[data-status=pending] button:has-text("Cancel")');
  await page.waitForSelector('#orders-table tr[data-status=cancelled]');
});

test('at 390x844 (a phone): a purchase brings its order into view', async () => {
  await page.setViewportSize(PHONE);
  try {
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.fill('#login-user', '3');
    await page.click('#login-btn');
    await expectText('#who', /user 3\b/);
    const id = await idOf('Flash sale: mechanical keyboard');
    assert.ok(id > 0);
    await page.click(`[data-testid=buy-${id}]`);
    await expectText('#buy-result', /201 Created/);
    await page.waitForFunction(() => {
      const r = document.querySelector('#orders-table tr.just-made[data-status=pending]')?.getBoundingClientRect();
      return r && r.top >= 0 && r.bottom <= window.innerHeight;
    });
    await page.click('#orders-table tr.just-made button:has-text("Cancel")');
    await page.waitForSelector('#orders-table tr[data-status=cancelled]');
  } finally {
    await page.setViewportSize(DESKTOP);
  }
});

test('operator: admin token (the header says so), create a sale, credit a wallet (and replay the credit)', async () => {
  await operatorTab();
  await expectText('#who', /no admin token/);
  await page.fill('#admin-token', ADMIN);
  await page.click('#admin-btn');
  await expectText('#strategy', /lock-fence/);
  await expectText('#who', /operator · admin token accepted/);

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

test('shopper: an empty wallet offers no Pay button', async () => {
  await shopperTab();
  await page.fill('#login-user', String(USER + 1));
  await page.click('#login-btn');
  await expectText('#who', new RegExp(`user ${USER + 1}`));
  await expectText('#wallet-balance', /\$0\.00/);
  await page.click(`[data-testid=buy-${productId}]`);
  await expectText('#buy-result', /201 Created/);
  const pay = page.locator('#orders-table tr[data-status=pending] button:has-text("Pay")');
  await pay.waitFor();
  await page.waitForFunction(() => document.querySelector('#orders-table tr[data-status=pending] button.primary')?.disabled === true);
  await page.waitForSelector('#wallet-empty:not([hidden])');
  // Give the unit back, so the sale below counts from 5 again.
  await page.click('#orders-table tr[data-status=pending] button:has-text("Cancel")');
  await page.waitForSelector('#orders-table tr[data-status=cancelled]');
  await page.waitForSelector('#wallet-empty[hidden]', { state: 'attached' });
});

test('shopper: log in, buy in the flash sale, pay, see the wallet change', async () => {
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
  const regular = await idOf('Noise-cancelling headphones'); // 20 units
  const stock = `#products-table tr[data-id="${regular}"] .stock`;
  await page.selectOption('#order-product', String(regular));
  await page.fill('#order-qty', '2');
  await page.click('#order-btn');
  await expectText('#order-result', /201 Created/);
  await expectText(stock, /^18$/);
  await page.click('#order-retry');
  await page.waitForSelector('#order-result [data-testid=replay]');
  await expectText('#order-result', /201 Created/); // the stored answer, byte for byte
  await expectText(stock, /^18$/); // not ordered twice

  await page.click('#orders-table tr[data-status=pending] button:has-text("Cancel")');
  await expectText('#orders-result', /200 OK.*cancelled/);
  await page.waitForSelector('#orders-table tr[data-status=cancelled]');
  await expectText(stock, /^20$/);

  // An error is shown as its problem+json title and detail.
  await page.fill('#order-qty', '50');
  await page.click('#order-btn');
  await expectText('#order-result', /409 Conflict\s*Insufficient stock/);

  // A pending order for the screenshot.
  await page.fill('#order-qty', '1');
  await page.click('#order-btn');
  await expectText('#order-result', /201 Created/);
  await page.waitForSelector('#orders-table tr[data-status=pending]');
  await expectText('#wallet-balance', /\$85\.00/);
});

// A flash-sale product is marked and has the Buy now (seckill) button; a
// regular one has neither (its Order… button picks it in Regular order,
// whose list holds the regular products only). With more products on the
// page, a purchase's result is still where the buyer is looking.
for (const [i, vp] of [{ width: 1280, height: 800 }, PHONE].entries()) {
  test(`at ${vp.width}x${vp.height}: flash-sale products are marked, and a purchase's result is in view`, async () => {
    await page.setViewportSize(vp);
    try {
      await shopperTab();
      const post = (body) => page.request.post(`${base}/api/v1/admin/products`, {
        headers: { Authorization: `Bearer ${ADMIN}` }, data: body });
      for (let k = 0; k < 6; k++) {
        const r = await post({ name: `E2E regular ${i}-${k}`, price_cents: 100, stock: 10 });
        assert.equal(r.status(), 201);
      }
      const r = await post({ name: `E2E flash ${i}`, price_cents: 100, stock: 10, flash_sale: true });
      assert.equal(r.status(), 201);
      const flash = (await r.json()).id;
      await page.waitForSelector(`[data-testid=buy-${flash}]`);
      const coffee = await idOf('Coffee beans, 1 kg');
      assert.equal(await page.locator(`[data-testid=sale-${flash}]`).count(), 1, 'the flash-sale badge');
      assert.equal(await page.locator(`[data-testid=sale-${coffee}]`).count(), 0, 'no badge on a regular product');
      assert.equal(await page.locator(`[data-testid=buy-${coffee}]`).count(), 0, 'no Buy now on a regular product');
      assert.equal(await page.locator(`[data-testid=order-${coffee}]`).count(), 1, 'Order… on a regular product');
      const options = await page.$$eval('#order-product option', (os) => os.map((o) => Number(o.value)));
      assert.ok(!options.includes(flash) && options.includes(coffee), `Regular order lists ${options.join(',')}`);

      await page.evaluate(() => window.scrollTo(0, 0));
      await page.fill('#login-user', String(5000 + i));
      await page.click('#login-btn');
      await expectText('#who', new RegExp(`user ${5000 + i}\\b`));
      await page.locator(`[data-testid=buy-${flash}]`).scrollIntoViewIfNeeded();
      await page.click(`[data-testid=buy-${flash}]`);
      await expectText('#toast', /201 Created/);
      await page.waitForFunction(() => {
        const t = document.querySelector('#toast');
        const b = t && !t.hidden && t.getBoundingClientRect();
        return b && b.top >= 0 && b.bottom <= window.innerHeight && b.left >= 0 && b.right <= window.innerWidth;
      });
      await page.click('#toast'); // dismissed on a click
      await page.waitForSelector('#toast[hidden]', { state: 'attached' });

      // The purchase's timeline, drawn from its answer's Server-Timing:
      // each phase in the legend, the bar whole inside its card.
      await page.waitForSelector('#buy-timeline:not([hidden]) svg.tl-bar rect.tl-tx');
      const tl = await page.evaluate(() => {
        const el = document.querySelector('#buy-timeline');
        const c = el.closest('.card').getBoundingClientRect();
        const b = el.querySelector('svg.tl-bar').getBoundingClientRect();
        return {
          inside: b.width > 50 && b.left >= c.left - 0.5 && b.right <= c.right + 0.5,
          phases: [...el.querySelectorAll('li')].map((li) => li.dataset.phase + ' ' + li.innerText),
        };
      });
      assert.ok(tl.inside, 'the timeline lies inside its card');
      for (const p of ['queue', 'lock', 'tx', 'rest']) {
        assert.ok(tl.phases.some((s) => new RegExp(`^${p} .*\\d ms$`).test(s)), `timeline phase ${p}: ${tl.phases.join('; ')}`);
      }
    } finally {
      await page.setViewportSize(DESKTOP);
    }
  });
}

test('shopper: a sold-out row has no active button', async () => {
  await operatorTab();
  await page.fill('#create-name', 'Last pair');
  await page.fill('#create-stock', '1');
  await page.click('#create-btn');
  await expectText('#create-result', /201 Created.*Last pair/);
  const id = Number(((await text('#create-result')).match(/#(\d+) Last pair/) || [])[1]);
  await shopperTab();
  await page.click(`[data-testid=buy-${id}]`);
  await expectText('#buy-result', /201 Created/);
  await expectText(`#products-table tr[data-id="${id}"] .stock`, /^0$/);
  await page.waitForFunction((i) => {
    const b = document.querySelector(`[data-testid=buy-${i}]`);
    return b && b.disabled && b.textContent === 'Sold out';
  }, id);
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.evaluate(() => window.scrollTo(0, 0));
  await checkLayout('shopper view at 1280x900');
  await page.evaluate(() => { document.querySelector('#toast').hidden = true; }); // a full-page shot would draw it mid-page
  await page.screenshot({ path: path.join(SHOTS, 'shopper.png'), fullPage: true });
});

// Every render of the race panel is recorded, as the operator saw it.
function recordFrames() {
  return page.evaluate(() => {
    window.raceFrames = [];
    const read = () => {
      for (const el of document.querySelectorAll('#race-sides .side')) {
        const n = (t) => Number(el.querySelector(`[data-testid=${t}]`)?.textContent);
        window.raceFrames.push({ strategy: el.dataset.strategy, safe: el.classList.contains('safe'), done: el.dataset.done === 'true',
          units: n('units'), created: n('created'), stock: n('stock'), oversold: n('oversold') });
      }
    };
    new MutationObserver(read).observe(document.getElementById('race-sides'), { childList: true, subtree: true, characterData: true });
  });
}

test('operator: side by side, 1000 buyers for 100 units on lock-fence and on naive at once', async () => {
  await operatorTab();
  await recordFrames();
  await page.fill('#race-stock', '100');
  await page.fill('#race-buyers', '1000');
  await page.fill('#race-conc', '50');
  await page.selectOption('#race-vs', 'naive');
  await expectText('#race-vs-note', /naive: read the stock/);
  await page.click('#race-btn');
  await expectText('#race-result', /202 Accepted.*lock-fence vs .*naive/);
  await page.waitForSelector('#race[data-done=true]', { timeout: 240_000 });

  const safe = '#race-side-0', naive = '#race-side-1';
  assert.equal(await page.getAttribute(safe, 'data-strategy'), 'lock-fence');
  assert.equal(await page.getAttribute(naive, 'data-strategy'), 'naive');
  await page.waitForSelector(`${safe} .verdict[data-ok]`);
  assert.equal(await page.getAttribute(`${safe} .verdict`, 'data-ok'), 'true', await text(`${safe} .verdict`));
  assert.equal(await text(`${safe} [data-testid=created]`), '100');
  assert.equal(await text(`${safe} [data-testid=oversold]`), '0');
  assert.equal(await text(`${safe} [data-testid=stock]`), '0');
  await page.waitForSelector(`${safe} .chart svg path.created`);
  await page.waitForSelector(`${naive} .chart svg path.created`);

  // The naive side: its verdict agrees with its numbers, whatever the timing.
  const n = (t) => text(`${naive} [data-testid=${t}]`).then(Number);
  const [created, stock, oversold] = [await n('created'), await n('stock'), await n('oversold')];
  const naiveOK = await page.getAttribute(`${naive} .verdict`, 'data-ok');
  assert.equal(naiveOK, String(oversold === 0 && created + stock === 100), `naive: ${created} orders, stock ${stock}, oversold ${oversold}, audit ok ${naiveOK}`);
  if (oversold > 0) await expectText(`${naive} .verdict`, new RegExp(`oversold by ${oversold}`));

  // Every frame the operator saw: a safe side never shows orders + stock
  // above the units on sale; oversold is orders beyond units until the audit.
  const frames = await page.evaluate(() => window.raceFrames);
  assert.ok(frames.length >= 4, `only ${frames.length} frames recorded`);
  for (const f of frames) {
    if (f.safe) assert.ok(f.created + f.stock <= f.units, `a frame showed ${JSON.stringify(f)}`);
    if (!f.done) assert.equal(f.oversold, Math.max(0, f.created - f.units), `a frame showed ${JSON.stringify(f)}`);
  }
  console.log(`side by side: ${frames.length} frames; naive ${created} orders for 100 units, stock ${stock}, oversold ${oversold}`);

  await page.evaluate(() => window.scrollTo(0, 0));
  await checkLayout('operator view at 1280x900');
  await page.evaluate(() => { document.querySelector('#toast').hidden = true; }); // a full-page shot would draw it mid-page
  await page.screenshot({ path: path.join(SHOTS, 'operator.png'), fullPage: true });
});

test('operator: after the race the shop-wide audit is green and names the lab findings apart', async () => {
  await operatorTab();
  await page.fill('#audit-product', '');
  await page.click('#audit-btn');
  await page.waitForSelector('#audit-verdict[data-ok]');
  assert.equal(await page.getAttribute('#audit-verdict', 'data-ok'), 'true', await text('#audit-verdict'));
  await expectText('#audit-verdict', /Audit OK/);
  await page.waitForSelector('#audit-verdict [data-testid=lab-findings]');
  const naiveOK = await page.getAttribute('#race-side-1 .verdict', 'data-ok');
  await expectText('#audit-verdict [data-testid=lab-findings]', naiveOK === 'true' ? /Lab race products: 2, no violations/ : /Lab findings: \d+ violations?.*naive/s);
});

test('shopper: lab race products stay out of the list unless asked for', async () => {
  await shopperTab();
  await expectText('#lab-count', /show 2 lab race products/);
  const names = () => page.$$eval('#products-table tbody .name', (tds) => tds.map((t) => t.textContent));
  assert.ok(!(await names()).some((x) => x.startsWith('Lab race ')), (await names()).join(', '));
  await page.check('#show-lab');
  await page.waitForFunction(() => [...document.querySelectorAll('#products-table tbody .name')].filter((t) => t.textContent.startsWith('Lab race ')).length === 2);
  await page.uncheck('#show-lab');
  await page.waitForFunction(() => ![...document.querySelectorAll('#products-table tbody .name')].some((t) => t.textContent.startsWith('Lab race ')));
});

test('at 390x844 (a phone): no sideways scroll, every control inside its card, tiles whole', async () => {
  await page.setViewportSize(PHONE);
  try {
    await shopperTab();
    await checkLayout('shopper view at 390x844');
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.evaluate(() => { document.querySelector('#toast').hidden = true; }); // a full-page shot would draw it mid-page
    await page.screenshot({ path: path.join(SHOTS, 'shopper-phone.png'), fullPage: true });
    await operatorTab();
    await checkLayout('operator view at 390x844');
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.evaluate(() => { document.querySelector('#toast').hidden = true; }); // a full-page shot would draw it mid-page
    await page.screenshot({ path: path.join(SHOTS, 'operator-phone.png'), fullPage: true });
  } finally {
    await page.setViewportSize(DESKTOP);
  }
});

test('the page raised no script error and asked nothing of the network', () => {
  assert.deepEqual(pageErrors, []);
});
