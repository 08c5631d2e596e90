import { test, expect } from '@playwright/test';
import { ports, signIn } from './helpers.mjs';


test('a tenant runs the public firmware runbook on a leased node and sees it complete', async ({ page }) => {
  await signIn(page, 'tina', 'tenant-password-1');
  await page.getByRole('link', { name: 'Runbooks' }).click();
  await expect(page.locator('tr[data-runbook="CUSTOM_FIRMWARE_UPDATE"]')).toContainText('public');
  await expect(page.locator('tr[data-runbook="CUSTOM_DEMO"]')).toContainText('project tenant-blue');

  await page.getByRole('link', { name: 'Nodes' }).click();
  const links = page.locator('table.nodes tbody tr a');
  const count = await links.count();
  let found = false;
  for (let i = 0; i < count && !found; i++) {
    await links.nth(i).click();
    if (await page.locator('div.runbook[data-runbook="CUSTOM_FIRMWARE_UPDATE"] summary').count() > 0) {
      found = true;
      break;
    }
    await page.goBack();
  }
  expect(found).toBe(true);
  await page.locator('div.runbook[data-runbook="CUSTOM_FIRMWARE_UPDATE"] summary').click();
  await expect(page.locator('details[open] ol.steps > li > code')).toHaveText(['firmware.update', 'deploy.wait', 'power.reboot']);
  await expect(page.locator('details[open] li[data-arg="settings"] li')).toHaveText([`component: bios, url: http://127.0.0.1:${ports.anvil}/firmware/8601a73eea75330719f9ec3eb4384e6307bea3da8d099bdc0074f27da07adafa/demo-bios-1.1.0.bin`]);
  await expect(page.locator('details[open] li[data-arg="seconds"]')).toHaveText('seconds: 3');
  // Run asks first; cancelling starts nothing.
  let asked = '';
  page.once('dialog', async (d) => { asked = d.message(); await d.dismiss(); });
  await page.getByRole('button', { name: 'Run CUSTOM_FIRMWARE_UPDATE (clean)' }).click();
  await expect.poll(() => asked).toMatch(/^Run CUSTOM_FIRMWARE_UPDATE on demo-\d+\? /);
  await expect(page.getByTestId('provision-state')).toHaveText('manageable');
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Run CUSTOM_FIRMWARE_UPDATE (clean)' }).click();
  await expect(page.getByTestId('provision-state')).toContainText('clean');
  // The lessee sees progress too, though not driver_internal_info itself.
  await expect(page.getByTestId('step-counter')).toHaveText('Step 2 of 3');
  await expect(page.getByTestId('provision-state')).toHaveText('manageable', { timeout: 20_000 });
  await expect(page.getByTestId('run-result')).toHaveText('Runbook CUSTOM_FIRMWARE_UPDATE succeeded.');
  // History groups the run's events under one header; its end is there.
  await expect(page.locator('table.history').first()).toContainText('All 3 clean steps done');
});

test('the run-a-runbook flow works from the keyboard alone', async ({ page }) => {
  await page.goto('/login');
  await page.getByLabel('Username').focus();
  await page.keyboard.type('tina');
  await page.keyboard.press('Tab');
  await page.keyboard.type('tenant-password-1');
  await page.keyboard.press('Enter');
  await expect(page).toHaveURL(/\/nodes$/);
  // Walk the node links with Tab until a node page offers the firmware runbook.
  const links = page.locator('table.nodes tbody tr a');
  for (let i = 0; i < await links.count(); i++) {
    await links.nth(i).focus();
    await page.keyboard.press('Enter');
    await page.waitForURL(/\/nodes\/[0-9a-f-]{36}$/);
    await expect(page.getByTestId('provision-state')).toBeVisible();
    const summary = page.locator('div.runbook[data-runbook="CUSTOM_FIRMWARE_UPDATE"] summary');
    if (await summary.count() > 0) {
      await summary.focus();
      await page.keyboard.press('Enter');
      await page.getByRole('button', { name: 'Run CUSTOM_FIRMWARE_UPDATE (clean)' }).focus();
      page.once('dialog', (d) => d.accept());
      await page.keyboard.press('Enter');
      // The page may still show an earlier run's outcome on this node:
      // wait for this run to start, then for its own outcome.
      await expect(page.getByTestId('provision-state')).toContainText('clean');
      await expect(page.getByTestId('provision-state')).toHaveText('manageable', { timeout: 30_000 });
      await expect(page.getByTestId('run-result')).toHaveText('Runbook CUSTOM_FIRMWARE_UPDATE succeeded.');
      // History groups the run's events under one header; its end is there.
      await expect(page.locator('table.history').first()).toContainText('All 3 clean steps done');
      return;
    }
    await page.goBack();
    await page.waitForURL(/\/nodes$/);
  }
  throw new Error('no leased node offered the firmware runbook');
});
