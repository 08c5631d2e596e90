import { test, expect } from '@playwright/test';
import { signIn } from './helpers.mjs';

// tenant-blue leases four free demo nodes (serve.sh, 40 nodes): two
// baremetal-large (demo-00005, demo-00029) and two baremetal-small.
test('a tenant requests a node, finds it in My allocations and releases it', async ({ page }) => {
  test.setTimeout(60_000);
  await signIn(page, 'tina', 'tenant-password-1');
  await page.getByRole('link', { name: 'Request a node' }).click();
  await expect(page.getByRole('link', { name: 'Request a node' })).toHaveAttribute('aria-current', 'page');
  const rc = page.getByLabel('Resource class');
  await expect(rc.locator('option')).toHaveText(['baremetal-large (2 available)', 'baremetal-small (2 available)']);
  await rc.selectOption('baremetal-small');
  await expect(page.getByLabel('CUSTOM_DEMO (2 available)')).toBeVisible();
  await rc.selectOption('baremetal-large');
  await page.getByLabel('CUSTOM_FIRMWARE_UPDATE (2 available)').check();
  await page.getByRole('button', { name: 'Request' }).click();

  // The node page says once who holds it; a reload asks nothing again.
  await expect(page).toHaveURL(/\/nodes\/[0-9a-f-]{36}$/);
  const flash = page.locator('main .flash');
  await expect(flash).toHaveText(/^demo-000(05|29) reserved for project tenant-blue\.$/);
  const node = (await flash.textContent()).split(' ')[0];
  await page.reload();
  await expect(page.locator('main .flash')).toHaveCount(0);

  await page.getByRole('link', { name: 'My allocations' }).click();
  await expect(page.getByRole('link', { name: 'My allocations' })).toHaveAttribute('aria-current', 'page');
  const row = page.locator(`tr[data-node="${node}"]`);
  await expect(row).toHaveCount(1);
  await expect(row.getByTestId('state-badge')).toContainText('active');
  await expect(row.locator('td[data-label="Created"] time')).toHaveAttribute('datetime', /Z$/);

  // Release asks first, naming the node; dismissing keeps it.
  let asked = '';
  page.once('dialog', (d) => { asked = d.message(); d.dismiss(); });
  await row.getByRole('button', { name: `Release ${node}` }).click();
  expect(asked).toBe(`Release ${node}? It goes back to the free nodes, and project tenant-blue no longer holds it.`);
  await expect(row).toHaveCount(1);
  page.once('dialog', (d) => d.accept());
  await row.getByRole('button', { name: `Release ${node}` }).click();
  await expect(page.locator('main .flash')).toHaveText(`Released ${node}.`);
  await expect(row).toHaveCount(0);
  await page.goto('/allocations/new');
  await expect(page.getByLabel('Resource class').locator('option').first()).toHaveText('baremetal-large (2 available)');
});
