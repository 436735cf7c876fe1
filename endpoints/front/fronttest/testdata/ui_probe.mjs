// ui_probe.mjs URL MESSAGE SCREENSHOT [MODEL]: opens the chat page at URL in headless Chromium
// (Debian's, driven by playwright-core), as a person would use llama-server's own UI (tools/ui):
// waits for its message box; with MODEL, opens the model picker (the button showing one of the
// models /v1/models lists) and picks MODEL; types MESSAGE, presses Enter, waits for the chat
// request's answer to end and the message to show, saves a screenshot, and prints one JSON line:
// {"title":"...", "responses":["GET /path 200", ...], "errors":["..."], "listed":"the picker's
// text", "chatModel":"the model the chat request named", "text":"the page's text"} or
// {"error":"..."}. It knows of the page's markup only "a textarea" and "buttons with text".
import { chromium } from 'playwright-core';

const [url, message, shot, model] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
});
const out = { responses: [], errors: [] };
try {
  const page = await browser.newPage();
  page.on('response', (r) => {
    const u = new URL(r.url());
    out.responses.push(`${r.request().method()} ${u.pathname} ${r.status()}`);
  });
  page.on('pageerror', (e) => out.errors.push(String(e)));
  await page.goto(url, { timeout: 30000 });
  out.title = await page.title();
  await page.waitForSelector('textarea', { timeout: 30000 });
  if (model) {
    const list = await (await page.request.get(new URL('v1/models', url).href)).json();
    const ids = list.data.map((m) => m.id);
    await page.waitForFunction((ids) => [...document.querySelectorAll('button')].some((b) => ids.includes(b.innerText.trim())),
      ids, { timeout: 30000 });
    await page.evaluate((ids) => {
      const b = [...document.querySelectorAll('button')].find((b) => ids.includes(b.innerText.trim()));
      b.setAttribute('data-probe-picker', '1');
    }, ids);
    await page.click('button[data-probe-picker="1"]');
    await page.waitForTimeout(500);
    out.listed = await page.innerText('body');
    await page.getByText(model, { exact: true }).filter({ visible: true }).last().click();
    await page.waitForTimeout(500);
  }
  page.on('request', (q) => {
    if (q.url().endsWith('/v1/chat/completions') && q.method() === 'POST') {
      try { out.chatModel = JSON.parse(q.postData() || '{}').model || ''; } catch (e) { out.chatModel = '?'; }
    }
  });
  await page.fill('textarea', message);
  const answered = page.waitForResponse((r) => r.url().endsWith('/v1/chat/completions') && r.request().method() === 'POST',
    { timeout: 60000 });
  await page.keyboard.press('Enter');
  const resp = await answered;
  await resp.finished();
  // Not 'networkidle': a page that takes the server for a router holds /models/sse open.
  await page.waitForFunction((m) => document.body.innerText.includes(m), message, { timeout: 30000 });
  out.text = await page.innerText('body');
  await page.screenshot({ path: shot, fullPage: true });
} catch (e) {
  out.error = String(e);
}
await browser.close();
console.log(JSON.stringify(out));
