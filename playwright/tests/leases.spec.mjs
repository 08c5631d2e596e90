import { test, expect } from '@playwright/test';
import { readFile } from 'node:fs/promises';
import { signIn } from './helpers.mjs';

// demo-00025 is hw-east's, and tenant-blue is its lessee by hand (serve.sh's
// demo fleet), so tina sees its page; an offer and a booking for tomorrow
// change nothing on it today.
const node = 'demo-00025';

// datetime-local's value for tomorrow at hour h, UTC.
function tomorrow(h) {
  const d = new Date();
  d.setUTCHours(0, 0, 0, 0);
  d.setUTCDate(d.getUTCDate() + 1);
  d.setUTCHours(h);
  return d.toISOString().slice(0, 16);
}

test('an owner offers a node, a tenant claims it for tomorrow, and the usage CSV adds up', async ({ browser }) => {
  test.setTimeout(90_000);
  const owner = await (await browser.newContext()).newPage();
  await signIn(owner, 'owen', 'owner-password-1');
  // From the node list's bulk selection to the owner's page.
  await owner.goto(`/nodes?q=${node}`);
  await owner.getByLabel(`Select ${node}`).check();
  await owner.getByRole('button', { name: 'Offer for lease…' }).click();
  await expect(owner.getByRole('heading', { name: 'Offer nodes' })).toBeVisible();
  await expect(owner.getByLabel(/^Nodes/)).toHaveValue(node);
  await owner.getByLabel('From (UTC)').fill(tomorrow(0));
  await owner.getByLabel('To (UTC)').fill(tomorrow(24 * 3));
  await owner.getByLabel(/^Properties/).fill('site=east');
  await owner.getByRole('button', { name: 'Offer', exact: true }).click();
  await expect(owner.locator('main .flash')).toHaveText(/^Offered 1 node from /);
  await expect(owner.getByTestId('my-offers')).toContainText(node);

  const page = await (await browser.newContext()).newPage();
  await signIn(page, 'tina', 'tenant-password-1');
  await page.getByRole('link', { name: 'Offers' }).click();
  const offer = page.getByTestId(`offer-${node}`);
  await expect(offer).toContainText('site=east');
  await offer.getByLabel('Start (UTC)').fill(tomorrow(9));
  await offer.getByLabel('End (UTC)').fill(tomorrow(17));
  await offer.getByRole('button', { name: `Claim ${node}` }).click();
  await expect(page).toHaveURL(/\/leases$/);
  await expect(page.locator('main .flash')).toHaveText(/^Leased from /);
  const row = page.getByTestId(`lease-${node}`);
  await expect(row.getByTestId('lease-status')).toHaveText('Booked: starts on time');
  await expect(row).toContainText('starts in');
  // The owner hears of the claim in the inbox.
  await owner.goto('/inbox');
  await expect(owner.getByTestId('notice').filter({ hasText: `Project tenant-blue claimed node ${node} from your offer` })).toBeVisible();

  // Claiming the same hours again is refused beside the form.
  await page.goto('/offers');
  await offer.getByLabel('Start (UTC)').fill(tomorrow(12));
  await offer.getByLabel('End (UTC)').fill(tomorrow(14));
  await offer.getByRole('button', { name: `Claim ${node}` }).click();
  await expect(page.getByTestId('claim-error')).toContainText('Time conflict');

  await page.goto('/leases');
  await row.getByRole('link', { name: node }).click();
  await expect(page.getByTestId('calendar-leases')).toContainText('tenant-blue');

  await owner.goto('/leases/usage');
  await expect(owner.getByTestId('usage-total')).toHaveText('8.0');
  const [download] = await Promise.all([owner.waitForEvent('download'), owner.getByTestId('usage-csv').click()]);
  const lines = (await readFile(await download.path(), 'utf8')).trim().split('\n');
  expect(lines[0]).toBe('lease,project,owner,node,node_uuid,status,start,end,node_hours');
  const total = lines.slice(1).reduce((sum, l) => sum + Number(l.split(',').at(-1)), 0);
  expect(total).toBe(8);
});
