import { test, expect } from '@playwright/test';

async function signIn(page, user, password) {
  await page.goto('/');
  await expect(page).toHaveURL(/\/login(\?.*)?$/);
  await page.getByLabel('Username').fill(user);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

test('a wrong password gets the generic message and no session', async ({ page }) => {
  await signIn(page, 'tina', 'not-the-password');
  await expect(page.getByRole('alert')).toHaveText('invalid username or password');
  await page.goto('/nodes');
  await expect(page).toHaveURL(/\/login(\?.*)?$/);
});

test('a tenant sees only its project\'s nodes, switches project, and signs out', async ({ page }) => {
  await signIn(page, 'tina', 'tenant-password-1');
  await expect(page).toHaveURL(/\/nodes$/);
  await expect(page.getByTestId('who')).toHaveText('tina · project tenant-blue');
  const rows = page.locator('table.nodes tbody tr');
  await expect(rows.first()).toBeVisible();
  // Every row is a node tenant-blue leases; demo nodes are never owned by tenants.
  for (const lessee of await rows.locator('td[data-label="Lessee"]').allTextContents()) {
    expect(lessee).toBe('tenant-blue');
  }
  await page.getByLabel('Acting on').selectOption('project:tenant-green');
  await expect(page.getByTestId('who')).toHaveText('tina · project tenant-green');
  for (const lessee of await rows.locator('td[data-label="Lessee"]').allTextContents()) {
    expect(lessee).toBe('tenant-green');
  }
  await page.getByRole('button', { name: 'Sign out' }).click();
  await expect(page).toHaveURL(/\/login(\?.*)?$/);
  await page.goto('/account');
  await expect(page).toHaveURL(/\/login(\?.*)?$/);
});

test('an API token made in the portal works once shown and stops when revoked', async ({ page, request }) => {
  await signIn(page, 'tina', 'tenant-password-1');
  await page.getByRole('link', { name: 'API tokens' }).click();
  await page.getByLabel('Description').fill('playwright');
  await page.getByRole('button', { name: 'Create token' }).click();
  const secret = await page.getByTestId('new-token').textContent();
  expect(secret).toMatch(/^anvil_/);

  const list = await request.get('/v1/nodes', { headers: { 'X-Auth-Token': secret, 'X-OpenStack-Ironic-API-Version': 'latest' } });
  expect(list.status()).toBe(200);
  const nodes = (await list.json()).nodes;
  expect(nodes.length).toBeGreaterThan(0);

  page.once('dialog', (d) => d.accept());
  const row = page.locator('tr', { hasText: 'playwright' });
  await row.getByRole('button', { name: 'Revoke' }).click();
  await expect(row.locator('td').nth(6)).toHaveText('revoked');
  const after = await request.get('/v1/nodes', { headers: { 'X-Auth-Token': secret } });
  expect(after.status()).toBe(401);
});

test('a form posted without its CSRF token is refused', async ({ page, request }) => {
  await signIn(page, 'olga', 'operator-password-1');
  await expect(page.getByTestId('who')).toHaveText('olga · system');
  const cookies = await page.context().cookies();
  const session = cookies.find((c) => c.name === 'anvil_session');
  const res = await request.post('/account/tokens', {
    headers: { Cookie: `anvil_session=${session.value}` },
    form: { roles: 'reader' },
  });
  expect(res.status()).toBe(403);
});

test('a tenant gets the not-found page for another project\'s node, by direct URL', async ({ page }) => {
  // An operator finds a node no tenant-blue/green project owns or leases.
  await signIn(page, 'olga', 'operator-password-1');
  const rows = page.locator('table.nodes tbody tr');
  // count() does not wait: read the rows only once the list is there.
  await expect(rows.first()).toBeVisible();
  let foreign = null;
  for (let i = 0; i < await rows.count() && !foreign; i++) {
    // The Lease cell reads "owner → lessee"; a node leased to nobody has no lessee part.
    const cell = rows.nth(i).locator('td[data-label="Lease"] .lessee');
    const lessee = (await cell.count()) ? (await cell.textContent()).trim() : '';
    if (lessee !== 'tenant-blue' && lessee !== 'tenant-green') {
      foreign = await rows.nth(i).locator('a').getAttribute('href');
    }
  }
  expect(foreign).not.toBeNull();
  await page.getByRole('button', { name: 'Sign out' }).click();

  await signIn(page, 'tina', 'tenant-password-1');
  const res = await page.goto(foreign);
  expect(res.status()).toBe(404);
  await expect(page.getByRole('heading', { level: 1 })).toHaveText('Not found');
  await expect(page.locator('.error-page')).toContainText('could not be found');
  // A URL the portal does not have is an HTML page too, not JSON.
  const missing = await page.goto('/no-such-page');
  expect(missing.status()).toBe(404);
  await expect(page.getByRole('heading', { level: 1 })).toHaveText('Not found');
});
