import { test, expect } from '@playwright/test';
import { accessible, signIn } from './helpers.mjs';

test("an admin finds a tenant's API token among every user's and revokes it, confirming first", async ({ browser, page, request }) => {
  // tina mints a token in her own account page.
  const tctx = await browser.newContext();
  const tina = await tctx.newPage();
  await signIn(tina, 'tina', 'tenant-password-1');
  await tina.goto('/account');
  await tina.getByRole('checkbox', { name: 'member' }).check();
  await tina.getByLabel('Description').fill('admin-spec runner');
  await tina.getByRole('button', { name: 'Create token' }).click();
  const secret = await tina.getByTestId('new-token').textContent();
  await tctx.close();
  const asTina = { 'X-Auth-Token': secret, 'X-OpenStack-Ironic-API-Version': 'latest' };
  expect((await request.get('/v1/nodes', { headers: asTina })).status()).toBe(200);

  await signIn(page, 'olga', 'operator-password-1');
  await page.goto('/admin/users');
  await page.getByRole('link', { name: 'API tokens of every user' }).click();
  await expect(page).toHaveURL(/\/admin\/tokens$/);
  const row = page.locator('tr[data-user="tina"]', { hasText: 'admin-spec runner' });
  await expect(row).toHaveCount(1);
  await expect(row.locator('td[data-label="Scope"]')).toHaveText('project tenant-blue');
  await expect(row.locator('td[data-label="Roles"]')).toHaveText(/^member\b/);
  const roles = await row.locator('td[data-label="Roles"]').textContent();
  await expect(row.locator('td[data-label="State"]')).toHaveText('active');
  await expect(row.locator('td[data-label="Created"] time')).toHaveAttribute('datetime', /Z$/);
  await expect(page.locator('main')).not.toContainText(secret);
  await accessible(page, 'admin tokens');

  // Dismissing the confirmation keeps the token; accepting revokes it.
  let asked = '';
  page.once('dialog', (d) => { asked = d.message(); d.dismiss(); });
  await row.getByRole('button', { name: "Revoke tina's token on project tenant-blue" }).click();
  expect(asked).toBe(`Revoke tina's token (admin-spec runner) on project tenant-blue with roles ${roles}? Whatever uses it stops working at once.`);
  await expect(row.locator('td[data-label="State"]')).toHaveText('active');
  page.once('dialog', (d) => d.accept());
  await row.getByRole('button', { name: "Revoke tina's token on project tenant-blue" }).click();
  await expect(page.locator('main .flash')).toHaveText("Revoked tina's token on project tenant-blue; it no longer authenticates.");
  await expect(row.locator('td[data-label="State"]')).toHaveText('revoked');
  await expect(row.getByRole('button')).toHaveCount(0);
  expect((await request.get('/v1/nodes', { headers: asTina })).status()).toBe(401);
});
