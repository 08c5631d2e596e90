import { test, expect } from '@playwright/test';
import path from 'node:path';
import { signIn } from './helpers.mjs';

test('an admin uploads a broken policy, sees PO (broken), then a good one and sees the matrix change', async ({ page }) => {
  await signIn(page, 'olga', 'operator-password-1');
  await page.getByRole('link', { name: 'Policy' }).click();
  const row = page.locator('tr[data-rule="baremetal:conductor:get"]');
  await expect(row.locator('td.allow')).toHaveCount(5);

  const zip = page.getByLabel('Zip of YAML files (folders are flattened; other files are ignored)');
  await zip.setInputFiles(path.join(import.meta.dirname, '..', 'fixtures', 'broken-policy.zip'));
  await page.getByRole('button', { name: 'Apply' }).click();
  await expect(page.getByTestId('preview-error')).toContainText('baremetal:node:get');
  await expect(page.getByTestId('policy-status')).toContainText('PO (broken): ');

  await zip.setInputFiles(path.join(import.meta.dirname, '..', 'fixtures', 'good-policy.zip'));
  await page.getByRole('button', { name: 'Preview' }).click();
  await expect(page.getByTestId('preview')).toContainText('baremetal:conductor:get');
  await zip.setInputFiles(path.join(import.meta.dirname, '..', 'fixtures', 'good-policy.zip'));
  await page.getByRole('button', { name: 'Apply' }).click();
  await expect(page.getByTestId('applied')).toContainText('Stored as revision');
  await expect(page.getByTestId('policy-status')).toHaveText(/^PO: 1 file\(s\) in force/);
  await expect(row.locator('td.allow')).toHaveCount(1);
});
