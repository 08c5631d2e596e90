import { test, expect } from '@playwright/test';
import { accessible, operatorAPI, ports, shot, signIn } from './helpers.mjs';

// Campaigns in the portal (issue #29): a runbook rolled out from the node
// list as a campaign, capped, followed live, and approved when it must
// be. Outcomes are asserted through the API.

// checkLayouts runs axe on the current page at 1440 and 390 px, light and
// dark, and checks that the page itself never scrolls sideways (wide
// tables scroll in their own box).
async function checkLayouts(page, name) {
  for (const [scheme, width] of [['light', 1440], ['dark', 1440], ['light', 390], ['dark', 390]]) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.setViewportSize({ width, height: 900 });
    const label = `${name} at ${width}px, ${scheme}`;
    const over = await page.evaluate(() => document.scrollingElement.scrollWidth - window.innerWidth);
    expect(over, `${label} overflows sideways`).toBeLessThanOrEqual(0);
    await accessible(page, label);
  }
  await page.emulateMedia({ colorScheme: 'light' });
  await page.setViewportSize({ width: 1440, height: 900 });
}

// The second instance: 500 demo nodes, the odd ones (250, all manageable)
// carrying the BIOS runbook's trait.
test.describe('on the 500-node fleet', () => {
  test.use({ baseURL: `http://127.0.0.1:${ports.fleet}` });

  test('an operator rolls a BIOS runbook over 200 nodes, 20 at a time, and watches it', async ({ page, browser, request }, testInfo) => {
    // A bound for a hung rollout, not a speed budget: the journey takes
    // about 30 s, alone or beside CPU and disk load; runs that took five
    // minutes and more were a screenshot caught by a navigation (below).
    test.setTimeout(300_000);
    const api = await operatorAPI(browser, request, 'campaign journey');
    await signIn(page, 'olga', 'operator-password-1');
    await page.goto('/nodes?trait=CUSTOM_BIOS_PERF&size=200');
    await expect(page.getByTestId('range')).toHaveText('1–200 of 250');
    await page.getByRole('checkbox', { name: 'Select every node on this page' }).check();
    await page.getByRole('button', { name: 'Roll out runbook…' }).click();
    await expect(page.getByTestId('bulk-selected')).toHaveText('200 nodes selected.');
    await page.getByLabel('Runbook').selectOption('CUSTOM_BIOS_PERF');
    await expect(page.getByTestId('bulk-eligible')).toHaveText('200 of 200 selected nodes are eligible');
    await page.getByLabel('Name', { exact: true }).fill('BIOS performance profile, wave 1');
    await page.getByLabel('At most this many nodes at once').fill('20');
    await page.getByLabel(/Stop starting nodes after more than/).fill('5%');
    await checkLayouts(page, 'rollout form');
    await shot(page, testInfo, 'campaign-rollout');

    page.once('dialog', (d) => d.accept());
    await page.getByTestId('bulk-run').click();
    await expect(page).toHaveURL(/\/campaigns\/[0-9a-f-]{36}$/);
    const uuid = new URL(page.url()).pathname.split('/').pop();
    await expect(page.getByRole('heading', { level: 1 })).toHaveText('BIOS performance profile, wave 1');

    // While it runs, the page follows it, and never more than 20 nodes
    // run at once (sampled through the API as the page updates).
    await expect(page.getByTestId('count-running')).not.toContainText(/^0 /, { timeout: 30_000 });
    await shot(page, testInfo, 'campaign-running');
    let samples = 0;
    for (;;) {
      const c = await api('GET', `/v1/campaigns/${uuid}`);
      expect(c.counts.running).toBeLessThanOrEqual(20);
      samples++;
      if (c.state !== 'running') break;
      await page.waitForTimeout(500);
    }
    expect(samples).toBeGreaterThan(1);
    const done = await api('GET', `/v1/campaigns/${uuid}`);
    expect(done.state).toBe('completed');
    expect(done.max_concurrency).toBe(20);
    expect(done.counts).toEqual({ pending: 0, running: 0, succeeded: 200, failed: 0, skipped: 0 });
    // Each node's BIOS took the settings.
    const nodes = (await api('GET', `/v1/campaigns/${uuid}/nodes`)).nodes;
    expect(nodes).toHaveLength(200);
    const one = await api('GET', `/v1/nodes/${nodes[0].node_uuid}/bios/SysProfile`);
    expect(one.SysProfile.value).toBe('PerfOptimized');

    // The page settles on the outcome and stops polling.
    await expect(page.locator('#campaign-live[hx-trigger]')).toHaveCount(0, { timeout: 30_000 });
    await expect(page.getByTestId('campaign-state')).toContainText('completed');
    await expect(page.getByTestId('campaign-done')).toHaveText('200 of 200 finished');
    await expect(page.getByTestId('count-succeeded')).toHaveText('200 succeeded');
    await expect(page.locator('tr[data-status="succeeded"]')).toHaveCount(50);
    await expect(page.getByTestId('campaign-page')).toHaveText('Page 1 of 4');
    await page.getByRole('link', { name: 'Next →' }).click();
    await expect(page.getByTestId('campaign-page')).toHaveText('Page 2 of 4');
    await page.getByLabel('Show').selectOption('failed');
    await expect(page).toHaveURL(/status=failed/);
    await expect(page.locator('tbody tr[data-status]')).toHaveCount(0);
    // The select submits itself: wait for the page it loads, whose rows
    // are all back, before the screenshot (a screenshot taken while the
    // navigation commits never finishes in Chromium).
    await page.getByLabel('Show').selectOption('');
    await expect(page).toHaveURL(/status=$/);
    await expect(page.locator('tr[data-status="succeeded"]')).toHaveCount(50);
    await shot(page, testInfo, 'campaign-done');
    await checkLayouts(page, 'campaign page');

    await page.getByRole('link', { name: 'Campaigns', exact: true }).click();
    await expect(page.locator(`tr[data-campaign="${uuid}"]`)).toContainText('200 of 200 finished');
    await checkLayouts(page, 'campaign list');
  });
});

// The journeys' instance: mark manages tenant-blue, which leases some
// demo nodes; olga is a system admin.
test('a lessee manager rolls a runbook over its leased nodes; it waits for approval, then runs', async ({ page, browser, request }, testInfo) => {
  test.setTimeout(180_000);
  const api = await operatorAPI(browser, request, 'lessee campaign journey');
  await signIn(page, 'mark', 'manager-password-1');
  await page.goto('/nodes?lessee=tenant-blue');
  const total = Number((await page.getByTestId('range').textContent()).split(' of ')[1]);
  await page.getByTestId('select-all-matching').check();
  await page.getByRole('button', { name: 'Roll out runbook…' }).click();
  await page.getByLabel('Runbook').selectOption('CUSTOM_FIRMWARE_UPDATE');
  await expect(page.getByTestId('bulk-eligible')).toContainText(`of ${total} selected nodes are eligible`);
  const eligible = Number((await page.getByTestId('bulk-eligible').textContent()).split(' ')[0]);
  expect(eligible).toBeGreaterThan(0);
  await page.getByLabel('Name', { exact: true }).fill('tenant-blue firmware');
  await page.getByLabel('Wait for approval before starting').check();
  page.once('dialog', (d) => d.accept());
  await page.getByTestId('bulk-run').click();
  await expect(page).toHaveURL(/\/campaigns\/[0-9a-f-]{36}$/);
  const uuid = new URL(page.url()).pathname.split('/').pop();

  // It waits: nothing runs until someone approves.
  await expect(page.getByTestId('campaign-state')).toContainText('waiting for approval');
  await expect(page.getByTestId('awaiting-approval')).toBeVisible();
  let c = await api('GET', `/v1/campaigns/${uuid}`);
  expect(c.state).toBe('pending_approval');
  expect(c.owner).toBe('tenant-blue');
  expect(c.requires_approval).toBe(true);
  expect(c.counts.pending).toBe(eligible);
  expect(c.counts.skipped).toBe(total - eligible);
  await shot(page, testInfo, 'campaign-pending-approval');
  await checkLayouts(page, 'campaign awaiting approval');

  // The operator approves it from its page.
  const ctx = await browser.newContext();
  const olga = await ctx.newPage();
  await signIn(olga, 'olga', 'operator-password-1');
  await olga.goto(`/campaigns/${uuid}`);
  await olga.getByRole('button', { name: 'Approve' }).click();
  await expect(olga.locator('p.flash')).toHaveText('Approved.');
  await ctx.close();

  // The manager's page, still open, follows it to the end.
  await expect(page.getByTestId('campaign-state')).toContainText('completed', { timeout: 120_000 });
  await expect(page.locator('#campaign-live[hx-trigger]')).toHaveCount(0, { timeout: 10_000 });
  c = await api('GET', `/v1/campaigns/${uuid}`);
  expect(c.state).toBe('completed');
  expect(c.approved_by).toBe('olga');
  expect(c.counts).toEqual({ pending: 0, running: 0, succeeded: eligible, failed: 0, skipped: total - eligible });
  await expect(page.locator('tr[data-status="succeeded"]')).toHaveCount(eligible);
  await checkLayouts(page, 'lessee campaign completed');
});
