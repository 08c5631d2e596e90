import { test, expect } from '@playwright/test';
import { createHash } from 'node:crypto';
import { operatorAPI, signIn } from './helpers.mjs';

// Issue 44's done-when journey (1), as tina (a member of tenant-blue)
// lives it under the lessee-operates preset. demo-00017 is hw-west's,
// leased to tenant-blue and manageable (serve.sh's demo fleet: i=16); no
// other journey uses it, and it is not among the available nodes the
// allocation journeys count. It is put back as it was at the end.
const node = 'demo-00017';
const runbook = 'CUSTOM_RAID_MIRROR';
const key = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILQMaiVb3VBCbqooWm9tfndehjKdsyzl6jMgBaU7z4lk tina@desk';
const fingerprint = 'SHA256:' + createHash('sha256').update(Buffer.from(key.split(' ')[1], 'base64')).digest('base64').replace(/=+$/, '');

// A control that is not there fails the step that wanted it, not the
// whole journey's time.
test.use({ actionTimeout: 20_000 });

// plain asserts what the done-when rule says of every page a project
// scope sees: no API path anywhere in its text (folded Details included),
// and a rule id only inside a Details disclosure.
async function plain(page, where) {
  const found = await page.evaluate(() => {
    const body = document.body.cloneNode(true);
    body.querySelectorAll('script, style, template').forEach((e) => e.remove());
    const all = body.textContent;
    body.querySelectorAll('details').forEach((e) => e.remove());
    const outside = body.textContent;
    const around = (s, w) => { const i = s.indexOf(w); return i < 0 ? '' : s.slice(Math.max(0, i - 80), i + 80).replace(/\s+/g, ' '); };
    return { api: around(all, '/v1/'), rule: around(outside, 'baremetal:') };
  });
  expect(found.api, `${where} (${page.url()}) shows an API path`).toBe('');
  expect(found.rule, `${where} (${page.url()}) shows a rule id outside Details`).toBe('');
}

test('a lessee member deploys her leased node with her saved key, opens its console, retries a failed runbook, releases the node and reads the wipe record', async ({ browser, request }) => {
  test.setTimeout(240_000);
  const api = await operatorAPI(browser, request, 'lessee-operates journey');
  const state = async () => (await api('GET', `/v1/nodes/${node}`)).provision_state;
  const olga = await (await browser.newContext()).newPage();
  const tina = await (await browser.newContext()).newPage();
  // She accepts every confirmation, as a person would; asked is the last.
  let asked = '';
  tina.on('dialog', (d) => { asked = d.message(); d.accept(); });
  let applied = false;
  try {
    // The operator applies the preset from the policy console.
    await signIn(olga, 'olga', 'operator-password-1');
    await olga.goto('/admin/policy');
    const preset = olga.getByTestId('preset-lessee-operates');
    await preset.getByRole('button', { name: 'See what this preset changes' }).click();
    await expect(olga.getByTestId('preview-of')).toContainText('lessee-operates.yaml');
    olga.once('dialog', (d) => d.accept());
    await olga.getByTestId('apply-previewed').click();
    await expect(olga.locator('main .flash')).toContainText(/Stored as revision \d+;/);
    applied = true;

    // A runbook the owner's operator publishes (retryable, the default): its one
    // step builds the target RAID configuration, which the node does not
    // have yet, so its first run fails as a real one would.
    await api('POST', '/v1/runbooks', {
      name: runbook, public: true,
      steps: [{ interface: 'raid', step: 'create_configuration', order: 1 }],
    });
    await api('PUT', `/v1/nodes/${node}/traits/${runbook}`);
    expect(await state()).toBe('manageable');

    // Her key goes into her profile.
    await signIn(tina, 'tina', 'tenant-password-1');
    await plain(tina, 'nodes');
    await tina.goto('/account');
    const keys = tina.locator('#ssh-keys');
    await keys.getByLabel('Key name').fill('desk');
    await keys.getByLabel('Public key').fill(key);
    await keys.getByRole('button', { name: 'Save key' }).click();
    await expect(tina.locator('main .flash')).toHaveText('Saved SSH key desk.');
    await expect(keys.locator('tr[data-key="desk"]').getByTestId('fingerprint')).toHaveText(fingerprint);
    await plain(tina, 'account');

    // Runbooks run on a manageable node, not a deployed one, so she runs
    // it before the deploy. It fails; she reads which step and whom to ask.
    await tina.goto('/nodes');
    await tina.getByRole('link', { name: node, exact: true }).click();
    await expect(tina.getByTestId('provision-state')).toHaveText('manageable');
    const nodeURL = new URL(tina.url()).pathname;
    await plain(tina, 'node page, manageable');
    asked = '';
    await tina.getByRole('button', { name: `Run ${runbook} (clean)` }).click();
    await expect.poll(() => asked).toMatch(new RegExp(`^Run ${runbook} on ${node}\\? `));
    const summary = tina.getByTestId('error-summary');
    await expect(summary).toContainText('(RAID) failed', { timeout: 30_000 });
    await expect(summary).toContainText('Its owner or an operator must set one.');
    await expect(tina.getByTestId('provision-state')).toHaveText('clean failed');
    await plain(tina, 'node page, failed run');
    await tina.reload();
    await expect(tina.getByTestId('last-error')).toContainText('Then use “Retry” under Recovery to run it again');
    await plain(tina, 'node page, failed run (reloaded)');

    // The owner's side (an operator here) sets a RAID 1 target; she
    // retries, and the run completes.
    await api('PUT', `/v1/nodes/${node}/states/raid`, { logical_disks: [{ size_gb: 100, raid_level: '1', is_root_volume: true }] });
    asked = '';
    await tina.getByRole('region', { name: 'Recovery' }).getByRole('button', { name: 'Retry' }).click();
    await expect.poll(() => asked).toMatch(new RegExp(`^Retry on ${node}.*${runbook}`));
    await expect(tina.getByTestId('provision-state')).toHaveText('manageable', { timeout: 30_000 });
    await tina.reload();
    await expect(tina.getByTestId('run-result')).toHaveText(`Runbook ${runbook} succeeded.`);
    await expect(tina.getByTestId('last-error')).toHaveCount(0);
    await plain(tina, 'node page, retried run');

    // She makes the node available (the preset lets her) and deploys it
    // with the published image and her saved key.
    await tina.locator('#operator > summary').click();
    asked = '';
    await tina.getByRole('button', { name: 'Provide (make available)' }).click();
    await expect.poll(state, { timeout: 60_000 }).toBe('available');
    await tina.goto(`${nodeURL}#deploy`);
    const panel = tina.getByTestId('deploy');
    await expect(panel).toHaveAttribute('data-stage', 'form');
    await plain(tina, 'deploy form');
    await panel.getByRole('radio', { name: 'Demo disk 1.0' }).check();
    await expect(panel.getByRole('checkbox', { name: /^desk / })).toBeChecked();
    await panel.getByLabel('Host name').fill('db-1');
    await panel.getByRole('button', { name: 'Deploy' }).click();
    await expect(tina.locator('main .flash').first()).toHaveText(`Deploying Demo disk 1.0 to ${node} as db-1.`);
    await expect(panel).toHaveAttribute('data-stage', 'running', { timeout: 60_000 });
    await expect(panel.getByTestId('deploy-running')).toHaveText('Running Demo disk 1.0 as db-1');
    await plain(tina, 'deploy running');
    const n = await api('GET', `/v1/nodes/${node}`);
    expect(n.provision_state).toBe('active');
    expect(n.instance_info.display_name).toBe('db-1');

    // Its console: fake-hardware's (Ironic's fake console, as the API
    // reports the demo node's console_interface) records whether it is
    // on but streams nothing. She turns it on; the console page says so.
    await tina.reload();
    const section = tina.getByTestId('console');
    await expect(section.getByTestId('console-state')).toHaveText('The console is off.');
    await section.getByRole('button', { name: 'Turn the console on' }).click();
    await expect(tina.locator('main .flash').first()).toHaveText(`The console of ${node} is on.`);
    await plain(tina, 'node page, console on');
    await tina.goto(`${nodeURL}/console`);
    await expect(tina.getByRole('heading', { level: 1 })).toHaveText(`Console of ${node}`);
    await expect(tina.getByTestId('console-why')).toHaveText("This node's console interface (fake) has no stream the portal can show.");
    await plain(tina, 'console page');
    asked = '';
    await tina.getByRole('button', { name: 'Turn the console off' }).click();
    await expect(tina.locator('main .flash').first()).toContainText(`The console of ${node} is off`);
    expect((await api('GET', `/v1/nodes/${node}`)).console_enabled).toBe(false);

    // She releases it and reads the wipe record.
    await tina.goto(nodeURL);
    asked = '';
    await panel.getByRole('button', { name: /^Release/ }).click();
    await expect(tina.locator('main .flash').first()).toContainText(`Releasing ${node}.`);
    expect(asked).toMatch(new RegExp(`^Release ${node} \\(project tenant-blue gives it back\\)\\? `));
    await plain(tina, 'node page, releasing');
    await expect.poll(state, { timeout: 60_000 }).toBe('available');
    await tina.reload();
    const wipes = tina.locator('#more-wipes');
    // A release that wiped nothing is shown unfolded, in words.
    await expect(wipes).toHaveAttribute('open', '');
    await expect(wipes.locator('tbody tr').first()).toContainText('Not wiped: none (fake hardware: no machine, no disks)');
    await wipes.locator('tbody tr').first().getByRole('link').click();
    await expect(tina.getByRole('heading', { level: 1 })).toContainText('Wipe record');
    await expect(tina.locator('main')).toContainText(node);
    await expect(tina.locator('main')).toContainText('not wiped');
    await expect(tina.locator('main')).toContainText('fake hardware: no machine, no disks');
    await plain(tina, 'wipe record');
  } finally {
    // Later journeys see Ironic's defaults and the node as it was.
    if (applied) {
      const olga = await (await browser.newContext()).newPage();
      await signIn(olga, 'olga', 'operator-password-1');
      await olga.goto('/admin/policy');
      olga.once('dialog', (d) => d.accept());
      await olga.getByRole('button', { name: 'Revert to defaults' }).click();
      await expect(olga.locator('main .flash')).toContainText('(revert to defaults)');
    }
    const n = await api('GET', `/v1/nodes/${node}`);
    if (n.console_enabled) await api('PUT', `/v1/nodes/${node}/states/console`, { enabled: false });
    if (['clean failed', 'available'].includes(n.provision_state)) {
      await api('PUT', `/v1/nodes/${node}/states/provision`, { target: 'manage' });
    } else if (n.provision_state === 'active') {
      await api('PUT', `/v1/nodes/${node}/states/provision`, { target: 'deleted' });
      await expect.poll(state, { timeout: 60_000 }).toBe('available');
      await api('PUT', `/v1/nodes/${node}/states/provision`, { target: 'manage' });
    }
    await expect.poll(state, { timeout: 60_000 }).toBe('manageable');
    if (n.maintenance) await api('DELETE', `/v1/nodes/${node}/maintenance`);
    await api('PUT', `/v1/nodes/${node}/states/raid`, {});
    if ((n.traits || []).includes(runbook)) await api('DELETE', `/v1/nodes/${node}/traits/${runbook}`);
    await api('DELETE', `/v1/runbooks/${runbook}`);
  }
});
