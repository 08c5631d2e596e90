import { test, expect } from '@playwright/test';
import { signIn } from './helpers.mjs';


test('a project manager writes a runbook in the step editor; an operator publishes it and re-leases a node', async ({ page }) => {
  await signIn(page, 'mark', 'manager-password-1');
  await page.getByRole('link', { name: 'Runbooks' }).click();
  await page.getByRole('link', { name: 'New runbook' }).click();
  await expect(page.getByText('Public (every project')).toHaveCount(0);
  await page.getByLabel('Name (a trait: nodes need it to run this runbook)').fill('CUSTOM_BLUE_FW');
  await page.getByLabel('Step 1', { exact: true }).selectOption('power.power_off');
  await page.getByLabel('Order of step 1').fill('1');
  await page.getByLabel('Step 2', { exact: true }).selectOption('management.set_boot_device');
  await page.getByLabel('Order of step 2').fill('2');
  await page.getByLabel('Arguments of step 2').fill('{"device": "floppy"}');
  await page.getByLabel('Step 3', { exact: true }).selectOption('power.power_on');
  await page.getByLabel('Order of step 3').fill('3');
  await page.getByRole('button', { name: 'Save runbook' }).click();
  // The error sits next to the step it is about.
  await expect(page.locator('tr[data-row="1"] .error')).toContainText('device');
  await page.getByLabel('Arguments of step 2').fill('{"device": "pxe"}');
  // Reorder: the boot device first.
  await page.getByLabel('Order of step 1').fill('2');
  await page.getByLabel('Order of step 2').fill('1');
  await page.getByRole('button', { name: 'Save runbook' }).click();
  await expect(page).toHaveURL(/\/runbooks\?saved=/);
  await expect(page.getByRole('status')).toContainText('Saved CUSTOM_BLUE_FW: private to project tenant-blue');
  const row = page.locator('tr[data-runbook="CUSTOM_BLUE_FW"]');
  await expect(row).toContainText('project tenant-blue');
  await expect(row.locator('li')).toHaveText(['management.set_boot_device (device=pxe)', 'power.power_off', 'power.power_on']);
  await page.getByRole('button', { name: 'Sign out' }).click();

  await signIn(page, 'olga', 'operator-password-1');
  await page.goto('/runbooks/CUSTOM_BLUE_FW/edit');
  await page.getByLabel('Public (every project may run it; clears the owner)').check();
  await page.getByRole('button', { name: 'Save runbook' }).click();
  await expect(page.locator('tr[data-runbook="CUSTOM_BLUE_FW"] td').nth(1)).toHaveText('public');
  await expect(page.getByRole('status')).toContainText('public — every project');

  await page.getByRole('link', { name: 'Nodes' }).click();
  await page.locator('table.nodes tbody tr a').last().click();
  await page.getByLabel('Lessee project (empty: not leased)').fill('tenant-gold');
  await page.getByRole('button', { name: 'Save owner and lessee' }).click();
  await expect(page.locator('dl.facts').first()).toContainText('tenant-gold');

  await page.getByRole('link', { name: 'API tokens' }).click();
  await page.getByLabel('Description').fill('operator automation');
  await page.getByRole('button', { name: 'Create token' }).click();
  await expect(page.getByTestId('new-token')).toContainText('anvil_');
  await expect(page.locator('tr', { hasText: 'operator automation' })).toContainText('system');
});
