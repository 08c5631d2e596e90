import { test, expect } from '@playwright/test';
import { accessible, operatorAPI, ports, shot, signIn } from './helpers.mjs';

// The redfish-sim serve.sh starts: system 1 becomes the enrolled node's BMC.
const sim = `https://127.0.0.1:${ports.sim}`;

// simPower reads the system's power state from the simulator itself, not
// through Anvil.
async function simPower(request) {
  const res = await request.get(`${sim}/redfish/v1/Systems/1`, {
    ignoreHTTPSErrors: true, headers: { Authorization: `Basic ${Buffer.from('admin:password').toString('base64')}` },
  });
  expect(res.status()).toBe(200);
  return (await res.json()).PowerState;
}

// checked runs axe on the page at both widths in both schemes.
async function checked(page, name) {
  for (const [scheme, width] of [['light', 1440], ['light', 390], ['dark', 1440], ['dark', 390]]) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.setViewportSize({ width, height: 900 });
    await accessible(page, `${name}@${width}, ${scheme}`);
    const over = await page.evaluate(() => Math.max(0, ...[...document.querySelectorAll('main > :not(table):not(.scroll):not(section), header')]
      .map((e) => e.getBoundingClientRect().right)) - window.innerWidth);
    expect(over, `${name}: something overflows at ${width}px, ${scheme}`).toBeLessThanOrEqual(1);
  }
  await page.emulateMedia({ colorScheme: 'light' });
  await page.setViewportSize({ width: 1440, height: 900 });
}

test('an operator enrols a Redfish node, tests its BMC, manages it, toggles maintenance, adds a trait and deletes it, all in the portal', async ({ page, browser, request }, testInfo) => {
  test.setTimeout(180_000);
  const api = await operatorAPI(browser, request, 'operator journey');
  await signIn(page, 'olga', 'operator-password-1');

  // Enrol from the node list.
  await page.getByTestId('enrol-link').click();
  await expect(page).toHaveURL(/\/nodes\/new$/);
  await checked(page, 'enrol form');
  await page.getByLabel('Name', { exact: true }).fill('ops-rf-1');
  await page.getByLabel('BMC address').fill(`redfish://127.0.0.1:${ports.sim}/redfish/v1/Systems/1`);
  await page.getByLabel('User name').fill('admin');
  // The address's scheme brings the redfish driver's own field.
  await expect(page.getByTestId('driver-said')).toHaveText('Driver: redfish');
  await page.locator('#redfish_verify_ca').fill('false');
  await page.getByLabel('Password', { exact: true }).fill('password');
  await page.getByLabel('Resource class').fill('baremetal-ops');
  await page.getByLabel('Owner project').fill('hw-east');
  await page.getByLabel('Boot MAC address').fill('52:54:00:0a:00:01');
  await shot(page, testInfo, 'enrol-form');
  await page.getByRole('button', { name: 'Enrol', exact: true }).click();
  await expect(page).toHaveURL(/\/nodes\/[0-9a-f-]{36}\?ops=1$/);
  await expect(page.getByRole('status').first()).toContainText('Node ops-rf-1 enrolled.');
  const node = await api('GET', '/v1/nodes/ops-rf-1');
  expect(node.driver).toBe('redfish');
  expect(node.resource_class).toBe('baremetal-ops');
  expect(node.owner).toBe('hw-east');
  expect(node.driver_info.redfish_address).toBe(sim);
  expect(node.driver_info.redfish_password).toBe('******');
  expect(node.driver_info.redfish_verify_ca).toBe(false);
  const portList = await api('GET', `/v1/ports?node=${node.uuid}`);
  expect(portList.ports.map((p) => p.address)).toEqual(['52:54:00:0a:00:01']);
  // The password is never put back into the page.
  await expect(page.locator('#redfish_password')).toHaveValue('');
  await expect(page.locator('#redfish_password-help')).toHaveText('A password is stored; it is never shown. Leave empty to keep it.');

  // Test connection: the page says what the BMC answered, which is what
  // the simulator holds.
  await page.getByRole('button', { name: 'Test connection' }).click();
  const power = await simPower(request);
  await expect(page.getByTestId('bmc-test')).toHaveText(`The BMC answered: the node is powered ${power.toLowerCase()}. Anvil can reach it and log in.`);
  await checked(page, 'node with operator actions');
  await shot(page, testInfo, 'operator-actions', { fullPage: true });

  // Manage: the BMC is checked and the node becomes manageable.
  await page.getByRole('button', { name: 'Manage (check the BMC)' }).click();
  await expect(page.getByRole('status').first()).toContainText('Manage started on ops-rf-1');
  await expect.poll(async () => (await api('GET', `/v1/nodes/${node.uuid}`)).provision_state, { timeout: 30_000 }).toBe('manageable');

  // Maintenance on, with a reason, then off.
  await page.getByLabel('Reason (shown to everyone who sees the node)').fill('replacing a DIMM');
  await page.getByRole('button', { name: 'Put in maintenance' }).click();
  await expect(page.getByRole('status').first()).toContainText('ops-rf-1 is in maintenance');
  let n = await api('GET', `/v1/nodes/${node.uuid}`);
  expect(n.maintenance).toBe(true);
  expect(n.maintenance_reason).toBe('replacing a DIMM');
  await page.getByRole('button', { name: 'End maintenance' }).click();
  await expect(page.getByRole('status').first()).toContainText('Maintenance of ops-rf-1 ended.');
  n = await api('GET', `/v1/nodes/${node.uuid}`);
  expect(n.maintenance).toBe(false);
  expect(n.maintenance_reason).toBeNull();

  // A trait.
  await page.getByLabel('Add a trait (for example CUSTOM_GPU)').fill('CUSTOM_OPS_JOURNEY');
  await page.getByRole('button', { name: 'Add trait' }).click();
  await expect(page.getByTestId('operator-traits')).toContainText('CUSTOM_OPS_JOURNEY');
  expect((await api('GET', `/v1/nodes/${node.uuid}/traits`)).traits).toEqual(['CUSTOM_OPS_JOURNEY']);

  // Delete, asked first.
  await page.getByRole('button', { name: 'Delete this node…' }).click();
  await expect(page.getByTestId('confirm-delete')).toContainText('Delete ops-rf-1?');
  expect((await api('GET', `/v1/nodes/${node.uuid}`)).uuid).toBe(node.uuid);
  await page.getByRole('button', { name: 'Delete the node' }).click();
  await expect(page).toHaveURL(/\/nodes$/);
  await expect(page.getByRole('status').first()).toContainText('Node ops-rf-1 deleted.');
  const all = await api('GET', '/v1/nodes?limit=1000');
  expect(all.nodes.map((x) => x.uuid)).not.toContain(node.uuid);
});

test('an operator enrols a bmclib rpc node from its webhook URL: the form shows only rpc\'s own fields, and only those are saved', async ({ page, browser, request }) => {
  const api = await operatorAPI(browser, request, 'bmclib enrol journey');
  await signIn(page, 'olga', 'operator-password-1');
  await page.goto('/nodes/new');
  await page.getByLabel('Name', { exact: true }).fill('ops-bl-1');
  // The scheme picks bmclib and its provider; rpc's fields replace the
  // redfish ones, and no port or BMC login is asked.
  await page.getByLabel('BMC address').fill('bmclib+rpc+http://127.0.0.1:9/bmc');
  await page.getByLabel('BMC address').press('Tab');
  await expect(page.getByTestId('driver-said')).toHaveText('Driver: bmclib, provider rpc');
  await expect(page.locator('#bmclib_port')).toHaveCount(0);
  await page.getByLabel('Machine name (told to the webhook)').fill('rack1-node7');
  await page.getByLabel('Password', { exact: true }).fill('journey-rpc-secret');
  await checked(page, 'enrol form, bmclib rpc');
  await page.getByRole('button', { name: 'Enrol', exact: true }).click();
  await expect(page).toHaveURL(/\/nodes\/[0-9a-f-]{36}\?ops=1$/);
  const node = await api('GET', '/v1/nodes/ops-bl-1');
  expect(node.driver).toBe('bmclib');
  expect(node.driver_info.bmclib_provider).toBe('rpc');
  expect(node.driver_info.bmclib_rpc_url).toBe('http://127.0.0.1:9/bmc');
  expect(node.driver_info.bmclib_rpc_secret).toBe('******');
  expect(node.driver_info.bmclib_port).toBeUndefined();
  expect(node.driver_info.bmclib_address).toBe('rack1-node7');
  // The node page: rpc chosen, its fields shown, the secret never.
  await expect(page.locator('#bmclib_provider')).toHaveValue('rpc');
  await expect(page.locator('#bmclib_rpc_url')).toHaveValue('http://127.0.0.1:9/bmc');
  await expect(page.locator('#bmclib_rpc_secret')).toHaveValue('');
  await expect(page.locator('#bmclib_port')).toBeHidden();
  await expect(page.locator('#bmclib_address')).toHaveValue('rack1-node7');
  await api('DELETE', `/v1/nodes/${node.uuid}`);
});
