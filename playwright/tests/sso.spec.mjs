import { test, expect } from '@playwright/test';
import { ports } from './helpers.mjs';

test('sign in through the OpenID provider, land in the project the groups claim grants, sign out', async ({ page }) => {
  await page.goto('/login');
  await page.getByRole('link', { name: 'Sign in with SSO' }).click();
  await expect(page).toHaveURL(new RegExp(`127\\.0\\.0\\.1:${ports.op}/login`));
  await page.locator('input[name="username"]').fill('test-user@127.0.0.1');
  await page.locator('input[name="password"]').fill('verysecure');
  await page.locator('button[type="submit"], input[type="submit"]').first().click();
  await expect(page).toHaveURL(new RegExp(`127\\.0\\.0\\.1:${ports.anvil}/nodes$`));
  await expect(page.getByTestId('who')).toHaveText('test-user@127.0.0.1 · project tenant-blue');
  for (const lessee of await page.locator('table.nodes tbody tr td[data-label="Lessee"]').allTextContents()) {
    expect(lessee).toBe('tenant-blue');
  }
  await page.getByRole('button', { name: 'Sign out' }).click();
  await expect(page).toHaveURL(/\/login(\?.*)?$/);
  await page.goto('/nodes');
  await expect(page).toHaveURL(/\/login(\?.*)?$/);
});
