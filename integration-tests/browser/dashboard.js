// Drives the EchoMQ dashboard in Debian's headless Chromium with
// playwright-core (no browser is downloaded): opens the overview, follows the
// failed count of a queue to a failed job, retries it through the confirm
// step, and waits until the live feed reports it completed. Saves a
// screenshot. The Rust test crates/echomq-ui/tests/suite/browser.rs runs it.
//
// Usage: node dashboard.js <dashboard-url> <redis-url> <queue> <job-id> <go-key> <screenshot.png>
// The worker of the test holds the retried job until <go-key> exists in
// Redis; this script sets it once the page's live feed is connected, so the
// completion is seen through the feed and not by luck of timing.
// Prints one JSON line; exits non-zero with the reason on failure.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');
const IORedis = require('ioredis');

const [base, redisUrl, queue, jobId, goKey, shot] = process.argv.slice(2);
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const STEP_MS = 60000;

async function main() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'echomq-ui-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
  });
  const redis = new IORedis(redisUrl, { maxRetriesPerRequest: null });
  const steps = [];
  const pageErrors = [];
  let page = null;
  try {
    page = context.pages()[0] || (await context.newPage());
    page.setDefaultTimeout(STEP_MS);
    page.on('pageerror', (e) => pageErrors.push(String(e)));

    await page.goto(base + '/');
    const row = page.locator(`tr[data-queue="${queue}"]`);
    await row.waitFor();
    steps.push('overview');
    await row.locator('td.count-failed a').click();
    await page.waitForURL(/state=failed/);
    steps.push('failed list');
    await page.locator(`tr[data-job="${jobId}"] a.job-link`).click();
    await page.locator('#job-state[data-state="failed"]').waitFor();
    steps.push('failed job');

    await page.locator('#action-retry').click();
    await page.locator('#confirm').waitFor();
    const question = await page.locator('p.question').innerText();
    steps.push('confirm: ' + question);
    await page.locator('#confirm').click();
    await page.waitForURL(new RegExp(`/jobs/${jobId}\\?done=`));
    steps.push('retried');

    await page.locator('#live-status.live').waitFor();
    steps.push('live feed connected');
    await redis.set(goKey, '1');
    await page.locator(`#feed li[data-event="completed"][data-job="${jobId}"]`).waitFor();
    steps.push('completed in the feed');
    await page.locator('#job-state[data-state="completed"]').waitFor();
    steps.push('page shows completed');

    fs.mkdirSync(path.dirname(shot), { recursive: true });
    await page.screenshot({ path: shot, fullPage: true });
    if (pageErrors.length) throw new Error('script errors on the page: ' + pageErrors.join('; '));
    process.stdout.write(JSON.stringify({ ok: true, steps, screenshot: shot }) + '\n');
  } catch (err) {
    let where = '';
    if (page) {
      const text = await page.locator('body').innerText().catch(() => '');
      where = `\nat ${page.url()}:\n${text.slice(0, 1500)}`;
    }
    process.stderr.write(`failed after steps ${JSON.stringify(steps)}: ${err.stack || err}${where}\n`);
    process.exitCode = 1;
  } finally {
    redis.disconnect();
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

main().catch((err) => {
  process.stderr.write(String(err.stack || err) + '\n');
  process.exit(1);
});
