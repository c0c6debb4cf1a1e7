// Drives the web chat UI of a running `hearth serve` (the demo model) in
// Debian's headless Chromium through puppeteer-core, as a person with a
// keyboard would. Prints "N passed, M failed" and exits 1 on a failure.
//   node ui_test.mjs BASE_URL HEARTH_ROOT SCREENSHOT_DIR CHROMIUM
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [base, root, shots, chromium] = process.argv.slice(2);
const require = createRequire(`${root}/.deps/npm/`);
const puppeteer = require('puppeteer-core');
fs.mkdirSync(shots, { recursive: true });
const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-ui-'));

let passed = 0, failed = 0;
async function check(name, fn) {
  const t = Date.now();
  try { await fn(); passed++; console.log(`ok ${name} (${Date.now() - t} ms)`); }
  catch (e) { failed++; console.log(`FAIL ${name}: ${e.stack || e}`); }
}
function assert(c, msg) { if (!c) throw new Error(msg); }
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  userDataDir: profile,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--no-proxy-server', '--disable-features=Translate,MediaRouter,OptimizationHints'],
});
const errors = [], foreign = [];
const page = await browser.newPage();
page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
page.on('pageerror', (e) => errors.push(String(e)));
page.on('request', (r) => { const u = r.url(); if (!u.startsWith(`${base}/`) && !u.startsWith('blob:') && !u.startsWith('data:')) foreign.push(u); });
await page.setViewport({ width: 1280, height: 800 });

const count = () => page.$$eval('#thread > .msg', (l) => l.length);
const lastAnswer = () => page.$eval('#thread > .msg.assistant:last-child', (n) => ({
  text: n.querySelector('.body').textContent, meta: n.querySelector('.meta').textContent,
  streaming: n.classList.contains('streaming'),
}));
const idle = () => page.waitForFunction(() => !document.body.classList.contains('busy') &&
  !document.getElementById('send').hidden, { timeout: 20000 });
const shot = (name) => page.screenshot({ path: `${shots}/${name}.png` });
async function setField(id, value) {
  await page.$eval(id, (e, v) => { e.value = v; e.dispatchEvent(new Event('input', { bubbles: true })); }, value);
}

try {
  await check('page loads from the embedded files and lists the served model', async () => {
    await page.goto(`${base}/`, { waitUntil: 'load' });
    await page.waitForFunction(() => document.querySelector('#model option')?.textContent === 'hearth-demo', { timeout: 5000 });
    const focus = await page.evaluate(() => document.activeElement.id);
    assert(focus === 'input', `focus starts in the message box, not ${focus}`);
    const m = await page.evaluate(() => {
      const nav = performance.getEntriesByType('navigation')[0];
      const res = performance.getEntriesByType('resource');
      const fcp = performance.getEntriesByName('first-contentful-paint')[0];
      return { bytes: nav.transferSize + res.reduce((s, r) => s + r.transferSize, 0), files: res.length + 1, fcp: fcp?.startTime };
    });
    console.log(`  page: ${m.files} files, ${m.bytes} bytes transferred, first contentful paint ${m.fcp?.toFixed(0)} ms`);
  });

  await check('every control has an accessible name; keyboard focus is visible', async () => {
    const unnamed = await page.evaluate(() => [...document.querySelectorAll('button, input, select, textarea, [tabindex]')]
      .filter((e) => !(e.getAttribute('aria-label') || e.labels?.length || e.textContent.trim() || e.closest('label')))
      .map((e) => e.outerHTML.slice(0, 80)));
    assert(unnamed.length === 0, `no name: ${unnamed.join(' ')}`);
    await page.keyboard.press('Tab');
    const ring = await page.evaluate(() => {
      const s = getComputedStyle(document.activeElement);
      return `${document.activeElement.id} ${s.outlineStyle} ${s.outlineWidth}`;
    });
    assert(/ solid [1-9]/.test(ring), `focus ring: ${ring}`);
    await page.keyboard.down('Shift'); await page.keyboard.press('Tab'); await page.keyboard.up('Shift');
    assert((await page.evaluate(() => document.activeElement.id)) === 'input', 'Shift+Tab did not come back');
  });

  await check('keyboard only: Shift+Enter is a newline, Enter sends; the answer streams in with TTFT and tok/s', async () => {
    await page.keyboard.type('Hello there');
    await page.keyboard.down('Shift'); await page.keyboard.press('Enter'); await page.keyboard.up('Shift');
    await page.keyboard.type('How are you?');
    assert((await count()) === 0, 'Shift+Enter sent the message');
    assert((await page.$eval('#input', (e) => e.value)) === 'Hello there\nHow are you?', 'no newline in the box');
    await page.keyboard.press('Enter');
    await page.waitForSelector('#thread > .msg.assistant', { timeout: 5000 });
    await idle();
    const a = await lastAnswer();
    assert(a.text.trim().length > 0, 'empty answer');
    assert(/TTFT \d+ ms/.test(a.meta) && /tok\/s/.test(a.meta), `meta: ${a.meta}`);
    assert((await page.$eval('#input', (e) => e.value)) === '', 'the box is not cleared');
    const user = await page.$eval('#thread > .msg.user .body', (n) => n.textContent);
    assert(user === 'Hello there\nHow are you?', `user message: ${JSON.stringify(user)}`);
  });

  await check('a long answer streams token by token; Esc stops it mid-answer', async () => {
    await page.click('#settings-btn');
    await setField('#set-max_tokens', '1500');
    await setField('#set-extra', '{"logit_bias": {"1": -100, "3": -100}}'); // no end of sequence
    await page.keyboard.press('Escape');
    assert(await page.$eval('#settings', (e) => e.hidden), 'Esc did not close the settings');
    await page.focus('#input');
    await page.keyboard.type('Tell me a long story');
    await page.keyboard.press('Enter');
    const lengths = new Set();
    const t0 = Date.now();
    while (lengths.size < 4 && Date.now() - t0 < 10000) {
      const a = await lastAnswer();
      if (a.streaming && !a.text.includes('Thinking')) lengths.add(a.text.length);
      await sleep(30);
    }
    assert(lengths.size >= 4, `the answer did not grow while streaming: ${[...lengths]}`);
    assert(!(await page.$eval('#stop', (e) => e.hidden)), 'no Stop button while streaming');
    await shot('desktop-streaming');
    await page.keyboard.press('Escape');
    await idle();
    const a = await lastAnswer();
    assert(a.meta.includes('stopped'), `meta after Esc: ${a.meta}`);
    await sleep(300);
    const b = await lastAnswer();
    assert(a.text === b.text && b.text.length > 0, 'the text changed after the stop');
    // the server cancels the generation (the client went away)
    let active = -1;
    for (let i = 0; i < 50 && active !== 0; i++) { active = (await (await fetch(`${base}/stats`)).json()).requests.active; await sleep(50); }
    assert(active === 0, `the server still generates (${active} active)`);
  });

  await check('regenerate replaces the last answer', async () => {
    await page.click('#settings-btn');
    await setField('#set-max_tokens', '24');
    await setField('#set-extra', '');
    await page.click('[data-close="settings"]');
    const n = await count();
    await page.click('#thread > .msg.assistant:last-child [aria-label="Regenerate the answer"]');
    await idle();
    assert((await count()) === n, `message count ${n} → ${await count()}`);
    const a = await lastAnswer();
    assert(!a.meta.includes('stopped') && a.text.trim().length > 0, `regenerated: ${JSON.stringify(a)}`);
  });

  await check('editing a past message drops what followed and answers again', async () => {
    await page.click('#thread > .msg.user:nth-child(3) [aria-label^="Edit"]');
    const ta = await page.waitForSelector('#thread .edit textarea');
    await ta.evaluate((e) => e.select());
    await page.keyboard.type('Tell me about the sea');
    await page.keyboard.press('Enter');
    await idle();
    assert((await count()) === 4, `messages: ${await count()}`);
    const u = await page.$eval('#thread > .msg.user:nth-child(3) .body', (n) => n.textContent);
    assert(u === 'Tell me about the sea', u);
  });

  await check('structured output (json_object) is shown as JSON', async () => {
    await page.click('#settings-btn');
    await page.select('#set-format', 'json_object');
    await setField('#set-max_tokens', '48');
    await page.click('[data-close="settings"]');
    await page.focus('#input');
    await page.keyboard.type('Describe yourself as JSON');
    await page.keyboard.press('Enter');
    await idle();
    const label = await page.$eval('#thread > .msg.assistant:last-child .code-lang', (n) => n.textContent);
    assert(label.startsWith('JSON output'), `label: ${label}`);
    await page.click('#settings-btn');
    await page.select('#set-format', 'text');
    await page.click('[data-close="settings"]');
  });

  await check('server statistics panel shows /stats', async () => {
    await page.click('#stats-btn');
    await page.waitForFunction(() => document.querySelectorAll('#stats-list dt').length >= 5, { timeout: 5000 });
    const text = await page.$eval('#stats-list', (n) => n.textContent);
    assert(/hearth-demo/.test(text) && /decode/.test(text) && /KV cache/.test(text), text);
    await shot('desktop-stats');
    await page.keyboard.press('Escape');
  });

  await check('model output is rendered as Markdown, safely', async () => {
    const r = await page.evaluate(() => {
      const d = document.createElement('div');
      HearthMarkdown.render([
        '# Title', 'Some **bold**, *em*, `code` and a [link](https://example.org).',
        '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>',
        '[bad](javascript:window.pwned=3) ![pic](http://127.0.0.2/x.png)',
        '', '| a | b |', '|---|--:|', '| 1 | <b>2</b> |', '',
        '```c', 'int main(void) { return 0; } // done', '```', '', '- one', '- two', '  - nested',
      ].join('\n'), d);
      return {
        html: d.innerHTML, text: d.textContent,
        bad: d.querySelectorAll('img, script, b, [onerror]').length,
        hrefs: [...d.querySelectorAll('a')].map((a) => a.getAttribute('href')),
        th: d.querySelectorAll('table th').length, td: d.querySelectorAll('table td').length,
        kw: d.querySelectorAll('.code-block .tok-kw').length, copy: d.querySelectorAll('.code-block .copy-btn').length,
        strong: d.querySelectorAll('strong').length, nested: d.querySelectorAll('ul ul li').length,
        h1: d.querySelectorAll('h1').length, pwned: window.pwned,
      };
    });
    assert(r.bad === 0 && r.pwned === undefined, `HTML got through: ${r.html}`);
    assert(r.text.includes('<img src=x onerror="window.pwned=1">'), 'raw HTML not shown as text');
    assert(JSON.stringify(r.hrefs) === JSON.stringify(['https://example.org', 'http://127.0.0.2/x.png']), `links: ${r.hrefs}`);
    await page.click('#settings-btn');
    await shot('desktop-settings');
    await page.keyboard.press('Escape');
    assert(r.th === 2 && r.td === 2 && r.kw >= 2 && r.copy === 1 && r.strong === 1 && r.nested === 1 && r.h1 === 1, JSON.stringify(r));
  });

  await check('tool calls, tables and code (Copy puts it on the clipboard) in a saved conversation; reload finds the conversations', async () => {
    await page.evaluate(() => {
      const convs = JSON.parse(localStorage.getItem('hearth.conversations.v1'));
      convs.push({ id: 'tools-demo', title: 'Weather tool', created: 1, updated: Date.now(), messages: [
        { role: 'user', content: 'What is the weather in Paris? Show me a table and some code.' },
        { role: 'assistant', content: 'Here is what I know:\n\n| city | °C | sky |\n|---|--:|---|\n| Paris | 14 | cloudy |\n| Oslo | 3 | snow |\n\n```python\ndef forecast(city: str) -> dict:\n    # ask the tool\n    return {"city": city, "days": 3}\n```',
          stats: { ttft_ms: 41, tps: 88.2, tokens: 57 }, finish: 'stop' },
        { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris", "unit": "celsius"}' } }],
          stats: { ttft_ms: 38, tps: 91.0, tokens: 19 }, finish: 'tool_calls' },
      ] });
      localStorage.setItem('hearth.conversations.v1', JSON.stringify(convs));
      localStorage.setItem('hearth.current', JSON.stringify('tools-demo'));
    });
    await page.reload({ waitUntil: 'load' });
    await page.waitForSelector('#thread .tool-call');
    const titles = await page.$$eval('#conv-list .conv-open', (l) => l.map((b) => b.textContent));
    assert(titles.length === 2 && titles.includes('Hello there How are you?'), `list: ${titles}`);
    const tool = await page.$eval('#thread .tool-call', (n) => n.getAttribute('aria-label') + ' ' + n.textContent);
    assert(tool.includes('get_weather') && tool.includes('"city": "Paris"'), tool);
    assert((await page.$$('#thread table')).length === 1, 'no table');
    await shot('desktop-light');
    await browser.defaultBrowserContext().overridePermissions(base, ['clipboard-read', 'clipboard-write', 'clipboard-sanitized-write']);
    await page.click('#thread .code-block [data-copy]');
    await page.waitForFunction(() => document.querySelector('#thread .code-block [data-copy]').textContent === 'Copied', { timeout: 3000 });
    const clip = await page.evaluate(() => navigator.clipboard.readText());
    assert(clip.startsWith('def forecast(city: str) -> dict:\n    # ask the tool'), `clipboard: ${clip}`);
    // back to the first conversation through the list, keyboard only
    await page.focus('#conv-list .conv-open');
    let label = '';
    for (let i = 0; i < 8 && label !== 'Hello there How are you?'; i++) {
      label = await page.evaluate(() => document.activeElement.textContent);
      if (label !== 'Hello there How are you?') await page.keyboard.press('Tab');
    }
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelectorAll('#thread > .msg').length === 6);
  });

  await check('rename a conversation; export it as JSON', async () => {
    await page.click('.conv[data-id="tools-demo"] [title="Rename"]');
    await page.keyboard.down('Control'); await page.keyboard.press('a'); await page.keyboard.up('Control');
    await page.keyboard.type('Paris weather');
    await page.keyboard.press('Enter');
    const t = await page.$eval('.conv[data-id="tools-demo"] .conv-open', (b) => b.textContent);
    assert(t === 'Paris weather', t);
    const saved = await page.evaluate(() => JSON.parse(localStorage.getItem('hearth.conversations.v1')).find((c) => c.id === 'tools-demo').title);
    assert(saved === 'Paris weather', saved);
    const cdp = await page.createCDPSession();
    await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: profile });
    await page.click('.conv[data-id="tools-demo"] [title="Export as JSON"]');
    const file = `${profile}/hearth-paris-weather.json`;
    for (let i = 0; i < 100 && !fs.existsSync(file); i++) await sleep(20);
    const conv = JSON.parse(fs.readFileSync(file, 'utf8'));
    assert(conv.title === 'Paris weather' && conv.messages.length === 3 && conv.messages[2].tool_calls[0].function.name === 'get_weather',
      JSON.stringify(conv).slice(0, 200));
  });

  await check('theme switch: light ↔ dark', async () => {
    const before = await page.evaluate(() => [document.documentElement.dataset.theme, getComputedStyle(document.body).backgroundColor]);
    await page.click('#theme-btn');
    const after = await page.evaluate(() => [document.documentElement.dataset.theme, getComputedStyle(document.body).backgroundColor]);
    assert(before[0] !== after[0] && before[1] !== after[1], `${before} → ${after}`);
    if (after[0] !== 'dark') await page.click('#theme-btn');
    await page.click('.conv[data-id="tools-demo"] .conv-open');
    await page.waitForSelector('#thread .tool-call');
    await shot('desktop-dark');
  });

  await check('phone width (390x844): one column, a drawer for the list, nothing wider than the screen', async () => {
    await page.setViewport({ width: 390, height: 844, deviceScaleFactor: 1, isMobile: true, hasTouch: true });
    await page.reload({ waitUntil: 'load' });
    await page.waitForSelector('#thread .tool-call');
    const r = await page.evaluate(() => {
      const box = (s) => document.querySelector(s).getBoundingClientRect().toJSON();
      const vis = (s) => getComputedStyle(document.querySelector(s)).visibility !== 'hidden' && getComputedStyle(document.querySelector(s)).display !== 'none';
      return { sw: document.documentElement.scrollWidth, w: innerWidth, side: vis('#sidebar'), menu: vis('#menu'),
        composer: box('#composer'), input: box('#input'), h: innerHeight, msgs: box('#messages') };
    });
    assert(r.sw <= r.w, `page wider than the screen: ${r.sw} > ${r.w}`);
    assert(!r.side && r.menu, `sidebar shown ${r.side}, menu shown ${r.menu}`);
    assert(r.composer.bottom <= r.h && r.input.width > 200 && r.msgs.width >= 380, JSON.stringify(r));
    await shot('phone-dark');
    await page.click('#menu');
    await page.waitForFunction(() => getComputedStyle(document.getElementById('sidebar')).visibility === 'visible');
    await sleep(250);
    await shot('phone-drawer');
    await page.keyboard.press('Escape');
    assert(!(await page.evaluate(() => document.body.classList.contains('drawer-open'))), 'Esc did not close the drawer');
    await page.click('#theme-btn');
    await sleep(50);
    await shot('phone-light');
  });

  await check('delete a conversation (two clicks)', async () => {
    await page.setViewport({ width: 1280, height: 800 });
    await page.click('.conv[data-id="tools-demo"] [title="Delete"]');
    await page.click('.conv[data-id="tools-demo"] [title="Delete"]');
    assert((await page.$$('.conv')).length === 1, 'not deleted');
  });

  await check('no console errors; no request left the server', async () => {
    assert(errors.length === 0, `console errors: ${errors.join(' | ')}`);
    assert(foreign.length === 0, `requests elsewhere: ${foreign.join(' ')}`);
  });
} finally {
  await browser.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
console.log(`screenshots in ${shots}`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
