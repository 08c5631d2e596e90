import { test, expect } from '@playwright/test';
import { accessible, operatorAPI, signIn } from './helpers.mjs';

// The phone layout sweep (issue #28): every kind of portal page at 390×844
// and 1440×900, light and dark: the page itself never scrolls sideways
// (wide tables scroll in their own box) and axe finds nothing serious.
// The main pages are here as well as the rest (a node's run, console and
// bulk results, sessions, audit, a runbook's nodes, the RAID builder…);
// a11y.spec.mjs checks the sign-in page and takes the main pages'
// screenshots. Its own state: one runbook run on
// demo-00033, which no other journey uses, and three nodes of its own
// that make lists wide (issue #44): a failed one, one in maintenance with
// a long reason, and one with a 60-character name. Journeys run one file
// at a time in name order, so no later journey counts them.
test('every page type fits 390 px and 1440 px in both schemes and passes axe', async ({ page, browser, request }) => {
  test.setTimeout(600_000);
  const api = await operatorAPI(browser, request, 'layout sweep');
  const longName = 'sweep-rack07-chassis3-blade12-a-rather-long-host-name-for-la';
  expect(longName).toHaveLength(60);
  const long = await api('POST', '/v1/nodes', { name: longName, driver: 'fake-hardware', owner: 'sweep-lab-with-a-long-project-name', resource_class: 'baremetal-gpu-large-memory' });
  const maint = await api('POST', '/v1/nodes', { name: 'sweep-maintenance', driver: 'fake-hardware', owner: 'sweep-lab' });
  await api('PUT', `/v1/nodes/${maint.uuid}/maintenance`, { reason: 'Replacing the second power supply and the fan tray; the vendor ticket is VND-2026-118834, back on Monday' });
  // A cleaning aborted while it waits ends in clean failed, with the
  // abort as its last error.
  const failed = await api('POST', '/v1/nodes', { name: 'sweep-failed', driver: 'fake-hardware', owner: 'sweep-lab' });
  await api('PUT', `/v1/nodes/${failed.uuid}/states/provision`, { target: 'manage' });
  await expect.poll(async () => (await api('GET', `/v1/nodes/${failed.uuid}`)).provision_state, { timeout: 30_000 }).toBe('manageable');
  await api('PUT', `/v1/nodes/${failed.uuid}/states/provision`, { target: 'clean', clean_steps: [{ interface: 'deploy', step: 'wait', args: { seconds: 60 } }] });
  await expect.poll(async () => (await api('GET', `/v1/nodes/${failed.uuid}`)).provision_state, { timeout: 30_000 }).toBe('clean wait');
  await api('PUT', `/v1/nodes/${failed.uuid}/states/provision`, { target: 'abort' });
  await expect.poll(async () => (await api('GET', `/v1/nodes/${failed.uuid}`)).provision_state, { timeout: 30_000 }).toBe('clean failed');

  await signIn(page, 'olga', 'operator-password-1');

  // The demo firmware runbook rolled out on demo-00033 gives a campaign
  // page, and the node a run page; a bulk power on gives a bulk results page.
  await page.goto('/nodes?q=demo-00033');
  await page.getByRole('checkbox', { name: 'Select demo-00033' }).check();
  await page.getByRole('button', { name: 'Roll out runbook…' }).click();
  await page.getByLabel('Runbook').selectOption('CUSTOM_FIRMWARE_UPDATE');
  page.once('dialog', (d) => d.accept());
  await page.getByTestId('bulk-run').click();
  await expect(page).toHaveURL(/\/campaigns\/[0-9a-f-]{36}$/);
  const campaign = new URL(page.url()).pathname;
  await expect(page.locator('#campaign-live[hx-trigger]')).toHaveCount(0, { timeout: 60_000 });
  await page.goto('/nodes?q=demo-00033');
  await page.getByRole('checkbox', { name: 'Select demo-00033' }).check();
  await page.getByRole('button', { name: 'Power…' }).click();
  await page.getByLabel('Power on').check();
  page.once('dialog', (d) => d.accept());
  await page.getByTestId('bulk-run').click();
  await expect(page).toHaveURL(/\/nodes\/bulk\/results\/[\w-]+$/);
  const bulk = new URL(page.url()).pathname;
  await expect(page.locator('#bulk-progress[hx-trigger]')).toHaveCount(0, { timeout: 60_000 });
  await page.goto('/nodes?q=demo-00033');
  const nodeURL = await page.getByRole('link', { name: 'demo-00033', exact: true }).getAttribute('href');
  await page.goto(nodeURL);
  const runURL = await page.locator(`a[href^="${nodeURL}/runs/"]`).first().getAttribute('href');
  await page.goto('/runbooks');
  const editURL = await page.locator('tr[data-runbook="CUSTOM_FIRMWARE_UPDATE"] a[href$="/edit"]').first().getAttribute('href');

  // An offer, so that the lease pages show one: a week from tomorrow.
  const day = new Date();
  day.setUTCHours(24, 0, 0, 0);
  await page.goto('/leases/owner');
  await page.getByLabel(/^Nodes/).fill('demo-00030');
  await page.getByLabel('From (UTC)').fill(day.toISOString().slice(0, 16));
  day.setUTCDate(day.getUTCDate() + 7);
  await page.getByLabel('To (UTC)').fill(day.toISOString().slice(0, 16));
  await page.getByRole('button', { name: 'Offer', exact: true }).click();
  await expect(page.locator('main .flash')).toHaveText(/^Offered 1 node/);

  const pages = [
    ['node list', '/nodes'],
    ['node list of the wide nodes', '/nodes?q=sweep-'],
    ['node list grouped', '/nodes?group=owner'],
    ['failed node', `/nodes/${failed.uuid}`],
    ['node in maintenance', `/nodes/${maint.uuid}`],
    ['long-named node', `/nodes/${long.uuid}`],
    ['enrol node', '/nodes/new'],
    ['enrol node, redfish fields', '/nodes/new', async () => {
      await page.getByLabel('BMC address').fill('redfish-virtualmedia://10.0.0.5/redfish/v1/Systems/1');
      await page.getByLabel('BMC address').press('Tab');
      await expect(page.getByTestId('driver-said')).toContainText('redfish');
    }],
    ['enrol from CSV', '/nodes/import'],
    ['node page', nodeURL],
    ['run page', runURL],
    ['console', `${nodeURL}/console`],
    ['bulk results', bulk],
    ['campaign', campaign],
    ['campaigns', '/campaigns'],
    ['runbooks', '/runbooks'],
    ['runbook editor', editURL],
    ['runbook nodes', '/runbooks/CUSTOM_FIRMWARE_UPDATE/nodes'],
    ['RAID builder', '/runbooks/new', async () => {
      await page.getByLabel('Step 1', { exact: true }).selectOption('raid.apply_configuration');
      await expect(page.getByTestId('builder-0')).toBeVisible();
    }],
    ['allocations', '/allocations'],
    ['request form', '/allocations/new'],
    ['offers', '/offers'],
    ['my leases', '/leases'],
    ['offer nodes', '/leases/owner'],
    ['usage report', '/leases/usage'],
    ['audit', '/audit'],
    ['sessions', '/admin/sessions'],
    ['users', '/admin/users'],
    ['tokens', '/admin/tokens'],
    ['policy console', '/admin/policy'],
    ['account', '/account'],
    ['change password', '/account/password'],
  ];
  for (const [scheme, width, height] of [['light', 390, 844], ['dark', 390, 844], ['light', 1440, 900], ['dark', 1440, 900]]) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.setViewportSize({ width, height });
    for (const [name, url, prepare] of pages) {
      const label = `${name} (${url}) at ${width}px, ${scheme}`;
      const resp = await page.goto(url);
      expect.soft(resp.status(), label).toBe(200);
      if (prepare) await prepare();
      const over = await page.evaluate(() => {
        const s = document.scrollingElement;
        if (s.scrollWidth <= window.innerWidth) return [];
        // Name the innermost visible elements that stick out, for the fix.
        const out = [...document.querySelectorAll('body *')].filter((e) => !e.closest('.scroll, .sr-only, table.cards thead')
          && e.getBoundingClientRect().right > window.innerWidth + 0.5);
        return out.filter((e) => !out.some((o) => o !== e && e.contains(o))).slice(0, 5)
          .map((e) => `${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}${e.className ? '.' + String(e.className).split(' ').join('.') : ''}: ${(e.textContent || '').trim().slice(0, 60)}`)
          .concat([`scrollWidth ${s.scrollWidth} > ${window.innerWidth}`]);
      });
      expect.soft(over, `${label} overflows sideways`).toEqual([]);
      await test.step(`axe: ${label}`, async () => {
        try {
          await accessible(page, label);
        } catch (e) {
          expect.soft(e.message, label).toBe('');
        }
      });
    }
  }
});
