import { test, expect } from '@playwright/test';
import fs from 'node:fs';
import path from 'node:path';
import { signIn } from './helpers.mjs';

const fixture = (name) => path.join(import.meta.dirname, '..', 'fixtures', name);

// accept answers the next confirmation dialog and returns its message.
function confirmNext(page) {
  return new Promise((resolve) => page.once('dialog', (d) => { resolve(d.message()); d.accept(); }));
}

test('an admin previews, applies, rolls back and reverts the policy, confirming each change', async ({ page }) => {
  test.setTimeout(60_000);
  await signIn(page, 'olga', 'operator-password-1');
  await page.getByRole('link', { name: 'Policy' }).click();
  await expect(page.getByRole('link', { name: 'Policy' })).toHaveAttribute('aria-current', 'page');
  const row = page.locator('tr[data-rule="baremetal:conductor:get"]');
  await expect(row.locator('td.allow')).toHaveCount(5);
  // Journeys before this one (the lessee-operates preset's) may have
  // stored revisions: the numbers here count on from theirs.
  const r0 = await page.locator('table[data-testid="revisions"] tbody tr').count();
  const [r1, r2, r3, r4] = [r0 + 1, r0 + 2, r0 + 3, r0 + 4];
  // Nothing can be applied before a preview.
  await expect(page.getByRole('button', { name: /^Apply/ })).toHaveCount(0);

  const zip = page.getByLabel('Zip of YAML files (folders are flattened; other files are ignored)');
  await zip.setInputFiles(fixture('broken-policy.zip'));
  await page.getByRole('button', { name: 'Preview' }).click();
  await expect(page.getByTestId('preview-error')).toContainText('baremetal:node:get');
  await expect(page.getByTestId('apply-previewed')).toHaveCount(0);

  await zip.setInputFiles(fixture('good-policy.zip'));
  await page.getByRole('button', { name: 'Preview' }).click();
  await expect(page.getByTestId('preview')).toContainText('baremetal:conductor:get');
  // Choosing another file after the preview changes nothing it applies.
  await zip.setInputFiles(fixture('broken-policy.zip'));
  let asked = confirmNext(page);
  await page.getByTestId('apply-previewed').click();
  expect(await asked).toMatch(new RegExp(`^Apply .+\\? It changes 1 effective rule\\(s\\), as revision ${r1}, and every replica applies it within 2 seconds\\.$`));
  await expect(page).toHaveURL(/\/admin\/policy$/);
  await expect(page.locator('main .flash')).toContainText(`Stored as revision ${r1};`);
  // What was stored is what was previewed, not the file chosen after.
  await expect(page.locator(`tr[data-revision="${r1}"] td[data-label="Files"]`)).toHaveText('10-conductors.yaml');
  await expect(page.locator(`tr[data-revision="${r1}"] td[data-label="Stored"] time`)).toHaveAttribute('datetime', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  await expect(page.getByTestId('policy-status')).toHaveText(/^PO: 1 file\(s\) in force/);
  await expect(row.locator('td.allow')).toHaveCount(1);
  await expect(page.locator(`tr[data-revision="${r1}"]`)).toContainText('in force');

  // Revert to defaults, then roll back to the applied revision, then revert again.
  asked = confirmNext(page);
  await page.getByRole('button', { name: 'Revert to defaults' }).click();
  expect(await asked).toMatch(new RegExp(`^Revert to the default policy\\? .+ is removed, as revision ${r2}; you can restore it from this list\\.$`));
  await expect(page.locator('main .flash')).toContainText(`Stored as revision ${r2} (revert to defaults)`);
  await expect(page.getByTestId('policy-status')).toHaveText('PO: no override files; defaults in force');
  await expect(row.locator('td.allow')).toHaveCount(5);

  asked = confirmNext(page);
  await page.getByRole('button', { name: `Restore revision ${r1}` }).click();
  expect(await asked).toMatch(new RegExp(`^Restore revision ${r1} \\(.+\\)\\? It is stored as revision ${r3}, and every replica applies it within 2 seconds\\.$`));
  await expect(page.locator('main .flash')).toContainText(`Stored as revision ${r3} (restore of revision ${r1})`);
  await expect(row.locator('td.allow')).toHaveCount(1);
  await expect(page.locator('table[data-testid="revisions"] tbody tr')).toHaveCount(r3);
  await page.reload();
  await expect(page.locator('main .flash')).toHaveCount(0);
  await expect(page.locator('table[data-testid="revisions"] tbody tr')).toHaveCount(r3);

  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Revert to defaults' }).click();
  await expect(page.locator('main .flash')).toContainText(`Stored as revision ${r4} (revert to defaults)`);
  await expect(row.locator('td.allow')).toHaveCount(5);
});

test('Apply stores only the upload previewed: a zip swapped into the form after the preview is refused', async ({ page }) => {
  await signIn(page, 'olga', 'operator-password-1');
  await page.goto('/admin/policy');
  const revisions = page.locator('table[data-testid="revisions"] tbody tr');
  const before = await revisions.count();
  const zip = page.getByLabel('Zip of YAML files (folders are flattened; other files are ignored)');
  await zip.setInputFiles(fixture('good-policy.zip'));
  await page.getByRole('button', { name: 'Preview' }).click();
  await expect(page.getByTestId('preview')).toContainText('baremetal:conductor:get');
  // A hostile page (or a hand-edited form) puts other bytes where the
  // previewed zip was, keeping the preview's signature.
  const other = fs.readFileSync(fixture('broken-policy.zip')).toString('base64');
  await page.evaluate((b64) => { document.querySelector('form[action="/admin/policy/apply"] input[name="zip"]').value = b64; }, other);
  page.once('dialog', (d) => d.accept());
  await page.getByTestId('apply-previewed').click();
  await expect(page.getByRole('alert')).toContainText('This upload was not previewed; upload it again');
  await page.goto('/admin/policy');
  await expect(revisions).toHaveCount(before);
  await expect(page.getByTestId('policy-page-status')).toHaveText(/^PO: /);
});

test('an admin previews the lessee-operates preset, applies it and reverts to the defaults', async ({ page }) => {
  test.setTimeout(60_000);
  await signIn(page, 'olga', 'operator-password-1');
  await page.goto('/admin/policy');
  const preset = page.getByTestId('preset-lessee-operates');
  await expect(preset.getByRole('heading', { name: 'Lessees operate their leased nodes' })).toBeVisible();
  const row = page.locator('tr[data-rule="baremetal:node:set_provision_state"]');
  const allowed = await row.locator('td.allow').count();

  await preset.getByRole('button', { name: 'See what this preset changes' }).click();
  await expect(page.getByTestId('preview-of')).toContainText('lessee-operates.yaml');
  await expect(page.getByTestId('preview')).toContainText('baremetal:node:set_provision_state: (default: "rule:system_or_owner_member_and_lessee_admin") -> "rule:system_or_owner_member_and_lessee_admin or rule:lessee_member"');
  await expect(page.getByTestId('preview-cross-project')).toHaveCount(0);
  page.once('dialog', (d) => d.accept());
  await page.getByTestId('apply-previewed').click();
  await expect(page.locator('main .flash')).toContainText(/Stored as revision \d+;/);
  // One more persona of the matrix may change the provision state: the lessee's member.
  await expect(row.locator('td.allow')).toHaveCount(allowed + 1);

  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Revert to defaults' }).click();
  await expect(page.locator('main .flash')).toContainText('(revert to defaults)');
  await expect(row.locator('td.allow')).toHaveCount(allowed);
});
