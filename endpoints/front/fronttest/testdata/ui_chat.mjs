// ui_chat.mjs URL MODEL SCREENSHOT: opens the chat page at URL in headless Chromium (Debian's,
// driven by playwright-core), waits until it has listed the models, picks MODEL, types a
// message, clicks Send, waits for the streamed answer, saves a screenshot, and prints one JSON
// line: {"models":[...], "answer":"...", "status":"1|error", "title":"..."} or {"error":"..."}.
// The page is the one the fake llama-server serves (cmd/fake-llama/webui/index.html).
import { chromium } from 'playwright-core';

const [url, model, shot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  // As root in a sandbox-less VM; no calls home (this machine has no network but loopback).
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
});
const out = {};
try {
  const page = await browser.newPage();
  await page.goto(url, { timeout: 30000 });
  out.title = await page.title();
  await page.waitForSelector('body[data-ready="1"]', { timeout: 30000 });
  out.models = await page.$$eval('#model option', (os) => os.map((o) => o.value));
  out.props = await page.textContent('#props');
  await page.selectOption('#model', model);
  await page.fill('#prompt', 'hello from a browser');
  await page.click('#send');
  await page.waitForSelector('#answer[data-done]', { timeout: 60000 });
  out.status = await page.getAttribute('#answer', 'data-done');
  out.answer = await page.textContent('#answer');
  await page.screenshot({ path: shot, fullPage: true });
} catch (e) {
  out.error = String(e);
}
await browser.close();
console.log(JSON.stringify(out));
