// Browser page budgets (issue #28): an Anvil with 10,000 demo nodes and
// Debian's Chromium driven by playwright-core, N loads of each measured
// page, p50/p95 reported. Figures, not pass/fail: nothing here asserts a
// time. Run it with `go tool task bench-browser` (or `node
// bench/browser.mjs` from playwright/); it builds Anvil, starts it on a
// scratch SQLite database and a free port, and stops it (and itself) when
// done, or after a 20-minute guard.
//
// What is measured, per load, from the navigation's start
// (performance.timeOrigin):
//   - server: responseStart − requestStart of the document (the time to
//     its first byte, which is Anvil's handling plus loopback);
//   - dcl: domContentLoadedEventEnd, the HTML parsed and the deferred
//     scripts (htmx, anvil.js) run;
//   - interactive: the later of loadEventEnd (every subresource in) and
//     the first htmx:load event on <body>, which htmx 2 fires once it has
//     processed the whole body (hx- attributes bound, so every control
//     works). anvil.js attaches its behaviour on DOMContentLoaded, before
//     that.
// Each page is loaded WARM times unmeasured first, so the browser's cache
// holds the static assets, as it does for anyone using the portal.
import { chromium } from 'playwright-core';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const N = Number(process.env.BENCH_LOADS || 30);
const WARM = 3;
const NODES = Number(process.env.BENCH_NODES || 10000);
const root = path.resolve(import.meta.dirname, '..', '..');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'anvil-bench-browser-'));
const bin = path.join(dir, 'anvil');
const db = path.join(dir, 'anvil.db');

let server;
const stop = () => {
  if (server && server.exitCode === null) server.kill('SIGTERM');
  fs.rmSync(dir, { recursive: true, force: true });
};
const guard = setTimeout(() => { console.error('bench-browser: 20-minute guard reached, stopping'); stop(); process.exit(1); }, 20 * 60_000);
// However this process ends (a closed stdout ends it with EPIPE), Anvil
// ends with it.
process.on('exit', stop);
process.on('SIGINT', () => { stop(); process.exit(130); });
process.on('SIGTERM', () => { stop(); process.exit(143); });

const freePort = () => new Promise((ok) => {
  const l = net.createServer();
  l.listen(0, '127.0.0.1', () => { const { port } = l.address(); l.close(() => ok(port)); });
});

async function waitHealthy(url) {
  for (let i = 0; i < 1200; i++) {
    if (server.exitCode !== null) throw new Error(`anvil exited with ${server.exitCode}`);
    try {
      if ((await fetch(url + '/healthz')).ok) return;
    } catch { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error('anvil did not become healthy in 5 minutes');
}

const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];

async function main() {
  console.log(`building anvil into ${dir}`);
  execFileSync('go', ['build', '-o', bin, '.'], { cwd: root, stdio: 'inherit' });
  const run = (...args) => execFileSync(bin, [...args, '--database', db], { input: 'bench-password-1\n' });
  run('migrate');
  run('user', 'create', 'bench', '--password-stdin');
  run('user', 'grant', 'bench', '--system', '--role', 'admin');
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  // The power sync is off, as in the Go portal benchmarks: its sweep
  // over every node each minute would land in the figures.
  const started = Date.now();
  server = spawn(bin, ['serve', '--database', db, '--listen', `127.0.0.1:${port}`, '--demo', String(NODES),
    '--power-sync', '0', '--session-secret', 'bench-browser-only', '--log-level', 'warn'], { stdio: ['ignore', 'ignore', 'inherit'] });
  await waitHealthy(url);
  console.log(`anvil with ${NODES} demo nodes ready in ${((Date.now() - started) / 1000).toFixed(1)} s at ${url}`);

  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  try {
    const ctx = await browser.newContext({ baseURL: url, viewport: { width: 1440, height: 900 } });
    // Installed through the DevTools protocol, which the portal's CSP
    // does not govern; it only listens.
    await ctx.addInitScript(() => {
      document.addEventListener('htmx:load', (e) => {
        if (e.target === document.body && window.__htmxReady === undefined) window.__htmxReady = performance.now();
      }, true);
    });
    const page = await ctx.newPage();
    await page.goto('/login');
    await page.getByLabel('Username').fill('bench');
    await page.getByLabel('Password').fill('bench-password-1');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/nodes$/);
    // The list's own count, so the figures are over the fleet asked for.
    const listed = Number((await page.locator('label', { has: page.getByTestId('select-all-matching') }).textContent()).match(/(\d+)/)[1]);
    if (listed !== NODES) throw new Error(`the node list counts ${listed} nodes, not ${NODES}`);
    console.log(`the node list counts ${listed} nodes`);
    const first = await page.locator('table.nodes tbody tr a').first().getAttribute('href');
    const pages = [
      ['node list, first page', '/nodes'],
      ['node list, filtered (class gpu, lessee tenant-blue)', '/nodes?class=gpu&lessee=tenant-blue'],
      ['node list, page 100', '/nodes?page=100'],
      ['node page', first],
    ];
    const results = [];
    for (const [name, u] of pages) {
      const samples = { server: [], dcl: [], interactive: [] };
      for (let i = 0; i < WARM + N; i++) {
        const resp = await page.goto(u, { waitUntil: 'load' });
        if (resp.status() !== 200 || new URL(page.url()).pathname !== new URL(u, url).pathname) {
          throw new Error(`${u}: ${resp.status()} at ${page.url()}`);
        }
        await page.waitForFunction(() => window.__htmxReady !== undefined);
        const t = await page.evaluate(() => {
          const nav = performance.getEntriesByType('navigation')[0];
          return { server: nav.responseStart - nav.requestStart, dcl: nav.domContentLoadedEventEnd,
            interactive: Math.max(nav.loadEventEnd, window.__htmxReady) };
        });
        if (i >= WARM) for (const k of Object.keys(samples)) samples[k].push(t[k]);
      }
      const row = { page: name, url: u, loads: N };
      for (const [k, v] of Object.entries(samples)) {
        v.sort((a, b) => a - b);
        row[`${k}_p50`] = Number(pct(v, 0.5).toFixed(1));
        row[`${k}_p95`] = Number(pct(v, 0.95).toFixed(1));
      }
      results.push(row);
      console.log(`${name}: server p50 ${row.server_p50} / p95 ${row.server_p95} ms, DOMContentLoaded p50 ${row.dcl_p50} / p95 ${row.dcl_p95} ms, interactive p50 ${row.interactive_p50} / p95 ${row.interactive_p95} ms`);
    }
    console.log('\n| Page | Loads | Server (TTFB) p50 / p95 | DOMContentLoaded p50 / p95 | Interactive p50 / p95 |');
    console.log('|---|---|---|---|---|');
    for (const r of results) {
      console.log(`| ${r.page} | ${r.loads} | ${r.server_p50} / ${r.server_p95} ms | ${r.dcl_p50} / ${r.dcl_p95} ms | ${r.interactive_p50} / ${r.interactive_p95} ms |`);
    }
    if (process.env.BENCH_JSON) fs.writeFileSync(process.env.BENCH_JSON, JSON.stringify(results, null, 2));
  } finally {
    await browser.close();
  }
}

main().then(() => { clearTimeout(guard); stop(); }, (err) => { console.error(err); clearTimeout(guard); stop(); process.exit(1); });
