import { createHash } from 'node:crypto';
import { test, expect } from '@playwright/test';
import { accessible, operatorAPI, shot, signIn } from './helpers.mjs';

// axeBoth checks the page at url (after prepare) in both schemes at 1440
// and 390 px: axe-clean, and at 390 px nothing but tables wider than the
// screen.
async function axeBoth(page, name, url, prepare) {
  for (const scheme of ['light', 'dark']) {
    await page.emulateMedia({ colorScheme: scheme });
    for (const width of [1440, 390]) {
      await page.setViewportSize({ width, height: 900 });
      await page.goto(url);
      if (prepare) await prepare();
      await accessible(page, `${name}@${width}, ${scheme}`);
      const over = await page.evaluate(() => Math.max(0, ...[...document.querySelectorAll('main > :not(table):not(.scroll), main section > :not(table):not(.scroll), header')]
        .map((e) => e.getBoundingClientRect().right)) - window.innerWidth);
      expect(over, `${name}: something overflows at ${width}px, ${scheme}`).toBeLessThanOrEqual(1);
    }
  }
  await page.emulateMedia({ colorScheme: 'light' });
  await page.setViewportSize({ width: 1440, height: 900 });
}

// laptopKey is mark's public key, with its SHA256 fingerprint as
// ssh-keygen -l prints it.
const laptopKey = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFt0NnEOzBOFg2cNheviUlch8JWeciMlJ5z25bsJ+fDJ mark@laptop';
const laptopFingerprint = 'SHA256:' + createHash('sha256').update(Buffer.from(laptopKey.split(' ')[1], 'base64')).digest('base64').replace(/=+$/, '');

// mark manages tenant-blue, which leases two free baremetal-small demo
// nodes (serve.sh, 40 nodes). Demo nodes are fake-hardware: a deploy
// there writes no image and cleaning wipes no disk, as the panel says;
// the states, the allocation and instance_info are real and read back
// through the API. Both nodes are released at the end.
test('a tenant saves an SSH key, requests two nodes with a lease, deploys one with her key, reaches it, releases and wipes it, and releases the other', async ({ page, browser, request }, testInfo) => {
  test.setTimeout(300_000);
  const api = await operatorAPI(browser, request, 'deploy journey');
  await signIn(page, 'mark', 'manager-password-1');

  // Her laptop's key goes into her profile, shown by its fingerprint.
  await page.goto('/account');
  const keys = page.locator('#ssh-keys');
  await keys.getByLabel('Key name').fill('laptop');
  await keys.getByLabel('Public key').fill(laptopKey);
  await keys.getByRole('button', { name: 'Save key' }).click();
  await expect(page).toHaveURL(/\/account#ssh-keys$/);
  await expect(page.locator('main .flash')).toHaveText('Saved SSH key laptop.');
  await expect(keys.locator('tr[data-key="laptop"]').getByTestId('fingerprint')).toHaveText(laptopFingerprint);
  await axeBoth(page, 'account-ssh-keys', '/account');
  await page.goto('/allocations/new');
  await page.getByLabel('Resource class').selectOption('baremetal-small');
  await page.getByLabel('Name (optional)').fill('web');
  await page.getByLabel('How many nodes').fill('2');
  await page.getByLabel('Lease length in hours (optional)').fill('2');
  await page.getByRole('button', { name: 'Request' }).click();
  await expect(page).toHaveURL(/\/allocations$/);
  const flash = page.locator('main .flash');
  await expect(flash).toHaveText(/^Reserved 2 nodes for project tenant-blue: web-1 on demo-\d+, web-2 on demo-\d+\.$/);
  const [, first, second] = (await flash.textContent()).match(/web-1 on (demo-\d+), web-2 on (demo-\d+)/);
  for (const node of [first, second]) {
    const row = page.locator(`tr[data-node="${node}"]`);
    await expect(row.getByTestId('lease-ends')).toContainText('ends in 2 h');
    await expect(row.locator('td[data-label="Lease ends"] time')).toHaveAttribute('datetime', /Z$/);
    await expect(row.getByTestId('node-state')).toContainText('available');
  }
  for (const [name, node] of [['web-1', first], ['web-2', second]]) {
    const a = await api('GET', `/v1/allocations/${name}`);
    expect(a.state).toBe('active');
    expect(Date.parse(a.extra.anvil_expires_at) - Date.now()).toBeGreaterThan(110 * 60_000);
    const n = await api('GET', `/v1/nodes/${node}`);
    expect(n.allocation_uuid).toBe(a.uuid);
  }
  await axeBoth(page, 'my-allocations', '/allocations');

  // Deploy the first with the demo's published image, a key and a name.
  await page.getByRole('link', { name: `Deploy ${first}` }).click();
  await expect(page).toHaveURL(/\/nodes\/[0-9a-f-]{36}#deploy$/);
  const nodeURL = new URL(page.url()).pathname;
  const panel = page.getByTestId('deploy');
  await expect(panel.getByTestId('deploy-fake')).toContainText('without writing an image or wiping a disk');
  await axeBoth(page, 'deploy-form', nodeURL);
  await page.goto(`${nodeURL}#deploy`);
  await shot(page, testInfo, 'deploy-form', { fullPage: false });
  await page.setViewportSize({ width: 390, height: 900 });
  await shot(page, testInfo, 'deploy-form-390', { fullPage: false });
  await page.setViewportSize({ width: 1440, height: 900 });
  await expect(panel.getByRole('radio', { name: 'Demo disk 1.0' })).toBeChecked();
  // Her saved key is offered, chosen as her only one.
  const laptop = panel.getByRole('checkbox', { name: /^laptop / });
  await expect(laptop).toBeChecked();

  // A form with nothing right: every problem at once, each by its label,
  // listed at the top with a link to its field, and what she typed kept.
  await panel.getByRole('radio', { name: 'Another image, by URL' }).check();
  await laptop.uncheck();
  await panel.getByLabel('Host name').fill('not a host');
  await panel.getByRole('button', { name: 'Deploy' }).click();
  const problems = panel.getByTestId('problems');
  await expect(problems.getByRole('heading')).toHaveText('4 problems to fix');
  await expect(problems.getByRole('listitem')).toHaveText([
    /^Image URL: give the http:\/\/ or https:\/\/ address/,
    /^Checksum: give the image's checksum/,
    /^SSH key: choose a saved key or paste a public key/,
    /^Host name: give a host name/,
  ]);
  await expect(panel.getByTestId('problem-hostname')).toContainText('give a host name');
  await expect(panel.getByLabel('Host name')).toHaveValue('not a host');
  await expect(panel.getByLabel('Host name')).toHaveAttribute('aria-invalid', 'true');
  await problems.getByRole('link', { name: /^Host name:/ }).click();
  await expect(page).toHaveURL(/#hostname$/);
  expect((await api('GET', `/v1/nodes/${first}`)).provision_state).toBe('available');
  await axeBoth(page, 'deploy-problems', nodeURL, async () => {
    await panel.getByRole('radio', { name: 'Another image, by URL' }).check();
    await panel.getByRole('checkbox', { name: /^laptop / }).uncheck();
    await panel.getByRole('button', { name: 'Deploy' }).click();
    await expect(panel.getByTestId('problems')).toBeVisible();
  });
  await shot(page, testInfo, 'deploy-problems', { fullPage: false });

  await page.goto(`${nodeURL}#deploy`);
  await panel.getByRole('radio', { name: 'Demo disk 1.0' }).check();
  await expect(laptop).toBeChecked();
  await panel.getByLabel('Host name').fill('web-1');
  await panel.getByRole('button', { name: 'Deploy' }).click();
  await expect(page.locator('main .flash').first()).toHaveText(`Deploying Demo disk 1.0 to ${first} as web-1.`);
  await expect(panel).toHaveAttribute('data-stage', 'running');
  await expect(panel.getByTestId('deploy-running')).toHaveText('Running Demo disk 1.0 as web-1');
  // Where to reach it: the demo inventory's address (demo-000NN has
  // 192.0.2.NN) and the command with the image's login.
  const host = Number(first.slice('demo-'.length));
  await expect(panel.getByTestId('address').first()).toHaveText(`192.0.2.${host}`);
  await expect(panel.getByTestId('ssh-hint').first()).toHaveText(`ssh root@192.0.2.${host}`);
  // The flash said what was under way; once the page is reloaded it is gone.
  await page.reload();
  await expect(page.locator('#flash .flash')).toHaveCount(0);
  await expect(panel.getByText(/^Release .* gives it back\)\?/)).toHaveCount(0);
  const n = await api('GET', `/v1/nodes/${first}`);
  expect(n.provision_state).toBe('active');
  expect(n.instance_info.display_name).toBe('web-1');
  expect(n.instance_info.image_os_hash_algo).toBe('sha256');
  await axeBoth(page, 'deploy-running', nodeURL);
  await shot(page, testInfo, 'deploy-running', { fullPage: false });

  // Release (not "and wipe": a fake node has no disks): asked first, then
  // cleaning to available, and the tear down ends the allocation.
  let asked = '';
  page.once('dialog', (d) => { asked = d.message(); d.accept(); });
  await panel.getByRole('button', { name: 'Release', exact: true }).click();
  // A fake-hardware node has no disks: the page says so rather than
  // promise a wipe (its record says "not wiped").
  await expect(page.locator('main .flash').first()).toContainText(`Releasing ${first}. Its disks are not wiped: fake hardware: no machine, no disks.`);
  expect(asked).toBe(`Release ${first} (project tenant-blue gives it back)? Its disks are not wiped: fake hardware: no machine, no disks.`);
  await expect.poll(async () => (await api('GET', `/v1/nodes/${first}`)).provision_state, { timeout: 60_000 }).toBe('available');
  await expect(page.getByTestId('deploy')).toHaveAttribute('data-stage', 'form', { timeout: 30_000 });
  const names = async () => (await api('GET', '/v1/allocations')).allocations.map((a) => a.name);
  await expect.poll(names).not.toContain('web-1');
  const gone = await api('GET', `/v1/nodes/${first}`);
  expect(gone.instance_uuid).toBeNull();
  expect(gone.instance_info).toEqual({});

  // The other, never deployed, goes back from My allocations.
  await page.goto('/allocations');
  const row = page.locator(`tr[data-node="${second}"]`);
  page.once('dialog', (d) => d.accept());
  await row.getByRole('button', { name: `Release ${second}` }).click();
  await expect(row).toHaveCount(0);
  expect(await names()).not.toContain('web-2');
  expect((await api('GET', `/v1/nodes/${second}`)).instance_uuid).toBeNull();
});
