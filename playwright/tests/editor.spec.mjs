import { test, expect } from '@playwright/test';
import { signIn } from './helpers.mjs';


test('a project manager writes a runbook in the step editor; an operator publishes it and re-leases a node', async ({ page }) => {
  await signIn(page, 'mark', 'manager-password-1');
  await page.getByRole('link', { name: 'Runbooks' }).click();
  await page.getByRole('link', { name: 'New runbook' }).click();
  await expect(page.getByText('Public (every project')).toHaveCount(0);
  await page.getByLabel('Name (a trait: nodes need it to run this runbook)').fill('custom blue fw');
  await page.getByLabel('Description').fill('Boot from the network, then power-cycle.');
  await page.getByLabel('Step 1', { exact: true }).selectOption('power.power_off');
  await expect(page.getByText('Power the node off.')).toBeVisible(); // the step's hint, from the server
  // Rows come and go through htmx; a new step's fields come from the catalogue.
  await page.getByRole('button', { name: 'Add step' }).click();
  await page.getByLabel('Step 2', { exact: true }).selectOption('management.set_boot_device');
  await expect(page.getByLabel('device of step 2 (required)')).toBeVisible();
  await expect(page.getByLabel('device of step 2 (required)').locator('option')).toContainText(['pxe', 'disk', 'cdrom']);
  await page.getByLabel('persistent of step 2').selectOption('false');
  await page.getByRole('button', { name: 'Add step' }).click();
  await page.getByLabel('Step 3', { exact: true }).selectOption('power.power_on');
  await expect(page.getByText('Power the node on.')).toBeVisible();
  // Reorder: the boot device first.
  await page.getByRole('button', { name: 'Move up step 2' }).click();
  await expect(page.getByLabel('Step 1', { exact: true })).toHaveValue('management.set_boot_device');
  await expect(page.getByLabel('Step 2', { exact: true })).toHaveValue('power.power_off');
  await expect(page.getByLabel('persistent of step 1')).toHaveValue('false');
  // A bad name and a missing required argument: both errors at once.
  await page.getByRole('button', { name: 'Save runbook' }).click();
  const summary = page.getByTestId('error-summary');
  await expect(summary).toHaveAttribute('role', 'alert');
  await expect(summary.locator('li')).toHaveCount(2);
  await expect(summary).toContainText('name "custom blue fw" must be 1 to 255 letters, digits');
  await expect(summary).toContainText('Step 1: step management.set_boot_device needs argument "device"');
  await expect(page.locator('tr[data-row="0"] .error')).toContainText('Step 1:');
  await expect(summary.getByRole('link', { name: /Step 1:/ })).toHaveAttribute('href', '#s0-a-device');
  await page.getByLabel('device of step 1 (required)').selectOption('pxe');
  await page.getByLabel('Name (a trait: nodes need it to run this runbook)').fill('CUSTOM_BLUE_FW');
  await page.getByRole('button', { name: 'Save runbook' }).click();
  await expect(page).toHaveURL(/\/runbooks\?saved=/);
  await expect(page.getByRole('status')).toContainText('Saved CUSTOM_BLUE_FW: private to project tenant-blue');
  const row = page.locator('tr[data-runbook="CUSTOM_BLUE_FW"]');
  await expect(row).toContainText('project tenant-blue');
  await expect(row.locator('ol.steps > li > code')).toHaveText(['management.set_boot_device', 'power.power_off', 'power.power_on']);
  await expect(row.locator('li[data-arg]')).toHaveText(['device: pxe', 'persistent: false']);
  await page.goto('/runbooks/CUSTOM_BLUE_FW/edit');
  await expect(page.getByLabel('Description')).toHaveValue('Boot from the network, then power-cycle.');
  await page.getByRole('button', { name: 'Sign out' }).click();

  await signIn(page, 'olga', 'operator-password-1');
  await page.goto('/runbooks/CUSTOM_BLUE_FW/edit');
  await page.getByLabel('Public (every project may run it; clears the owner)').check();
  await page.getByRole('button', { name: 'Save runbook' }).click();
  await expect(page.locator('tr[data-runbook="CUSTOM_BLUE_FW"] td').nth(1)).toHaveText('public');
  await expect(page.getByRole('status')).toContainText('public — every project');

  await page.getByRole('link', { name: 'Nodes' }).click();
  await page.locator('table.nodes tbody tr a').last().click();
  await page.locator('#more-tenancy > summary').click();
  await page.getByLabel('Lessee project (empty: not leased)').fill('tenant-gold');
  await page.getByRole('button', { name: 'Save owner and lessee' }).click();
  await expect(page.locator('dl.facts').first()).toContainText('tenant-gold');

  await page.getByRole('link', { name: 'API tokens' }).click();
  await page.getByLabel('Description').fill('operator automation');
  await page.getByRole('button', { name: 'Create token' }).click();
  await expect(page.getByTestId('new-token')).toContainText('anvil_');
  await expect(page.locator('tr', { hasText: 'operator automation' })).toContainText('system');
});

test('a project manager deletes a runbook after confirming', async ({ page }) => {
  await signIn(page, 'mark', 'manager-password-1');
  await page.goto('/runbooks/new');
  await page.getByLabel('Name (a trait: nodes need it to run this runbook)').fill('CUSTOM_SHORT_LIVED');
  await page.getByLabel('Step 1', { exact: true }).selectOption('deploy.wait');
  await page.getByLabel('seconds of step 1').fill('5');
  await page.getByRole('button', { name: 'Save runbook' }).click();
  await expect(page.locator('tr[data-runbook="CUSTOM_SHORT_LIVED"] ol.steps > li > code')).toHaveText(['deploy.wait']);
  await expect(page.locator('tr[data-runbook="CUSTOM_SHORT_LIVED"] li[data-arg]')).toHaveText(['seconds: 5']);
  await page.goto('/runbooks/CUSTOM_SHORT_LIVED/edit');
  // Dismissed: nothing happens.
  let asked = '';
  page.once('dialog', (d) => { asked = d.message(); d.dismiss(); });
  await page.getByRole('button', { name: 'Delete runbook' }).click();
  await expect.poll(() => asked).toContain('Delete runbook CUSTOM_SHORT_LIVED?');
  await expect(page).toHaveURL(/\/edit$/);
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Delete runbook' }).click();
  await expect(page).toHaveURL(/\/runbooks$/);
  await expect(page.getByRole('status')).toContainText('Deleted runbook CUSTOM_SHORT_LIVED.');
  await expect(page.locator('tr[data-runbook="CUSTOM_SHORT_LIVED"]')).toHaveCount(0);
});
