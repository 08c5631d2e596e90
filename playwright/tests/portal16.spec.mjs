import { test, expect } from '@playwright/test';
import { operatorAPI, ports, signIn } from './helpers.mjs';

test('disabled actions say why: an available node\'s runbooks, a reader\'s power buttons', async ({ page }) => {
  await signIn(page, 'olga', 'operator-password-1');
  // The demo makes every eighth node from the fifth available.
  await page.getByRole('link', { name: 'demo-00005', exact: true }).click();
  await expect(page.getByTestId('provision-state')).toHaveText('available');
  await expect(page.getByRole('heading', { name: 'Runbooks for this node' })).toBeVisible();
  // The runbooks matching its traits fold into one line with the reason,
  // each listed inside with it, none with a Run button.
  await expect(page.getByTestId('runbooks-cannot').locator('summary')).toHaveText(
    /^\d+ runbooks? you cannot run here now: Runbooks run on manageable or active nodes; this node is available\.$/);
  await expect(page.locator('div.runbook button')).toHaveCount(0);
  await expect(page.getByTestId('run-why').first()).toContainText('this node is available');
  await expect(page.getByRole('button', { name: 'Start cleaning' })).toHaveCount(0);
  await expect(page.getByTestId('steps-why')).toHaveText('Explicit steps run on manageable nodes; this node is available.');
  await page.getByRole('button', { name: 'Sign out' }).click();

  // tina only reads tenant-green: one line says she cannot change the
  // power, and opens to name the rule.
  await signIn(page, 'tina', 'tenant-password-1');
  await page.getByLabel('Acting on').selectOption('project:tenant-green');
  // The switch reloads the list; a click before that lands on a tenant-blue node.
  await expect(page.getByTestId('who')).toHaveText('tina · project tenant-green');
  await page.locator('table.nodes tbody tr a').first().click();
  await expect(page.getByTestId('power-why')).toContainText('tenant-green');
  await expect(page.getByTestId('power-why')).toContainText('by rule baremetal:node:set_power_state');
  await expect(page.getByTestId('power-why').locator('summary')).toHaveText('You cannot change this node\'s power.');
  for (const name of ['Power on', 'Power off', 'Reboot']) {
    await expect(page.getByRole('button', { name })).toHaveCount(0);
  }
});

test('a tenant gets the HTML not-allowed page for an operator\'s page', async ({ page }) => {
  await signIn(page, 'tina', 'tenant-password-1');
  const res = await page.goto('/admin/users');
  expect(res.status()).toBe(403);
  await expect(page.getByRole('heading', { level: 1 })).toHaveText('Not allowed');
  await expect(page.locator('.error-page')).toContainText('anvil:user:list');
  await expect(page.getByTestId('who')).toHaveText('tina · project tenant-blue');
  await expect(page.getByRole('link', { name: 'Back to your nodes' })).toBeVisible();
});

test('a session that ends mid-poll sends the page to sign-in, and back after it', async ({ page, browser }) => {
  await signIn(page, 'olga', 'operator-password-1');
  await page.locator('table.nodes tbody tr a').nth(1).click();
  const nodeURL = new URL(page.url()).pathname;
  // Explicit steps are folded below the node's main tasks.
  await page.locator('#more-steps > summary').click();
  await page.getByLabel('Steps (JSON list, run in order)').fill('[{"interface":"deploy","step":"wait","args":{"seconds":20}}]');
  await page.getByRole('button', { name: 'Start cleaning' }).click();
  await expect(page.getByTestId('current-step')).toHaveText('deploy.wait');
  // Signed out elsewhere (another browser holding the same session).
  const cookies = await page.context().cookies();
  const other = await browser.newContext();
  await other.addCookies(cookies);
  const tab = await other.newPage();
  await tab.goto('/nodes');
  await tab.getByRole('button', { name: 'Sign out' }).click();
  await other.close();
  // The next poll takes the whole page to the sign-in form.
  await expect(page).toHaveURL(/\/login\?/, { timeout: 10_000 });
  expect(new URL(page.url()).searchParams.get('next')).toBe(nodeURL);
  await expect(page.getByRole('alert')).toContainText('Your session expired');
  await page.getByLabel('Username').fill('olga');
  await page.getByLabel('Password').fill('operator-password-1');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page).toHaveURL(new RegExp(`${nodeURL}$`));
  await expect(page.getByTestId('provision-state')).toHaveText('manageable', { timeout: 30_000 });
});

test('an operator creates a user, grants, resets the password, revokes and deletes it', async ({ page, browser }) => {
  await signIn(page, 'olga', 'operator-password-1');
  await page.getByRole('link', { name: 'Users' }).click();
  await page.getByLabel('User name').fill('newbie');
  await page.getByLabel('Password (at least 12 characters)').fill('newbie-password-1');
  await page.getByRole('button', { name: 'Create user' }).click();
  await expect(page.getByRole('status')).toContainText('User created.');
  const row = page.locator('tr[data-user="newbie"]');
  await expect(row).toContainText('no roles');
  // Each row's forms are behind its Manage.
  await row.locator('summary').click();
  await page.getByLabel('Scope for newbie').fill('tenant-blue');
  await page.getByLabel('Role for newbie').selectOption('member');
  await row.getByRole('button', { name: 'Grant' }).click();
  await expect(page.getByRole('status')).toContainText('Role granted.');
  await expect(row).toContainText('member on project tenant-blue');

  await row.locator('summary').click();
  await page.getByLabel('New password for newbie').fill('newbie-password-2');
  page.once('dialog', (d) => d.accept());
  await row.getByRole('button', { name: 'Reset password' }).click();
  await expect(page.getByRole('status')).toContainText('Password reset');
  // The new password works.
  const ctx = await browser.newContext();
  const nb = await ctx.newPage();
  await signIn(nb, 'newbie', 'newbie-password-2');
  await expect(nb.getByTestId('who')).toHaveText('newbie · project tenant-blue');
  await ctx.close();

  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Revoke member on project tenant-blue from newbie' }).click();
  await expect(page.getByRole('status')).toContainText('Role revoked');
  await expect(row).toContainText('no roles');
  await row.locator('summary').click();
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Delete user newbie' }).click();
  await expect(page.getByRole('status')).toContainText('User deleted.');
  await expect(row).toHaveCount(0);
});

test('an operator creates a public runbook in one step', async ({ page }) => {
  await signIn(page, 'olga', 'operator-password-1');
  await page.getByRole('link', { name: 'Runbooks' }).click();
  await page.getByRole('link', { name: 'New runbook' }).click();
  await page.getByLabel('Name (a trait: nodes need it to run this runbook)').fill('CUSTOM_PUBLIC_ONE');
  await page.getByLabel('Step 1', { exact: true }).selectOption('power.power_off');
  await page.getByLabel('Public (every project may run it; clears the owner)').check();
  await page.getByRole('button', { name: 'Save runbook' }).click();
  await expect(page).toHaveURL(/\/runbooks\?saved=/);
  await expect(page.getByRole('status')).toContainText('Saved CUSTOM_PUBLIC_ONE: public — every project');
  await expect(page.locator('tr[data-runbook="CUSTOM_PUBLIC_ONE"] td').nth(1)).toHaveText('public');
});

test('a run on a dead BMC fails with a plain summary; abort, return to manageable and Retry recover the node', async ({ page, browser, request }) => {
  test.setTimeout(120_000);
  const api = await operatorAPI(browser, request, 'dead BMC journey');
  // Enrolled and managed on the redfish-sim serve.sh starts (system 1,
  // which the hardware journey, run before this file, is done with); then
  // its BMC address goes to a closed loopback port: a BMC that does not
  // answer. Redfish rather than ipmi: manage checks the BMC first, and
  // serve.sh starts no IPMI simulator.
  const good = {
    redfish_address: `https://127.0.0.1:${ports.sim}`, redfish_system_id: '/redfish/v1/Systems/1',
    redfish_username: 'admin', redfish_password: 'password', redfish_verify_ca: false,
  };
  const node = await api('POST', '/v1/nodes', { name: 'dead-bmc-1', driver: 'redfish', driver_info: good });
  await api('PUT', `/v1/nodes/${node.uuid}/states/provision`, { target: 'manage' });
  await expect.poll(async () => (await api('GET', `/v1/nodes/${node.uuid}`)).provision_state, { timeout: 30_000 }).toBe('manageable');

  await signIn(page, 'olga', 'operator-password-1');
  await page.goto(`/nodes/${node.uuid}`);
  // Abort while in progress: a long wait, aborted from the Recovery section.
  // Explicit steps are folded below the node's main tasks.
  await page.locator('#more-steps > summary').click();
  await page.getByLabel('Steps (JSON list, run in order)').fill('[{"interface":"deploy","step":"wait","args":{"seconds":60}}]');
  await page.getByRole('button', { name: 'Start cleaning' }).click();
  await expect(page.getByTestId('current-step')).toHaveText('deploy.wait');
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Abort the run' }).click();
  await expect(page.getByTestId('provision-state')).toHaveText('clean failed', { timeout: 15_000 });
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Return to manageable' }).click();
  await expect(page.getByTestId('provision-state')).toHaveText('manageable', { timeout: 30_000 });

  // Now the BMC dies and a run needs it.
  // The password goes with the address: Anvil refuses an address change
  // that would carry the stored one elsewhere.
  await api('PATCH', `/v1/nodes/${node.uuid}`, [{ op: 'replace', path: '/driver_info/redfish_address', value: 'https://127.0.0.1:1' },
    { op: 'replace', path: '/driver_info/redfish_password', value: good.redfish_password }]);
  await page.reload();
  // Explicit steps are folded below the node's main tasks.
  await page.locator('#more-steps > summary').click();
  await page.getByLabel('Steps (JSON list, run in order)').fill('[{"interface":"power","step":"power_on"}]');
  await page.getByRole('button', { name: 'Start cleaning' }).click();
  await expect(page.getByTestId('provision-state')).toHaveText('clean failed', { timeout: 90_000 });
  // Nothing listens there, so the summary claims no wait, only the tries:
  // serve.sh keeps the default one retry.
  await expect(page.getByTestId('error-summary')).toHaveText('The BMC at this node could not be reached (2 tries).');
  await expect(page.getByTestId('last-error')).toContainText('use “Retry” under Recovery to run it again, or “Return to manageable”');
  const details = page.getByTestId('last-error').locator('details');
  await expect(details.locator('pre')).toBeHidden();
  await details.locator('summary').click();
  await expect(details.locator('pre')).toBeVisible();

  // The BMC is back; Retry returns the node to manageable and runs the
  // failed steps again, asking first what it will run.
  await api('PATCH', `/v1/nodes/${node.uuid}`, [{ op: 'replace', path: '/driver_info/redfish_address', value: good.redfish_address },
    { op: 'replace', path: '/driver_info/redfish_password', value: good.redfish_password }]);
  let asked = '';
  page.once('dialog', async (d) => { asked = d.message(); await d.accept(); });
  await page.getByRole('button', { name: 'Retry', exact: true }).click();
  await expect.poll(() => asked).toBe('Retry on dead-bmc-1: run the steps power.power_on again?');
  await expect(page.getByTestId('provision-state')).toHaveText('manageable', { timeout: 30_000 });
  await expect(page.locator('table.history tbody tr').first()).toContainText('All 1 clean steps done; node is manageable');
});
