import { test, expect } from '@playwright/test';
import { signIn } from './helpers.mjs';

// Every Content-Security-Policy violation a page reports, collected by a
// listener the policy cannot block (Playwright injects it).
async function watchCSP(page) {
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));
  });
  const console = [];
  page.on('console', (m) => { if (/Content.Security.Policy/i.test(m.text())) console.push(m.text()); });
  return async () => {
    const seen = await page.evaluate(() => window.__csp);
    expect([...seen, ...console]).toEqual([]);
  };
}

test('the portal works under its Content-Security-Policy without a violation', async ({ page }) => {
  const noViolations = await watchCSP(page);
  const resp = await page.goto('/login');
  expect(resp.headers()['content-security-policy']).toContain("frame-ancestors 'none'");
  expect(resp.headers()['x-frame-options']).toBe('DENY');
  await signIn(page, 'tina', 'tenant-password-1');
  await noViolations();

  // The project switcher submits itself from static/anvil.js.
  await page.getByLabel('Acting on').selectOption('project:tenant-green');
  await expect(page.getByTestId('who')).toHaveText('tina · project tenant-green');
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
