import { test, expect } from '@playwright/test';
import { operatorAPI, signIn } from './helpers.mjs';

// A member of the owning project sets the lessee (and may not set the
// owner), picking from the projects the field suggests and warned of a
// name nothing uses; the operator then clears the owner, asked first.
test('an owner member leases a node out with suggestions and a warning; clearing the owner asks first', async ({ page, browser, request }) => {
  const api = await operatorAPI(browser, request, 'tenancy journey');
  const node = await api('POST', '/v1/nodes', { name: 'np-tenancy-1', driver: 'fake', owner: 'hw-east', lessee: 'tenant-green' });

  // olga makes nell a member of hw-east.
  await signIn(page, 'olga', 'operator-password-1');
  await page.getByRole('link', { name: 'Users' }).click();
  await page.getByLabel('User name').fill('nell');
  await page.getByLabel('Password (at least 12 characters)').fill('nell-password-1');
  await page.getByRole('button', { name: 'Create user' }).click();
  await expect(page.getByRole('status')).toContainText('User created.');
  await page.locator('tr[data-user="nell"] summary').click();
  await page.getByLabel('Scope for nell').fill('hw-east');
  await page.getByLabel('Role for nell').selectOption('member');
  await page.locator('tr[data-user="nell"]').getByRole('button', { name: 'Grant' }).click();
  await expect(page.getByRole('status')).toContainText('Role granted.');
  await page.getByRole('button', { name: 'Sign out' }).click();

  await signIn(page, 'nell', 'nell-password-1');
  await page.goto(`/nodes/${node.uuid}`);
  // The owner and lessee form is folded below the node's main tasks.
  const openTenancy = () => page.locator('#more-tenancy > summary').click();
  await openTenancy();
  await expect(page.locator('[data-copy]')).toHaveAttribute('data-copy', node.uuid);
  const owner = page.getByLabel('Owner project');
  const lessee = page.getByLabel('Lessee project (empty: not leased)');
  await expect(owner).toBeDisabled();
  await expect(page.getByTestId('owner-why')).toContainText(
    'Not available: your role (member of hw-east) may not change the owner.');
  await expect(page.getByTestId('owner-why').locator('details.rule code')).toHaveText('baremetal:node:update:owner');
  await expect(lessee).toBeEnabled();
  await expect(lessee).toHaveAttribute('list', 'known-projects');
  await expect(page.locator('#known-projects option[value="tenant-green"]')).toHaveCount(1);
  await expect(page.locator('#known-projects option[value="hw-east"]')).toHaveCount(1);

  // A misspelt project is warned of while typing; a known one is not.
  await lessee.fill('tenant-bleu');
  await expect(page.getByTestId('tenancy-warning')).toHaveText('No node or user you can see is in project tenant-bleu yet — check the spelling.');
  await lessee.fill('tenant-blue');
  await expect(page.getByTestId('tenancy-warning')).toHaveCount(0);
  await page.getByRole('button', { name: 'Save owner and lessee' }).click();
  await expect(page.getByRole('status')).toHaveText('Lessee of np-tenancy-1 set to tenant-blue.');
  await expect(page.locator('dl.facts').first()).toContainText('tenant-blue');
  const latest = page.locator('table.history tbody tr').first();
  await expect(latest).toContainText('Lessee changed: tenant-green → tenant-blue');
  await expect(latest).toContainText('nell');
  await page.getByRole('button', { name: 'Sign out' }).click();

  // The operator clears the owner: the page asks, naming the node and the
  // lessee that keeps its lease; cancelling changes nothing.
  await signIn(page, 'olga', 'operator-password-1');
  await page.goto(`/nodes/${node.uuid}`);
  await openTenancy();
  await page.getByLabel('Owner project').fill('');
  await page.getByRole('button', { name: 'Save owner and lessee' }).click();
  await expect(page.getByTestId('confirm-clear')).toContainText('Clear the owner of np-tenancy-1? Its lessee tenant-blue keeps its lease.');
  await page.getByTestId('confirm-clear').getByRole('link', { name: 'Cancel' }).click();
  await expect(page.getByLabel('Owner project')).toHaveValue('hw-east');
  await openTenancy();
  await page.getByLabel('Owner project').fill('');
  await page.getByRole('button', { name: 'Save owner and lessee' }).click();
  await page.getByRole('button', { name: 'Clear the owner' }).click();
  await expect(page.getByRole('status')).toHaveText('Owner of np-tenancy-1 cleared.');
  await expect(page.locator('table.history tbody tr').first()).toContainText('Owner changed: hw-east → (none)');
});
