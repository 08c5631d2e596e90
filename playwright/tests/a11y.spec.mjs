import { test, expect } from '@playwright/test';
import { accessible, shot, signIn } from './helpers.mjs';
import path from 'node:path';

// sweep.spec.mjs runs axe and the sideways-scroll check on every page
// type, these main pages among them, at both widths in both schemes; this
// adds the sign-in page, which the sweep (signed in) does not reach, and
// records the main pages' screenshots (go tool task screenshots).
test('the sign-in page passes axe in both colour schemes, at 1440 px and at 390 px, and the suite records screenshots', async ({ page }, testInfo) => {
  test.setTimeout(180_000);
  for (const [scheme, width] of [['light', 1440], ['light', 390], ['dark', 1440], ['dark', 390]]) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.setViewportSize({ width, height: 900 });
    await page.goto('/login');
    await accessible(page, `login@${width}, ${scheme}`);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow, `login overflows at ${width}px, ${scheme}`).toBeLessThanOrEqual(0);
  }
  await page.emulateMedia({ colorScheme: 'light' });
  await page.setViewportSize({ width: 1440, height: 900 });
  await signIn(page, 'olga', 'operator-password-1');
  const pages = [['nodes', '/nodes'], ['users', '/admin/users'], ['runbooks', '/runbooks'], ['runbook-editor', '/runbooks/new'], ['tokens', '/account'],
    ['request-node', '/allocations/new'], ['allocations', '/allocations'], ['policy', '/admin/policy'], ['admin-tokens', '/admin/tokens']];
  const first = await page.locator('table.nodes tbody tr a').first().getAttribute('href');
  pages.push(['node-detail', first]);
  for (const [name, url] of pages) {
    const resp = await page.goto(url);
    expect(resp.status(), name).toBe(200);
    await shot(page, testInfo, name, { fullPage: false });
  }
});

// The self-service and policy pages in the dark scheme too, at both
// widths: a tenant with an allocation, and a policy preview with its Apply
// form (previewed, not applied: the policy journey counts revisions).
test('allocation and policy pages pass axe in both schemes and fit 390 px', async ({ page }, testInfo) => {
  // Twelve axe walks; on a CI machine busy with the agent tests the
  // policy preview's (more rules, a longer matrix) took it past 3 min.
  test.setTimeout(300_000);
  await signIn(page, 'tina', 'tenant-password-1');
  await page.goto('/allocations/new');
  await page.getByRole('button', { name: 'Request' }).click();
  await expect(page.locator('main .flash')).toContainText('reserved for project tenant-blue');
  const node = (await page.locator('main .flash').textContent()).split(' ')[0];
  const walk = async (name, url, prepare) => {
    for (const scheme of ['light', 'dark']) {
      await page.emulateMedia({ colorScheme: scheme });
      for (const width of [1440, 390]) {
        await page.setViewportSize({ width, height: 900 });
        await page.goto(url);
        if (prepare) await prepare();
        await accessible(page, `${name}@${width}, ${scheme}`);
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        expect(overflow, `${name} overflows at ${width}px, ${scheme}`).toBeLessThanOrEqual(0);
      }
    }
  };
  await walk('request-node', '/allocations/new');
  await walk('allocations', '/allocations');
  await page.setViewportSize({ width: 1440, height: 900 });
  await shot(page, testInfo, 'allocations-dark');
  page.once('dialog', (d) => d.accept());
  await page.emulateMedia({ colorScheme: 'light' });
  await page.getByRole('button', { name: `Release ${node}` }).click();
  await expect(page.getByTestId('no-allocations')).toBeVisible();
  await page.getByRole('button', { name: 'Sign out' }).click();

  await signIn(page, 'olga', 'operator-password-1');
  await walk('policy preview', '/admin/policy', async () => {
    await page.getByLabel('Zip of YAML files (folders are flattened; other files are ignored)')
      .setInputFiles(path.join(import.meta.dirname, '..', 'fixtures', 'good-policy.zip'));
    await page.getByRole('button', { name: 'Preview' }).click();
    await expect(page.getByTestId('apply-previewed')).toBeVisible();
  });
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
