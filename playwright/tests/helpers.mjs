import { expect } from '@playwright/test';

// signIn uses the local login form and waits for the nodes page.
export async function signIn(page, user, password) {
  await page.goto('/login');
  await page.getByLabel('Username').fill(user);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page).toHaveURL(/\/nodes$/);
}
