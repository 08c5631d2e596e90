import { test, expect } from '@playwright/test';
import { ports, signIn } from './helpers.mjs';

// The second instance (playwright.config.mjs): 500 demo nodes. Node i
// (from 0, named demo-%05d of i+1) is owned by hw-east when i % 3 is 0
// (167 nodes) and available when i % 8 is 4; both: i % 24 is 12 (21 nodes).
test.use({ baseURL: `http://127.0.0.1:${ports.fleet}` });

test('an operator filters, sorts and pages a 500-node list', async ({ page }) => {
  test.setTimeout(90_000);
  await signIn(page, 'olga', 'operator-password-1');
  await expect(page.getByTestId('range')).toHaveText('1–50 of 500');
  await expect(page.locator('table.nodes tbody tr')).toHaveCount(50);
  await expect(page.getByTestId('summary-all')).toContainText('500');

  await page.getByLabel('Owner').selectOption('hw-east');
  await expect(page).toHaveURL(/owner=hw-east/);
  await expect(page.getByTestId('range')).toHaveText('1–50 of 167');

  // Name, descending: hw-east's last node first, then 50 further on.
  await page.locator('th a[data-sort="name"]').click();
  await expect(page.locator('th[aria-sort="descending"]')).toContainText('Name');
  await expect(page.locator('table.nodes tbody tr').first()).toContainText('demo-00499');
  await page.getByRole('link', { name: 'Next →' }).click();
  await expect(page.getByTestId('range')).toHaveText('51–100 of 167');
  await expect(page.locator('table.nodes tbody tr').first()).toContainText('demo-00349');
  for (const owner of await page.locator('table.nodes tbody td[data-label="Lease"] .owner').allTextContents()) {
    expect(owner).toBe('hw-east');
  }

  // A bigger page starts again at the first; the last page is short and
  // has no Next.
  await page.getByLabel('Per page').selectOption('100');
  await expect(page).toHaveURL(/size=100/);
  await expect(page.getByTestId('range')).toHaveText('1–100 of 167');
  await page.getByRole('link', { name: 'Next →' }).click();
  await expect(page.getByTestId('range')).toHaveText('101–167 of 167');
  await expect(page.locator('table.nodes tbody tr')).toHaveCount(67);
  await expect(page.getByRole('link', { name: 'Next →' })).toHaveCount(0);
  await expect(page.locator('table.nodes tbody tr').last()).toContainText('demo-00001');

  // The summary strip narrows to available; a reload keeps every choice.
  await page.locator('nav.summary a[data-state="available"]').click();
  await expect(page).toHaveURL(/state=available/);
  await expect(page.getByTestId('range')).toHaveText('1–21 of 21');
  for (const s of await page.locator('table.nodes tbody [data-testid="state-badge"]').allTextContents()) {
    expect(s.trim()).toContain('available');
  }
  await page.reload();
  await expect(page.getByTestId('range')).toHaveText('1–21 of 21');
  await expect(page.getByLabel('Owner')).toHaveValue('hw-east');
  await expect(page.locator('th[aria-sort="descending"]')).toContainText('Name');
  await expect(page.locator('table.nodes tbody tr').first()).toContainText('demo-00493');
});
