import { test, expect } from '@playwright/test';
import { accessible, operatorAPI, signIn } from './helpers.mjs';

// The copy buttons write to the clipboard, which Chromium opens only to
// pages granted it.
test.use({ permissions: ['clipboard-read', 'clipboard-write'] });

const alertBox = (page) => page.locator('#request-error');

test('a failed htmx request says so: the server\'s message, the status, a dead connection; once, and dismissible', async ({ page, browser, request }) => {
  test.setTimeout(60_000);
  const api = await operatorAPI(browser, request, 'polish alert journey');
  const node = await api('POST', '/v1/nodes', { name: 'polish-1', driver: 'fake', owner: 'tenant-blue' });
  try {
    await signIn(page, 'tina', 'tenant-password-1');
    await page.goto(`/nodes/${node.uuid}`);
    // The node goes to another project while tina has its page open: her
    // power button is answered 404 with the error page, which htmx drops.
    await api('PATCH', `/v1/nodes/${node.uuid}`, [{ op: 'replace', path: '/owner', value: 'tenant-red' }]);
    await page.getByRole('button', { name: 'Power on' }).click();
    const alert = page.getByRole('alert');
    await expect(alert).toBeVisible();
    await expect(alert).not.toContainText('The request failed');
    await expect(alert).toContainText(/not found|could not be found/i);
    await page.getByRole('button', { name: 'Dismiss' }).click();
    await expect(alertBox(page)).toBeHidden();

    // An answer with no message of its own: the status.
    await page.route('**/power', (route) => route.fulfill({ status: 503, contentType: 'application/json', body: '{}' }));
    await page.getByRole('button', { name: 'Power on' }).click();
    await expect(alert).toHaveText('The request failed (HTTP 503). Try again.');
    await page.unroute('**/power');
    // No answer at all.
    await page.route('**/power', (route) => route.abort('connectionrefused'));
    await page.getByRole('button', { name: 'Power on' }).click();
    await expect(alert).toHaveText('Anvil did not answer. Check your connection and try again.');
    await expect(page.getByRole('alert')).toHaveCount(1);
  } finally {
    await api('DELETE', `/v1/nodes/${node.uuid}`);
  }
});

test('a poll that keeps failing shows one alert, and stays dismissed', async ({ page }) => {
  await signIn(page, 'olga', 'operator-password-1');
  await page.locator('table.nodes tbody tr a').nth(1).click();
  // Explicit steps are folded below the node's main tasks.
  await page.locator('#more-steps > summary').click();
  await page.getByLabel('Steps (JSON list, run in order)').fill('[{"interface":"deploy","step":"wait","args":{"seconds":6}}]');
  await page.getByRole('button', { name: 'Start cleaning' }).click();
  await expect(page.getByTestId('current-step')).toHaveText('deploy.wait');
  let polls = 0;
  await page.route('**/status?*', (route) => { polls++; route.fulfill({ status: 503, contentType: 'text/plain', body: 'The conductor is restarting.' }); });
  await expect(page.getByRole('alert')).toHaveText('The conductor is restarting.');
  await expect.poll(() => polls, { timeout: 5_000 }).toBeGreaterThan(2);
  await expect(page.getByRole('alert')).toHaveCount(1);
  await page.getByRole('button', { name: 'Dismiss' }).click();
  const seen = polls;
  await expect.poll(() => polls, { timeout: 5_000 }).toBeGreaterThan(seen + 1);
  await expect(alertBox(page)).toBeHidden();
  await page.unroute('**/status?*');
  await expect(page.getByTestId('provision-state')).toHaveText('manageable', { timeout: 20_000 });
});

test('a power action on an expired session signs in again and returns to the node', async ({ page, browser }) => {
  await signIn(page, 'tina', 'tenant-password-1');
  await page.locator('table.nodes tbody tr a').first().click();
  const nodeURL = new URL(page.url()).pathname;
  // The page is placed under Nodes in the main navigation.
  await expect(page.getByRole('navigation', { name: 'Main' }).locator('[aria-current="page"]')).toHaveText('Nodes');
  // The session ends elsewhere (another browser holding the same cookie).
  const other = await browser.newContext();
  await other.addCookies(await page.context().cookies());
  const tab = await other.newPage();
  await tab.goto('/nodes');
  await tab.getByRole('button', { name: 'Sign out' }).click();
  await other.close();
  await page.getByRole('button', { name: 'Power on' }).click();
  await expect(page).toHaveURL(/\/login\?/);
  expect(new URL(page.url()).searchParams.get('next')).toBe(nodeURL);
  await expect(page.getByRole('alert')).toContainText('Your session expired');
  await page.getByLabel('Username').fill('tina');
  await page.getByLabel('Password').fill('tenant-password-1');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page).toHaveURL(new RegExp(`${nodeURL}$`));
  await expect(page.getByRole('navigation', { name: 'Main' }).locator('[aria-current="page"]')).toHaveText('Nodes');
});

test.describe(() => {
  // The page reads the clipboard back only with the permission granted,
  // never by a prompt that headless Chromium leaves unanswered.
  test.use({ permissions: ['clipboard-read', 'clipboard-write'] });

  // clipboard is what the page reads from the clipboard now; a read the
  // browser refuses (the page not yet focused) counts as a wrong value,
  // to be asked again.
  const clipboard = (page) => () => page.evaluate(() => navigator.clipboard.readText()).catch((e) => `unreadable: ${e.message}`);

  test('a UUID\'s Copy button puts it on the clipboard', async ({ page }) => {
    await signIn(page, 'tina', 'tenant-password-1');
    await page.bringToFront();
    const row = page.locator('table.nodes tbody tr').first();
    const uuid = await row.getAttribute('data-node');
    const name = (await row.locator('td[data-label="Name"] a').textContent()).trim();
    await row.getByRole('button', { name: `Copy UUID of ${name}` }).click();
    await expect(row.getByText('Copied')).toBeVisible();
    await expect.poll(clipboard(page)).toBe(uuid);

    // The new token's button.
    await page.goto('/account');
    await page.getByLabel('Description').fill('copied');
    await page.getByRole('button', { name: 'Create token' }).click();
    const token = await page.getByTestId('new-token').textContent();
    await page.getByRole('button', { name: 'Copy the new token' }).click();
    await expect(page.getByText('Copied', { exact: true })).toBeVisible();
    await expect.poll(clipboard(page)).toBe(token);
  });
});

test('times show UTC and how long ago, with the instant as their title', async ({ page }) => {
  await signIn(page, 'tina', 'tenant-password-1');
  await page.goto('/account');
  await page.getByLabel('Description').fill('timed');
  await page.getByRole('button', { name: 'Create token' }).click();
  const row = page.locator('tr', { hasText: 'timed' });
  const created = row.locator('time').first();
  await expect(created).toHaveText(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
  await expect(created).toHaveAttribute('title', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z$/);
  await expect(row.locator('time + .reltime').first()).toHaveText(/\((just now|1 min ago)\)/);
  // Expires in 7 days (the form's default).
  await expect(row.locator('time + .reltime').nth(1)).toHaveText(/\(in 7 d\)/);
});

test('the alert, the copy buttons and the times pass axe in both colour schemes', async ({ page }) => {
  test.setTimeout(60_000);
  await signIn(page, 'tina', 'tenant-password-1');
  await page.goto('/account');
  await page.getByLabel('Description').fill('axe');
  await page.getByRole('button', { name: 'Create token' }).click();
  await expect(page.getByRole('button', { name: 'Copy the new token' })).toBeVisible();
  // A failing htmx request shows the alert on this page too.
  await page.route('**/account/tokens', (route) => route.fulfill({ status: 500, contentType: 'text/html', body: '<p>no</p>' }));
  await page.getByRole('button', { name: 'Create token' }).click();
  await expect(page.getByRole('alert')).toHaveText('The request failed (HTTP 500). Try again.');
  for (const scheme of ['light', 'dark']) {
    await page.emulateMedia({ colorScheme: scheme });
    await accessible(page, `account with alert, ${scheme}`);
  }
  await page.goto('/nodes');
  await page.locator('table.nodes tbody tr').first().getByRole('button', { name: /^Copy UUID of / }).click();
  for (const scheme of ['light', 'dark']) {
    await page.emulateMedia({ colorScheme: scheme });
    for (const width of [1440, 390]) {
      await page.setViewportSize({ width, height: 900 });
      await accessible(page, `nodes with copy buttons, ${scheme} at ${width}`);
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      expect(overflow, `nodes overflow at ${width}px, ${scheme}`).toBeLessThanOrEqual(0);
    }
  }
});
