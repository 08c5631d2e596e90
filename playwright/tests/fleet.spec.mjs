import { test, expect } from '@playwright/test';
import { accessible, shot, signIn } from './helpers.mjs';

// The demo fleet (serve.sh): 40 nodes, owners hw-east/hw-west/hw-lab in
// turn, every eighth node from the fifth available, the rest manageable.
test('an operator filters, sorts and pages the node list, and the URL keeps it all', async ({ page }) => {
  test.setTimeout(90_000);
  await signIn(page, 'olga', 'operator-password-1');
  await expect(page.getByTestId('range')).toHaveText('1–40 of 40');
  await expect(page.getByTestId('summary-all')).toContainText('40');

  // A smaller page: numbered range, Next and Previous.
  await page.getByLabel('Per page').selectOption('25');
  await expect(page).toHaveURL(/size=25/);
  await expect(page.getByTestId('range')).toHaveText('1–25 of 40');
  await page.getByRole('link', { name: 'Next →' }).click();
  await expect(page.getByTestId('range')).toHaveText('26–40 of 40');
  await expect(page.locator('table.nodes tbody tr')).toHaveCount(15);
  await page.getByRole('link', { name: '← Previous' }).click();
  await expect(page.getByTestId('range')).toHaveText('1–25 of 40');

  // Filter by owner: the list, the count and the summary strip follow.
  await page.getByLabel('Owner').selectOption('hw-east');
  await expect(page).toHaveURL(/owner=hw-east/);
  await expect(page.getByTestId('range')).toHaveText('1–14 of 14');
  for (const owner of await page.locator('table.nodes tbody td[data-label="Lease"] .owner').allTextContents()) {
    expect(owner).toBe('hw-east');
  }
  // Sort by name, then reverse it.
  await page.locator('th a[data-sort="name"]').click();
  await expect(page.locator('th[aria-sort="descending"]')).toContainText('Name');
  await expect(page.locator('table.nodes tbody tr').first()).toContainText('demo-00040');

  // The summary strip filters by state; a reload keeps every choice.
  await page.locator('nav.summary a[data-state="available"]').click();
  await expect(page).toHaveURL(/state=available/);
  for (const s of await page.locator('table.nodes tbody [data-testid="state-badge"]').allTextContents()) {
    expect(s.trim()).toContain('available');
  }
  const filtered = await page.getByTestId('range').textContent();
  await page.reload();
  await expect(page.getByTestId('range')).toHaveText(filtered);
  await expect(page.getByLabel('Owner')).toHaveValue('hw-east');
  await expect(page.getByLabel('Provision state', { exact: true })).toHaveValue('available');

  // Search by name.
  await page.goto('/nodes');
  await page.getByLabel('Name or UUID').fill('demo-0001');
  await expect(page.getByTestId('range')).toHaveText('1–10 of 10');
  await expect(page).toHaveURL(/q=demo-0001/);
});

test('a tenant rolls a runbook out on every node it leases; the ineligible ones are explained first', async ({ page }, testInfo) => {
  test.setTimeout(90_000);
  await signIn(page, 'tina', 'tenant-password-1');
  const total = await page.locator('table.nodes tbody tr').count();
  await page.getByTestId('select-all-matching').check();
  await page.getByRole('button', { name: 'Roll out runbook…' }).click();
  await expect(page.getByRole('heading', { level: 1 })).toHaveText('Run a runbook on the selected nodes');
  await expect(page.getByTestId('bulk-selected')).toHaveText(`${total} nodes selected.`);
  // Choosing the runbook shows who is eligible and why the others are not.
  await page.getByLabel('Runbook').selectOption('CUSTOM_FIRMWARE_UPDATE');
  await expect(page.getByTestId('bulk-eligible')).toContainText(`of ${total} selected nodes are eligible`);
  await expect(page.getByTestId('bulk-reasons')).toContainText('Runbooks run on manageable or active nodes; this node is available.');
  await accessible(page, 'bulk eligibility');
  await shot(page, testInfo, 'bulk-eligibility');
  const eligible = Number((await page.getByTestId('bulk-eligible').textContent()).split(' ')[0]);
  expect(eligible).toBeGreaterThan(0);
  expect(eligible).toBeLessThan(total);

  // The run asks first, naming the nodes.
  let asked = '';
  page.once('dialog', (d) => { asked = d.message(); d.accept(); });
  await page.getByTestId('bulk-run').click();
  expect(asked).toContain(`Run CUSTOM_FIRMWARE_UPDATE on ${eligible} nodes: demo-`);
  // It is a campaign, with its own page that keeps every node's outcome.
  await expect(page).toHaveURL(/\/campaigns\/[0-9a-f-]{36}$/);
  await expect(page.locator('tr[data-status="skipped"]')).toHaveCount(total - eligible);
  await shot(page, testInfo, 'bulk-progress');
  await accessible(page, 'campaign from the bulk action');
  // The page follows every run to its end.
  await expect(page.locator('#campaign-live[hx-trigger]')).toHaveCount(0, { timeout: 60_000 });
  await expect(page.getByTestId('campaign-state')).toContainText('completed');
  await expect(page.locator('tr[data-status="succeeded"]')).toHaveCount(eligible);
  for (const row of await page.locator('tr[data-status="succeeded"]').all()) {
    await expect(row.getByTestId('state-badge')).toContainText('manageable');
  }
  // A reload shows the same outcomes, and runs nothing again.
  await page.reload();
  await expect(page.locator('tr[data-status="succeeded"]')).toHaveCount(eligible);
  await expect(page.locator('tr[data-status="skipped"]')).toHaveCount(total - eligible);
  await expect(page.locator('#campaign-live[hx-trigger]')).toHaveCount(0);
});

test('the node list fits 390 px as cards, and reads in the dark scheme', async ({ page }, testInfo) => {
  test.setTimeout(90_000);
  await signIn(page, 'olga', 'operator-password-1');
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto('/nodes');
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  expect(overflow).toBeLessThanOrEqual(0);
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.goto('/nodes');
  const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  expect(bg).toBe('rgb(13, 17, 23)');
  await shot(page, testInfo, 'nodes-dark');
  await accessible(page, 'nodes, dark');
  await page.goto('/nodes?failed=1&state=manageable&sort=owner&dir=desc');
  await accessible(page, 'filtered nodes, dark');
  await page.goto('/admin/users');
  await accessible(page, 'users, dark');
});
