import { test, expect } from '@playwright/test';
import { ipmiConsoleNode, operatorAPI, signIn, watchCSP } from './helpers.mjs';

test('the portal works under its Content-Security-Policy without a violation', async ({ page }) => {
  const noViolations = await watchCSP(page);
  const resp = await page.goto('/login');
  expect(resp.headers()['content-security-policy']).toContain("frame-ancestors 'none'");
  expect(resp.headers()['x-frame-options']).toBe('DENY');
  await signIn(page, 'tina', 'tenant-password-1');
  await noViolations();

  // The project switcher submits itself from static/anvil.js: a change
  // made before the script has run goes unseen (CI's first run of this
  // journey on a busy machine), so each page has loaded it first.
  await page.waitForLoadState('load');
  await page.getByLabel('Acting on').selectOption('project:tenant-green');
  await expect(page.getByTestId('who')).toHaveText('tina · project tenant-green');
  await page.waitForLoadState('load');
  await page.getByLabel('Acting on').selectOption('project:tenant-blue');
  await expect(page.getByTestId('who')).toHaveText('tina · project tenant-blue');
  await noViolations();

  // htmx posts and swaps: a power action, then the polling status section.
  await page.locator('table.nodes tbody tr a').first().click();
  await page.getByRole('button', { name: 'Power on' }).click();
  await expect(page.getByTestId('power-state')).toHaveText('power on', { timeout: 10_000 });
  await noViolations();

  // An htmx form with a confirmation: mint and revoke a token.
  await page.getByRole('link', { name: 'API tokens' }).click();
  await page.getByLabel('Description').fill('csp');
  await page.getByRole('button', { name: 'Create token' }).click();
  await expect(page.getByTestId('new-token')).toHaveText(/^anvil_/);
  page.once('dialog', (d) => d.accept());
  const row = page.locator('tr', { hasText: 'csp' });
  await row.getByRole('button', { name: 'Revoke' }).click();
  await expect(row.locator('td').nth(6)).toHaveText('revoked');
  await page.getByRole('link', { name: 'Runbooks' }).click();
  await expect(page.locator('h1')).toHaveText('Runbooks');
  await noViolations();
});

test('the admin console works under the Content-Security-Policy', async ({ page }) => {
  const noViolations = await watchCSP(page);
  await signIn(page, 'olga', 'operator-password-1');
  await page.getByRole('link', { name: 'Policy' }).click();
  await expect(page.locator('table.matrix')).toBeVisible();
  await page.getByRole('link', { name: 'Runbooks' }).click();
  await page.goto('/runbooks/new');
  await noViolations();
});

// xterm.js would inject <style> elements; anvil.js gives their rules to an
// adopted stylesheet instead, so the console page keeps the policy.
test('the serial console page works under the Content-Security-Policy', async ({ page, browser, request }) => {
  test.setTimeout(90_000);
  const api = await operatorAPI(browser, request, 'csp console');
  const id = await ipmiConsoleNode(api, 'csp-console');
  try {
    await api('PUT', `/v1/nodes/${id}/states/console`, { enabled: true });
    await expect.poll(async () => (await api('GET', `/v1/nodes/${id}`)).console_enabled).toBe(true);
    const noViolations = await watchCSP(page);
    await signIn(page, 'olga', 'operator-password-1');
    await page.goto(`/nodes/${id}/console`);
    await expect(page.getByTestId('console-status')).toHaveText(/^Connected/, { timeout: 15_000 });
    await expect(page.locator('.console-screen .xterm-rows')).toBeVisible();
    // The adopted rules are in force: xterm's rows are laid out in cells.
    expect(await page.evaluate(() => document.adoptedStyleSheets.length)).toBeGreaterThan(0);
    await noViolations();
    await page.goto(`/nodes/${id}`);
    await page.getByRole('button', { name: 'Open console' }).click();
    await expect(page.getByTestId('console-status')).toHaveText(/^Connected/, { timeout: 15_000 });
    await noViolations();
  } finally {
    await api('PUT', `/v1/nodes/${id}/states/console`, { enabled: false });
    await expect.poll(async () => (await api('GET', `/v1/nodes/${id}`)).console_enabled).toBe(false);
    await api('DELETE', `/v1/nodes/${id}`);
  }
});
