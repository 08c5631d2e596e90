import { test, expect } from '@playwright/test';
import { signIn } from './helpers.mjs';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(import.meta.url);
// Evaluated through the DevTools protocol rather than added as a script
// tag, which the portal's Content-Security-Policy rightly refuses.
const axeSource = fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
const shots = path.join(import.meta.dirname, '..', '..', 'docs', 'screenshots');

// axe finds no serious or critical violation on the page.
async function accessible(page, name) {
  await page.evaluate(`${axeSource}\n;undefined`);
  const result = await page.evaluate(async () => await window.axe.run(document, { resultTypes: ['violations'] }));
  const bad = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  expect(bad.map((v) => `${name}: ${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`)).toEqual([]);
}


test('every main page passes axe, at 1440 px and at 390 px, and the suite records screenshots', async ({ page }) => {
  // Eleven pages twice with axe: well over the default 30 s on 2 busy cores.
  test.setTimeout(240_000);
  fs.mkdirSync(shots, { recursive: true });
  for (const width of [1440, 390]) {
    await page.setViewportSize({ width, height: 900 });
    await page.goto('/login');
    await accessible(page, 'login');
    await signIn(page, 'olga', 'operator-password-1');
    const pages = [['nodes', '/nodes'], ['users', '/admin/users'], ['runbooks', '/runbooks'], ['runbook-editor', '/runbooks/new'], ['tokens', '/account'],
      ['request-node', '/allocations/new'], ['policy', '/admin/policy']];
    await page.goto('/nodes');
    const first = await page.locator('table.nodes tbody tr a').first().getAttribute('href');
    pages.push(['node-detail', first]);
    for (const [name, url] of pages) {
      await page.goto(url);
      await accessible(page, `${name}@${width}`);
      // Nothing is wider than the viewport but tables, which scroll.
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      // At 390 px only wide tables may scroll; the page itself must not.
      const bodyOverflow = await page.evaluate(() => {
        const others = [...document.querySelectorAll('main > :not(table):not(.scroll):not(section), header')]
          .map((e) => e.getBoundingClientRect().right);
        return Math.max(0, ...others) - window.innerWidth;
      });
      expect(bodyOverflow, `${name}: a non-table element overflows at ${width}px`).toBeLessThanOrEqual(1);
      if (width === 1440) {
        expect(overflow, `${name} overflows at ${width}px`).toBeLessThanOrEqual(0);
        await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: false });
      }
    }
    await page.getByRole('button', { name: 'Sign out' }).click();
  }
});

test('with JavaScript off, lists read and forms still submit', async ({ browser }) => {
  const ctx = await browser.newContext({ javaScriptEnabled: false });
  const page = await ctx.newPage();
  await signIn(page, 'tina', 'tenant-password-1');
  await expect(page.locator('table.nodes tbody tr').first()).toBeVisible();
  await page.getByLabel('Acting on').selectOption('project:tenant-green');
  await page.getByRole('button', { name: 'Switch' }).click();
  await expect(page.getByTestId('who')).toHaveText('tina · project tenant-green');
  await page.goto('/account');
  await page.getByLabel('Description').fill('no-js');
  await page.getByRole('button', { name: 'Create token' }).click();
  await expect(page.getByTestId('new-token')).toContainText('anvil_');
  await ctx.close();
});

test('first byte and largest contentful paint of the node list', async ({ page }) => {
  await signIn(page, 'olga', 'operator-password-1');
  await page.goto('/nodes');
  const timing = await page.evaluate(() => new Promise((resolve) => {
    const nav = performance.getEntriesByType('navigation')[0];
    new PerformanceObserver((list) => {
      const entries = list.getEntries();
      resolve({ ttfb: nav.responseStart - nav.requestStart, lcp: entries[entries.length - 1].startTime });
    }).observe({ type: 'largest-contentful-paint', buffered: true });
  }));
  console.log(`node list: TTFB ${timing.ttfb.toFixed(1)} ms, LCP ${timing.lcp.toFixed(1)} ms`);
  expect(timing.lcp).toBeGreaterThan(0);
});
