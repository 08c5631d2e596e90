import { test, expect } from '@playwright/test';
import { accessible, operatorAPI, shot, signIn } from './helpers.mjs';

// A lessee's member opens a node and finds the runbooks they may run at
// the top of the page, runs one, and sees it start and succeed where the
// Run button was, without scrolling; the run is checked through the API,
// and the history gathers its events under one header.
test('a lessee member runs a runbook from the top of the node page and sees it succeed there', async ({ page, browser, request }, testInfo) => {
  // A bound for a hang, not a speed budget: it takes ~7 s alone and ran
  // past the default 30 s beside the Go tests at a load average of 13.
  test.setTimeout(120_000);
  const api = await operatorAPI(browser, request, 'nodetask journey');
  const trait = `CUSTOM_TASK_${Date.now()}`;
  const node = await api('POST', '/v1/nodes', { name: `task-${Date.now()}`, driver: 'fake', owner: 'hw-east', lessee: 'tenant-blue' });
  await api('PUT', `/v1/nodes/${node.uuid}/traits/${trait}`);
  await api('POST', '/v1/runbooks', { name: trait, public: true, description: 'Powers the node on and waits a second.',
    steps: [{ interface: 'power', step: 'power_on', order: 1 }, { interface: 'deploy', step: 'wait', args: { seconds: 1 }, order: 2 }] });
  await api('PUT', `/v1/nodes/${node.uuid}/states/provision`, { target: 'manage' });
  await expect.poll(async () => (await api('GET', `/v1/nodes/${node.uuid}`)).provision_state).toBe('manageable');

  await signIn(page, 'tina', 'tenant-password-1');
  const run = page.getByRole('button', { name: `Run ${trait} (clean)` });
  for (const [width, scheme] of [[1440, 'light'], [1440, 'dark'], [390, 'light'], [390, 'dark']]) {
    await page.setViewportSize({ width, height: 900 });
    await page.emulateMedia({ colorScheme: scheme });
    await page.goto(`/nodes/${node.uuid}`);
    await expect(run).toBeVisible();
    // The runbooks come first: within the first screen on a desktop,
    // the first two on a phone, the page not scrolled.
    expect(await page.evaluate(() => window.scrollY)).toBe(0);
    const top = (await page.getByTestId('runbooks').boundingBox()).y;
    expect(top).toBeLessThan(width === 1440 ? 900 : 1800);
    await accessible(page, `node page ${width} ${scheme}`);
    await shot(page, testInfo, `nodetask-${width}-${scheme}`, { fullPage: true });
  }

  await page.setViewportSize({ width: 1440, height: 900 });
  await page.emulateMedia({ colorScheme: 'light' });
  await page.goto(`/nodes/${node.uuid}`);
  let asked = '';
  page.once('dialog', async (d) => { asked = d.message(); await d.accept(); });
  await run.click();
  const feedback = page.getByTestId('run-feedback');
  await expect(feedback).toContainText(`Runbook ${trait} succeeded.`, { timeout: 20_000 });
  expect(asked).toBe(`Run ${trait} on ${node.name}? Its steps start at once.`);
  await expect(feedback).toBeInViewport();
  expect(await page.evaluate(() => window.scrollY)).toBe(0);
  await accessible(page, 'node page after the run');

  // The API agrees: the node is back to manageable and its history
  // names the runbook, who ran it and the end of the run.
  expect((await api('GET', `/v1/nodes/${node.uuid}`)).provision_state).toBe('manageable');
  const events = (await api('GET', `/v1/nodes/${node.uuid}/history`)).history.map((e) => e.event);
  expect(events).toContain(`Runbook ${trait}, run by tina: clean with 2 step(s)`);
  expect(events.some((e) => e.startsWith('All 2 clean steps done'))).toBe(true);

  // The history, collapsed below, holds the run under one header.
  await page.locator('#more-history > summary').click();
  const group = page.locator('details.run').first();
  await expect(group.locator('summary')).toContainText(new RegExp(`Runbook ${trait}, run by tina: succeeded in \\d+ s`));
  await group.locator('summary').click();
  await expect(group.locator('tbody tr')).toHaveCount(6);
  await accessible(page, 'node page with the run opened');
  await shot(page, testInfo, 'nodetask-run-history', { fullPage: true });
});
