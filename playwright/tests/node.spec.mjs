import { test, expect } from '@playwright/test';
import { shot, signIn } from './helpers.mjs';


test('an operator cleans a node with explicit steps and watches them run', async ({ page }, testInfo) => {
  await signIn(page, 'olga', 'operator-password-1');
  await page.locator('table.nodes tbody tr a').first().click();
  await expect(page.getByTestId('provision-state')).toHaveText('manageable');
  // Explicit steps are folded below the node's main tasks.
  await page.locator('#more-steps > summary').click();
  await page.getByLabel('Steps (JSON list, run in order)').fill(
    '[{"interface":"power","step":"power_on"},{"interface":"deploy","step":"wait","args":{"seconds":2}},{"interface":"power","step":"power_off"}]');
  await page.getByRole('button', { name: 'Start cleaning' }).click();
  // The status section polls itself while the conductor works.
  await expect(page.getByTestId('provision-state')).toContainText('clean wait');
  await expect(page.getByTestId('current-step')).toHaveText('deploy.wait');
  await expect(page.getByTestId('step-counter')).toHaveText('Step 2 of 3');
  await shot(page, testInfo, 'node-running');
  await expect(page.getByTestId('provision-state')).toHaveText('manageable', { timeout: 15_000 });
  await expect(page.locator('table.history tbody tr').first()).toContainText('All 3 clean steps done; node is manageable');
  await expect(page.getByTestId('power-state')).toHaveText('power off');
  // A system admin may read the agent logs failed runs leave: the section
  // is there, and says none is kept for a node no run failed on.
  await page.locator('#more-agent-logs > summary').click();
  await expect(page.getByTestId('agent-logs-none')).toBeVisible();
});

test('a lessee member powers a leased node on and cannot run arbitrary steps', async ({ page }) => {
  await signIn(page, 'tina', 'tenant-password-1');
  await page.locator('table.nodes tbody tr a').first().click();
  await expect(page.getByRole('button', { name: 'Start cleaning' })).toHaveCount(0);
  await expect(page.getByTestId('steps-why')).toContainText('may not start cleaning.');
  await expect(page.getByTestId('steps-why').locator('details.rule code')).toHaveText('baremetal:node:set_provision_state');
  // The agent logs are system readers' only: no section for a tenant.
  await expect(page.getByTestId('agent-logs-section')).toHaveCount(0);
  await page.getByRole('button', { name: 'Power on' }).click();
  await expect(page.getByTestId('power-state')).toHaveText('power on', { timeout: 10_000 });
});
