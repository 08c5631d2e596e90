import { test, expect } from '@playwright/test';
import { accessible, operatorAPI, ports, shot, signIn } from './helpers.mjs';

// checked runs axe and the sideways-scroll check at 1440 and 390 px, in
// light and dark, then puts the page back at 1440 light.
async function checked(page, name) {
  for (const [scheme, width] of [['light', 1440], ['light', 390], ['dark', 1440], ['dark', 390]]) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.setViewportSize({ width, height: 900 });
    await accessible(page, `${name}@${width}, ${scheme}`);
    const wide = await page.evaluate(() => document.scrollingElement.scrollWidth - window.innerWidth);
    expect(wide, `${name}: the page scrolls sideways at ${width}px, ${scheme}`).toBeLessThanOrEqual(0);
  }
  await page.emulateMedia({ colorScheme: 'light' });
  await page.setViewportSize({ width: 1440, height: 900 });
}

// Issue 44's third whole task, as its personas: a system admin enrols a
// Redfish node (serve.sh's redfish-sim, system 1) from one address URL
// after testing the connection; a system manager sees why they may not;
// a bulk CSV enrol dry-runs, then applies.
test('a system admin enrols a Redfish node from one address after Test connection', async ({ page, browser, request }, testInfo) => {
  test.setTimeout(120_000);
  const api = await operatorAPI(browser, request, 'enrol journey');
  await signIn(page, 'olga', 'operator-password-1');
  await page.getByTestId('enrol-link').click();
  await expect(page).toHaveURL(/\/nodes\/new$/);

  // Sent empty: every problem at once, in a summary that takes the focus
  // and links to each field.
  await page.getByRole('button', { name: 'Enrol', exact: true }).click();
  const summary = page.getByTestId('problems');
  await expect(summary).toBeFocused();
  await expect(summary).toContainText('BMC address: give the BMC\'s address');
  await summary.getByRole('link', { name: /^BMC address:/ }).click();
  await expect(page).toHaveURL(/#bmc_address$/);
  await checked(page, 'enrol form with a problem');

  await page.getByLabel('Name', { exact: true }).fill('enrol-rf-1');
  await page.getByLabel('BMC address').fill(`redfish://127.0.0.1:${ports.sim}/redfish/v1/Systems/1`);
  await page.getByLabel('User name').fill('admin');
  await expect(page.getByTestId('driver-said')).toHaveText('Driver: redfish');
  // The address's problem from the last try goes once it is fixed.
  await expect(page.getByTestId('problem-bmc_address')).toHaveCount(0);
  // Only the redfish driver's own field, no IPMI or bmclib ones.
  await expect(page.locator('#ipmi_port, #bmclib_provider, #bmclib_rpc_url')).toHaveCount(0);
  await page.getByLabel('Verify the certificate').fill('false');
  await page.getByLabel('Password', { exact: true }).fill('password');

  // Test connection: the answer is next to the button, and focused.
  await page.getByRole('button', { name: 'Test connection' }).click();
  const answer = page.getByTestId('enrol-test');
  await expect(answer).toHaveText(/^The BMC answered: the machine is powered (on|off)\. Anvil can reach it and log in\.$/);
  await expect(answer).toBeFocused();
  // Nothing was saved by the test, and the password is still typed.
  expect((await api('GET', '/v1/nodes?limit=1000')).nodes.map((n) => n.name)).not.toContain('enrol-rf-1');
  await expect(page.getByLabel('Password', { exact: true })).toHaveValue('password');
  await checked(page, 'enrol form after Test connection');
  await shot(page, testInfo, 'enrol-tested');

  await page.getByLabel('Boot MAC address').fill('52:54:00:e0:00:01');
  await page.getByLabel('Owner project').fill('hw-east');
  await page.getByRole('button', { name: 'Enrol', exact: true }).click();
  await expect(page).toHaveURL(/\/nodes\/[0-9a-f-]{36}\?ops=1$/);
  await expect(page.getByRole('status').first()).toContainText('Node enrol-rf-1 enrolled.');
  const node = await api('GET', '/v1/nodes/enrol-rf-1');
  expect(node.driver).toBe('redfish');
  expect(node.owner).toBe('hw-east');
  expect(node.driver_info.redfish_address).toBe(`https://127.0.0.1:${ports.sim}`);
  expect(node.driver_info.redfish_system_id).toBe('/redfish/v1/Systems/1');
  expect(node.driver_info.redfish_password).toBe('******');
  const portList = await api('GET', `/v1/ports?node=${node.uuid}&detail=true`);
  expect(portList.ports.map((p) => [p.address, p.pxe_enabled])).toEqual([['52:54:00:e0:00:01', true]]);
  await api('DELETE', `/v1/nodes/${node.uuid}`);
});

test('a system manager sees why they may not enrol', async ({ page }) => {
  await signIn(page, 'sam', 'sysmanager-password-1');
  const control = page.getByTestId('enrol-disabled');
  await expect(control).toBeDisabled();
  await expect(control).toHaveAccessibleDescription('Only system admins and project admins (nodes their project owns) may enrol nodes; you are system manager.');
  await expect(page.getByTestId('enrol-link')).toHaveCount(0);
  await checked(page, 'node list for a system manager');
});

test('a bulk CSV enrol dry-runs, then applies', async ({ page, browser, request }, testInfo) => {
  test.setTimeout(120_000);
  const api = await operatorAPI(browser, request, 'csv enrol journey');
  await signIn(page, 'olga', 'operator-password-1');
  await page.getByTestId('import-link').click();
  await expect(page).toHaveURL(/\/nodes\/import$/);
  await checked(page, 'CSV enrol form');
  const file = {
    name: 'nodes.csv', mimeType: 'text/csv',
    buffer: Buffer.from('name,bmc_address,username,password,boot_mac,owner,redfish_verify_ca\n'
      + `csv-rf-1,redfish://127.0.0.1:${ports.sim}/redfish/v1/Systems/1,admin,password,52:54:00:e1:00:01,hw-east,false\n`
      + 'csv-ipmi-1,ipmi://10.0.9.1:623,admin,password,52:54:00:e1:00:02,hw-east,\n'
      + 'csv-bad-1,10.0.9.2,admin,password,,hw-east,\n'),
  };
  await page.getByLabel('CSV file').setInputFiles(file);
  await page.getByRole('button', { name: 'Dry run' }).click();
  const rows = page.getByTestId('import-rows');
  await expect(page.getByRole('heading', { name: 'Dry run: 2 of 3 rows would be enrolled' })).toBeVisible();
  await expect(rows.getByRole('row', { name: /csv-rf-1/ })).toContainText('Would be created.');
  await expect(rows.getByRole('row', { name: /csv-ipmi-1/ })).toContainText('Would be created.');
  await expect(rows.getByRole('row', { name: /csv-bad-1/ })).toContainText('Refused: BMC address: start the address with the BMC\'s protocol');
  expect((await api('GET', '/v1/nodes?limit=1000')).nodes.map((n) => n.name)).not.toContain('csv-rf-1');
  await checked(page, 'CSV dry run');
  await shot(page, testInfo, 'enrol-csv-dry-run');

  // Anvil does not keep the file (it holds passwords): chosen again.
  await page.getByLabel('CSV file').setInputFiles(file);
  await page.getByRole('button', { name: 'Enrol', exact: true }).click();
  await expect(page.getByRole('heading', { name: '2 of 3 rows enrolled' })).toBeVisible();
  await expect(rows.getByRole('row', { name: /csv-bad-1/ })).toContainText('Refused');
  const made = [];
  for (const name of ['csv-rf-1', 'csv-ipmi-1']) {
    const n = await api('GET', `/v1/nodes/${name}`);
    await expect(rows.getByRole('link', { name })).toHaveAttribute('href', `/nodes/${n.uuid}`);
    made.push(n);
  }
  expect(made.map((n) => n.driver)).toEqual(['redfish', 'ipmi']);
  for (const n of made) await api('DELETE', `/v1/nodes/${n.uuid}`);
});
