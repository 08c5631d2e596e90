import { test, expect } from '@playwright/test';
import { accessible, operatorAPI, shot, signIn } from './helpers.mjs';

// An owner project's manager publishes a runbook, which no node carries
// yet; adds its trait to two of the project's nodes from the runbook's
// page; and a member of the project runs it on one. Each outcome is
// checked through the API as well as on the page.
test('an owner manager publishes a runbook, adds its trait to two nodes, and a member runs it', async ({ page, browser, request }, testInfo) => {
  // Two axe walks, four full-page screenshots and a run: more than the
  // default 30 s on a busy CI machine.
  test.setTimeout(120_000);
  const api = await operatorAPI(browser, request, 'runbookrun journey');
  const name = 'CUSTOM_EAST_CHECK';

  await signIn(page, 'owen', 'owner-password-1');
  await page.getByRole('link', { name: 'Runbooks' }).click();
  await page.getByRole('link', { name: 'New runbook' }).click();
  await page.getByLabel('Name (a trait: nodes need it to run this runbook)').fill(name);
  await page.getByLabel('Step 1', { exact: true }).selectOption('deploy.wait');
  await page.getByLabel('seconds of step 1').fill('1');
  await page.getByRole('button', { name: 'Add step' }).click();
  await page.getByLabel('Step 2', { exact: true }).selectOption('power.power_on');
  // A firmware.update row builds its settings list one component at a
  // time; a project manager, who may not list uploaded images, gives a URL.
  await page.getByRole('button', { name: 'Add step' }).click();
  await page.getByLabel('Step 3', { exact: true }).selectOption('firmware.update');
  await expect(page.getByTestId('builder-2')).toContainText('anvil:firmware_image:list');
  await page.getByLabel('Component').selectOption('bmc');
  await page.getByLabel('Image URL the BMC can reach').fill('https://fw.example/bmc-2.bin');
  await page.getByRole('button', { name: /Add to settings\s+of step 3/ }).click();
  await expect(page.getByLabel('settings of step 3 (required)')).toHaveValue(JSON.stringify([{ component: 'bmc', url: 'https://fw.example/bmc-2.bin' }], null, 2));
  await expect(page.getByTestId('preview').locator('li[data-arg="settings"] li')).toHaveText(['component: bmc, url: https://fw.example/bmc-2.bin']);
  for (const [width, scheme] of [[1440, 'light'], [390, 'dark']]) {
    await page.setViewportSize({ width, height: 900 });
    await page.emulateMedia({ colorScheme: scheme });
    await accessible(page, `editor with a settings builder ${width} ${scheme}`);
    await shot(page, testInfo, `editor-builder-${width}-${scheme}`, { fullPage: true });
  }
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.emulateMedia({ colorScheme: 'light' });
  await page.getByRole('button', { name: /Remove\s+step 3/ }).click();
  await expect(page.getByLabel('Step 3', { exact: true })).toHaveCount(0);
  // The preview reads the arguments as the list will.
  await expect(page.getByTestId('preview').locator('li[data-arg="seconds"]')).toHaveText('seconds: 1');
  // Retryable unless the publisher opts out.
  await expect(page.getByLabel('Retryable')).toBeChecked();
  await page.getByRole('button', { name: 'Save runbook' }).click();
  await expect(page.getByRole('status')).toContainText(`Saved ${name}: private to project hw-east`);
  const row = page.locator(`tr[data-runbook="${name}"]`);
  await expect(row.getByTestId('carriers')).toHaveText(`No node you can see carries trait ${name}`);
  const rb = await api('GET', `/v1/runbooks/${name}`);
  expect(rb.extra?.anvil_retryable).toBeUndefined();
  expect(rb.owner).toBe('hw-east');

  // The runbook's nodes: filter, pick two, add.
  await row.getByRole('link', { name: /Choose where it runs/ }).click();
  await expect(page.getByRole('heading', { level: 1 })).toHaveText(`Nodes for runbook ${name}`);
  await page.getByLabel('Name contains').fill('demo-0000');
  await page.getByRole('button', { name: 'Filter' }).click();
  // hw-east's own nodes only: demo-00002 belongs to hw-west.
  await expect(page.locator('tr[data-node="demo-00002"]')).toHaveCount(0);
  await page.getByRole('checkbox', { name: 'Add to demo-00001' }).check();
  await page.getByRole('checkbox', { name: 'Add to demo-00004' }).check();
  const add = page.getByRole('button', { name: `Add ${name} to 2 nodes` });
  await expect(add).toBeVisible();
  for (const [width, scheme] of [[1440, 'light'], [1440, 'dark'], [390, 'light'], [390, 'dark']]) {
    await page.setViewportSize({ width, height: 900 });
    await page.emulateMedia({ colorScheme: scheme });
    await accessible(page, `runbook nodes ${width} ${scheme}`);
    await shot(page, testInfo, `runbook-nodes-${width}-${scheme}`, { fullPage: true });
  }
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.emulateMedia({ colorScheme: 'light' });
  await add.click();
  const outcomes = page.getByTestId('outcomes');
  await expect(outcomes.locator('li')).toHaveText([`demo-00001: added ${name}.`, `demo-00004: added ${name}.`]);
  await expect(page.locator('p[data-testid="carriers"]')).toHaveText(`2 nodes carry trait ${name}.`);
  await accessible(page, 'runbook nodes after adding');
  for (const node of ['demo-00001', 'demo-00004']) {
    expect((await api('GET', `/v1/nodes/${node}/traits`)).traits).toContain(name);
  }
  expect((await api('GET', '/v1/nodes/demo-00007/traits')).traits).not.toContain(name);
  await page.getByRole('link', { name: 'Back to runbooks' }).click();
  await expect(row.getByTestId('carriers')).toHaveText(`2 nodes carry trait ${name}`);
  for (const [width, scheme] of [[1440, 'dark'], [390, 'light']]) {
    await page.setViewportSize({ width, height: 900 });
    await page.emulateMedia({ colorScheme: scheme });
    await accessible(page, `runbooks ${width} ${scheme}`);
    await shot(page, testInfo, `runbooks-${width}-${scheme}`, { fullPage: true });
  }
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.emulateMedia({ colorScheme: 'light' });
  await page.getByRole('button', { name: 'Sign out' }).click();

  // A member of hw-east runs it on demo-00001.
  await signIn(page, 'mel', 'member-password-1');
  await page.goto('/runbooks');
  await expect(row.getByTestId('carriers')).toHaveText(`2 nodes carry trait ${name}`);
  const node = await api('GET', '/v1/nodes/demo-00001');
  await page.goto(`/nodes/${node.uuid}`);
  await page.locator(`div.runbook[data-runbook="${name}"] summary`).click();
  await expect(page.locator('details[open] ol.steps > li > code')).toHaveText(['deploy.wait', 'power.power_on']);
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: `Run ${name} (clean)` }).click();
  // Done once the node is manageable again with the run recorded.
  await expect.poll(async () => {
    const n = await api('GET', `/v1/nodes/${node.uuid}`);
    return `${n.provision_state}, ${n.driver_internal_info.last_run ? 'ran' : 'not run'}`;
  }, { timeout: 60_000 }).toBe('manageable, ran');
  await expect(page.getByTestId('provision-state')).toHaveText('manageable');
  await expect(page.getByTestId('run-result')).toHaveText(`Runbook ${name} succeeded.`);
  const after = await api('GET', `/v1/nodes/${node.uuid}`);
  expect(after.driver_internal_info.last_run.steps.map((s) => `${s.interface}.${s.step}`)).toEqual(['deploy.wait', 'power.power_on']);
  const history = JSON.stringify(await api('GET', `/v1/nodes/${node.uuid}/history`));
  expect(history).toContain(`Runbook ${name}, run by mel`);
});

// Issue #44's journey: a project manager saves a runbook, is told on
// saving where it can run today (a node of the project already carries
// its trait), and runs it there, where the node page counts it too.
test('a project manager saves a runbook, is told where it can run, and runs it there', async ({ page, browser, request }) => {
  test.setTimeout(90_000);
  const api = await operatorAPI(browser, request, 'runbook told-where journey');
  const name = 'CUSTOM_EAST_TOLD';
  const node = await api('GET', '/v1/nodes/demo-00010'); // hw-east's, manageable
  await api('PUT', `/v1/nodes/${node.uuid}/traits/${name}`);

  await signIn(page, 'owen', 'owner-password-1');
  await page.getByRole('link', { name: 'Runbooks' }).click();
  await page.getByRole('link', { name: 'New runbook' }).click();
  await page.getByLabel('Name (a trait: nodes need it to run this runbook)').fill(name);
  await page.getByLabel('Step 1', { exact: true }).selectOption('deploy.wait');
  await page.getByLabel('seconds of step 1').fill('1');
  await page.getByRole('button', { name: 'Save runbook' }).click();
  const status = page.getByRole('status');
  await expect(status).toContainText(`Saved ${name}: private to project hw-east`);
  await expect(status).toContainText('It can run today on 1 of your nodes: demo-00010.');
  await expect(status).toContainText(`To run it on more, give them ${name} under “Choose where it runs”.`);
  await expect(page.locator(`tr[data-runbook="${name}"]`).getByTestId('eligible')).toHaveText('(runs on 1 of your nodes)');

  await page.goto(`/nodes/${node.uuid}`);
  const block = page.locator(`div.runbook[data-runbook="${name}"]`);
  await expect(block.getByTestId('runbook-eligible')).toHaveText(`${name} runs on 1 of your nodes.`);
  page.once('dialog', (d) => d.accept());
  await block.getByRole('button', { name: `Run ${name} (clean)` }).click();
  await expect.poll(async () => {
    const n = await api('GET', `/v1/nodes/${node.uuid}`);
    return `${n.provision_state}, ${n.driver_internal_info.last_run?.runbook || 'not run'}`;
  }, { timeout: 60_000 }).toBe(`manageable, ${name}`);
  await expect(page.getByTestId('run-result')).toHaveText(`Runbook ${name} succeeded.`);
});
