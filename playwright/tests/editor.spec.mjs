import { test, expect } from '@playwright/test';
import { accessible, operatorAPI, signIn } from './helpers.mjs';


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

// The RAID builder of raid.apply_configuration: two logical disks built
// field by field (htmx swaps the rows), one refused by name, then saved;
// the API shows exactly the configuration built. The runbook is deleted
// again, so no other journey sees it.
test('a project manager builds a two-disk RAID configuration in the runbook editor', async ({ page, browser, request }) => {
  test.setTimeout(90_000);
  await signIn(page, 'mark', 'manager-password-1');
  await page.goto('/runbooks/new');
  await page.getByLabel('Name (a trait: nodes need it to run this runbook)').fill('CUSTOM_RAID_TWO');
  await page.getByLabel('Step 1', { exact: true }).selectOption('raid.apply_configuration');
  const builder = page.getByTestId('builder-0');
  await expect(builder).toContainText('raid_config has no logical disk yet');
  const add = page.getByRole('button', { name: 'Add logical disk to raid_config of step 1' });

  await builder.getByLabel('size_gb (GiB, or MAX)').fill('100');
  await builder.getByLabel('raid_level').selectOption('1');
  await builder.getByLabel('volume_name (optional)').fill('os');
  await builder.getByLabel('is_root_volume').check();
  await add.click();
  await expect(page.getByTestId('disks-0').locator('li')).toHaveCount(1);

  await builder.getByLabel('size_gb (GiB, or MAX)').fill('MAX');
  await builder.getByLabel('raid_level').selectOption('5');
  await builder.getByLabel('controller (optional; needed with physical_disks)').fill('RAID.Integrated.1-1');
  await builder.getByLabel('physical_disks (optional, comma-separated drive names)').fill('Disk.0, Disk.1, Disk.2');
  await builder.getByLabel('number_of_physical_disks (optional)').fill('3');
  await builder.getByLabel('disk_type').selectOption('ssd');
  await builder.getByLabel('interface_type').selectOption('sas');
  await builder.getByLabel('share_physical_disks').check();
  await add.click();
  await expect(page.getByTestId('disks-0').locator('li')).toHaveCount(2);
  await expect(page.getByTestId('disks-0').locator('li').nth(1)).toContainText('RAID 5, MAX');

  // A third disk without a RAID level: refused by its place, nothing added.
  await builder.getByLabel('size_gb (GiB, or MAX)').fill('10');
  await add.click();
  await expect(page.getByTestId('builder-error-0')).toContainText('logical_disks[2].raid_level must be one of JBOD');
  await expect(builder.getByLabel('raid_level')).toHaveAttribute('aria-invalid', 'true');
  await expect(builder.getByLabel('size_gb (GiB, or MAX)')).toHaveValue('10');
  await expect(page.getByTestId('disks-0').locator('li')).toHaveCount(2);
  await accessible(page, 'RAID builder');
  // Added, then removed again.
  await builder.getByLabel('raid_level').selectOption('JBOD');
  await add.click();
  await expect(page.getByTestId('disks-0').locator('li')).toHaveCount(3);
  await page.getByRole('button', { name: 'Remove logical disk 3 of step 1' }).click();
  await expect(page.getByTestId('disks-0').locator('li')).toHaveCount(2);

  await page.getByLabel('delete_existing of step 1').selectOption('false');
  await page.getByRole('button', { name: 'Save runbook' }).click();
  await expect(page).toHaveURL(/\/runbooks\?saved=/);

  const api = await operatorAPI(browser, request, 'raid builder journey');
  const rb = await api('GET', '/v1/runbooks/CUSTOM_RAID_TWO');
  expect(rb.steps).toHaveLength(1);
  expect(rb.steps[0].interface + '.' + rb.steps[0].step).toBe('raid.apply_configuration');
  expect(rb.steps[0].args).toEqual({
    delete_existing: false,
    raid_config: {
      logical_disks: [
        { size_gb: 100, raid_level: '1', volume_name: 'os', is_root_volume: true },
        { size_gb: 'MAX', raid_level: '5', controller: 'RAID.Integrated.1-1', physical_disks: ['Disk.0', 'Disk.1', 'Disk.2'],
          number_of_physical_disks: 3, disk_type: 'ssd', interface_type: 'sas', share_physical_disks: true },
      ],
    },
  });
  await api('DELETE', '/v1/runbooks/CUSTOM_RAID_TWO');
});
