import { test, expect } from '@playwright/test';
import { signIn } from './helpers.mjs';

// tenant-blue leases four free demo nodes (serve.sh, 40 nodes): two
// baremetal-large (demo-00005, demo-00029) and two baremetal-small.
test('a tenant requests a node, finds it in My allocations and releases it', async ({ page }) => {
  test.setTimeout(60_000);
  await signIn(page, 'tina', 'tenant-password-1');
  await page.getByRole('link', { name: 'Request a node' }).click();
  await expect(page.getByRole('link', { name: 'Request a node' })).toHaveAttribute('aria-current', 'page');
  const rc = page.getByLabel('Resource class');
  await expect(rc.locator('option')).toHaveText(['baremetal-large (2 available)', 'baremetal-small (2 available)']);
  await rc.selectOption('baremetal-small');
  await expect(page.getByLabel('CUSTOM_DEMO (2 available)')).toBeVisible();
  await rc.selectOption('baremetal-large');
  await page.getByLabel('CUSTOM_FIRMWARE_UPDATE (2 available)').check();
  await page.getByRole('button', { name: 'Request' }).click();

  // The node page says once who holds it; a reload asks nothing again.
  await expect(page).toHaveURL(/\/nodes\/[0-9a-f-]{36}$/);
  const flash = page.locator('main .flash');
  await expect(flash).toHaveText(/^demo-000(05|29) reserved for project tenant-blue\.$/);
  const node = (await flash.textContent()).split(' ')[0];
  await page.reload();
  await expect(page.locator('main .flash')).toHaveCount(0);

  await page.getByRole('link', { name: 'My allocations' }).click();
  await expect(page.getByRole('link', { name: 'My allocations' })).toHaveAttribute('aria-current', 'page');
  const row = page.locator(`tr[data-node="${node}"]`);
  await expect(row).toHaveCount(1);
  await expect(row.getByTestId('state-badge')).toContainText('active');
  await expect(row.locator('td[data-label="Created"] time')).toHaveAttribute('datetime', /Z$/);

  // Release asks first, naming the node; dismissing keeps it.
  let asked = '';
  page.once('dialog', (d) => { asked = d.message(); d.dismiss(); });
  await row.getByRole('button', { name: `Release ${node}` }).click();
  expect(asked).toBe(`Release ${node}? It goes back to the free nodes, and project tenant-blue no longer holds it.`);
  await expect(row).toHaveCount(1);
  page.once('dialog', (d) => d.accept());
  await row.getByRole('button', { name: `Release ${node}` }).click();
  await expect(page.locator('main .flash')).toHaveText(`Released ${node}.`);
  await expect(row).toHaveCount(0);
  await page.goto('/allocations/new');
  await expect(page.getByLabel('Resource class').locator('option').first()).toHaveText('baremetal-large (2 available)');
});

// release gives back the node whose page is open, from My allocations.
async function releaseFromList(page, node) {
  await page.goto('/allocations');
  const row = page.locator(`tr[data-node="${node}"]`);
  page.once('dialog', (d) => d.accept());
  await row.getByRole('button', { name: `Release ${node}` }).click();
  await expect(row).toHaveCount(0);
}

test('the request submits once: the button waits disabled, and the same form sent again reserves no second node', async ({ page }) => {
  test.setTimeout(60_000);
  await signIn(page, 'tina', 'tenant-password-1');
  await page.goto('/allocations');
  const rows = page.locator('tr[data-allocation]');
  const before = await rows.count();
  await page.goto('/allocations/new');
  await page.getByLabel('Resource class').selectOption('baremetal-small');
  await expect(page.getByLabel('CUSTOM_DEMO (2 available)')).toBeVisible();
  // Hold the POST a moment, to see the button disabled while it is at work.
  let sent = null;
  await page.route('**/allocations', async (route) => {
    if (route.request().method() === 'POST') {
      sent = route.request().postData();
      await new Promise((r) => setTimeout(r, 1000));
    }
    await route.continue();
  });
  const button = page.getByRole('button', { name: 'Request' });
  await button.click();
  await expect(button).toBeDisabled();
  await expect(page).toHaveURL(/\/nodes\/[0-9a-f-]{36}$/);
  const flash = page.locator('main .flash');
  await expect(flash).toHaveText(/^demo-\d+ reserved for project tenant-blue\.$/);
  const node = (await flash.textContent()).split(' ')[0];
  const nodeURL = new URL(page.url()).pathname;
  await page.unroute('**/allocations');

  // What the browser's "resend the form" sends: the very same POST.
  const again = await page.request.post('/allocations', {
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, data: sent, maxRedirects: 0,
  });
  expect(again.status()).toBe(303);
  expect(again.headers()['location']).toBe(nodeURL);
  await page.goto(nodeURL);
  await expect(page.locator('main .flash')).toHaveText(`${node} reserved for project tenant-blue.`);
  await page.reload();
  await page.goto('/allocations');
  await expect(rows).toHaveCount(before + 1);
  await expect(page.locator(`tr[data-node="${node}"]`)).toHaveCount(1);
  await releaseFromList(page, node);
});

test('a refused request comes back as a page of its own: a refresh resends nothing', async ({ page }) => {
  await signIn(page, 'tina', 'tenant-password-1');
  await page.goto('/allocations/new');
  // Choosing the class reloads the trait picker through htmx: the box
  // added below must go into the picker that swap brings, or the swap
  // drops it and the request asks for nothing unusual.
  const swapped = page.evaluate(() => new Promise((resolve) => {
    document.body.addEventListener('htmx:afterSettle', () => resolve(true), { once: true });
  }));
  await page.getByLabel('Resource class').selectOption('baremetal-large');
  await swapped;
  // Ticking every trait of the class, and one no node has, asks too much.
  await page.evaluate(() => {
    const box = document.querySelector('#trait-picker input[name="traits"]');
    const extra = box.cloneNode();
    extra.value = 'CUSTOM_NOPE';
    extra.id = 'trait-nope';
    extra.checked = true;
    box.parentElement.append(extra);
  });
  await page.getByRole('button', { name: 'Request' }).click();
  await expect(page).toHaveURL(/\/allocations\/new\?refused=/);
  await expect(page.getByRole('alert')).toContainText('No node is free');
  await expect(page.getByRole('alert')).toContainText('CUSTOM_NOPE');
  await expect(page.getByLabel('Resource class')).toHaveValue('baremetal-large');
  let posted = false;
  page.on('request', (r) => { if (r.method() === 'POST') posted = true; });
  await page.reload();
  await expect(page.getByRole('alert')).toContainText('No node is free');
  expect(posted).toBe(false);
});

test('without JavaScript the trait picker follows the class and a request still reserves a node', async ({ browser }) => {
  const ctx = await browser.newContext({ javaScriptEnabled: false });
  const page = await ctx.newPage();
  await signIn(page, 'tina', 'tenant-password-1');
  await page.goto('/allocations/new');
  await page.getByLabel('Resource class').selectOption('baremetal-small');
  await page.getByRole('button', { name: "Show this class's traits" }).click();
  await expect(page).toHaveURL(/resource_class=baremetal-small$/);
  await expect(page.getByLabel('Resource class')).toHaveValue('baremetal-small');
  await page.getByLabel('CUSTOM_DEMO (2 available)').check();
  await page.getByRole('button', { name: 'Request', exact: true }).click();
  await expect(page).toHaveURL(/\/nodes\/[0-9a-f-]{36}$/);
  const flash = page.locator('main .flash');
  await expect(flash).toHaveText(/^demo-\d+ reserved for project tenant-blue\.$/);
  const node = (await flash.textContent()).split(' ')[0];
  await page.goto('/allocations');
  const row = page.locator(`tr[data-node="${node}"]`);
  // No script, so no confirmation: the form posts as it is.
  await row.getByRole('button', { name: `Release ${node}` }).click();
  await expect(row).toHaveCount(0);
  await ctx.close();
});
