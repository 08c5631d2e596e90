import { test, expect } from '@playwright/test';
import { accessible, operatorAPI, ports, signIn } from './helpers.mjs';

// The redfish-sim serve.sh starts: system 1 is the node's BMC.
const bmc = {
  redfish_address: `https://127.0.0.1:${ports.sim}`, redfish_system_id: '/redfish/v1/Systems/1',
  redfish_username: 'admin', redfish_password: 'password', redfish_verify_ca: false,
};

async function settled(api, id) {
  await expect.poll(async () => (await api('GET', `/v1/nodes/${id}`)).provision_state, { timeout: 30_000 }).toBe('manageable');
}

test('a tenant runs a BIOS runbook on a leased Redfish node and sees the new settings current', async ({ page, browser, request }) => {
  test.setTimeout(120_000);
  // The operator enrols a node on the simulated BMC, leases it to
  // tenant-blue and inspects it (which caches its BIOS and firmware); the
  // demo's public CUSTOM_BIOS_PERF runbook tunes its BIOS for performance.
  const api = await operatorAPI(browser, request, 'hardware journey');
  const node = await api('POST', '/v1/nodes', {
    name: 'sim-bios-1', driver: 'redfish', driver_info: bmc, owner: 'hw-east', lessee: 'tenant-blue', resource_class: 'baremetal-large',
  });
  await api('PUT', `/v1/nodes/${node.uuid}/traits/CUSTOM_BIOS_PERF`);
  await api('PUT', `/v1/nodes/${node.uuid}/states/provision`, { target: 'manage' });
  await settled(api, node.uuid);
  await api('PUT', `/v1/nodes/${node.uuid}/states/provision`, { target: 'inspect' });
  await settled(api, node.uuid);
  // The tenant finds the node in its list and opens it.
  await signIn(page, 'tina', 'tenant-password-1');
  await page.getByRole('link', { name: 'sim-bios-1' }).click();
  const hw = page.locator('section#hardware');
  // The Hardware section is folded below the node's main tasks.
  await page.locator('#more-hardware > summary').click();
  await expect(hw.getByRole('heading', { name: 'Hardware', exact: true })).toBeVisible();
  const bios = (name) => hw.locator(`tr[data-setting="${name}"]`);
  await expect(bios('SysProfile').getByTestId('bios-current')).toHaveText('PerfPerWattOptimizedDapc');
  await expect(bios('ProcCStates').getByTestId('bios-current')).toHaveText('Enabled');
  await expect(bios('SysProfile').getByTestId('bios-pending')).toHaveText('');
  await expect(hw.locator('tr[data-component="bios"] td').first()).toHaveText('1.0.0');
  // Inspection's inventory is the owner's to read, as in Ironic; the
  // lessee is told why it sees none.
  await expect(hw.getByTestId('inventory-why')).toContainText('may not read the hardware inventory.');
  // The rule that refused is there for whoever opens its Details.
  await expect(hw.getByTestId('inventory-why').locator('details.rule code')).toHaveText('baremetal:node:inventory:get');

  // The page with its Hardware section passes axe in both schemes.
  await accessible(page, 'node with hardware, light');
  await page.emulateMedia({ colorScheme: 'dark' });
  await accessible(page, 'node with hardware, dark');
  await page.emulateMedia({ colorScheme: 'light' });

  // Run the runbook and watch it to the end, without reloading.
  await page.locator('div.runbook[data-runbook="CUSTOM_BIOS_PERF"] summary').click();
  await expect(page.locator('details[open] ol.steps > li > code')).toHaveText(['bios.apply_configuration']);
  await expect(page.locator('details[open] li[data-arg="settings"] li')).toHaveText(['name: SysProfile, value: PerfOptimized', 'name: ProcTurboMode, value: Enabled', 'name: ProcCStates, value: Disabled']);
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Run CUSTOM_BIOS_PERF (clean)' }).click();
  await expect(page.getByTestId('provision-state')).toContainText('clean');
  await expect(page.getByTestId('provision-state')).toHaveText('manageable', { timeout: 60_000 });
  await expect(page.getByTestId('run-result')).toHaveText('Runbook CUSTOM_BIOS_PERF succeeded.');

  // The BMC took the settings at the reboot; the section shows them
  // current, nothing left pending.
  await expect(bios('SysProfile').getByTestId('bios-current')).toHaveText('PerfOptimized');
  await expect(bios('ProcCStates').getByTestId('bios-current')).toHaveText('Disabled');
  await expect(hw.getByTestId('bios-pending').filter({ hasText: /\S/ })).toHaveCount(0);
  // History names the runbook and who ran it.
  const run = page.locator('table.history tbody tr', { hasText: 'Runbook CUSTOM_BIOS_PERF, run by tina' });
  await expect(run).toHaveCount(1);
  await expect(run.locator('td').nth(3)).toHaveText('tina');

  // And after a reload too: it is what Anvil stored, not what htmx left.
  await page.reload();
  await expect(bios('SysProfile').getByTestId('bios-current')).toHaveText('PerfOptimized');
  await accessible(page, 'node after the BIOS run, light');
  await page.emulateMedia({ colorScheme: 'dark' });
  await accessible(page, 'node after the BIOS run, dark');
});
