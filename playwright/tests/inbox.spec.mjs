import { test, expect } from '@playwright/test';
import { accessible, operatorAPI, signIn } from './helpers.mjs';

// demo-00037 is hw-east's and leased to tenant-blue (serve.sh's demo
// fleet); no other journey uses it.
const node = 'demo-00037';
const runbook = 'CUSTOM_RAID_BUILD';

// Issue 43's "Ask the owner" as the two people live it: a tenant member's
// runbook fails on her leased node; she reads why in words, asks the
// owner with a message; the owner's manager sees the count in the header,
// reads the request in the inbox, answers and closes it; the tenant reads
// both in her own inbox. No page either of them sees shows an API path.
test('a tenant asks the owner about a failed run, and the owner answers and closes the request', async ({ browser, request }) => {
  test.setTimeout(120_000);
  const api = await operatorAPI(browser, request, 'inbox journey');
  // A public runbook whose only step needs a target RAID configuration
  // the node does not have: it fails the way a real one would.
  await api('POST', '/v1/runbooks', { name: runbook, public: true, steps: [{ interface: 'raid', step: 'create_configuration', order: 1 }] });
  await api('PUT', `/v1/nodes/${node}/traits/${runbook}`);
  const n = await api('GET', `/v1/nodes/${node}`);
  if (n.provision_state !== 'manageable') {
    await api('PUT', `/v1/nodes/${node}/states/provision`, { target: 'manage' });
    await expect.poll(async () => (await api('GET', `/v1/nodes/${node}`)).provision_state, { timeout: 30_000 }).toBe('manageable');
  }

  // Later journeys (the node list's rows on one screen among them) see
  // the fleet as serve.sh made it: the node goes back to manageable and
  // the runbook goes, whatever happened.
  try {
    await journey(browser, api);
  } finally {
    const now = await api('GET', `/v1/nodes/${node}`);
    if (now.maintenance) {
      await api('DELETE', `/v1/nodes/${node}/maintenance`);
    }
    if (now.provision_state === 'clean failed') {
      await api('PUT', `/v1/nodes/${node}/states/provision`, { target: 'manage' });
      await expect.poll(async () => (await api('GET', `/v1/nodes/${node}`)).provision_state, { timeout: 30_000 }).toBe('manageable');
    }
    await api('DELETE', `/v1/nodes/${node}/traits/${runbook}`);
    await api('DELETE', `/v1/runbooks/${runbook}`);
  }
});

async function journey(browser, api) {
  const tina = await (await browser.newContext()).newPage();
  const noAPIPaths = async (page) => expect(await page.locator('body').innerText()).not.toContain('/v1/');
  tina.on('dialog', (d) => d.accept());
  await signIn(tina, 'tina', 'tenant-password-1');
  await tina.goto(`/nodes/${node}`);
  await tina.getByRole('button', { name: `Run ${runbook} (clean)` }).click();
  await expect(tina.getByTestId('error-summary')).toContainText('(RAID) failed', { timeout: 30_000 });
  await expect(tina.getByTestId('error-summary')).toContainText('Its owner or an operator must set one.');
  await noAPIPaths(tina);
  const message = 'I need RAID 1 on the two SSDs for the database; can you set it?';
  await tina.getByLabel('What should the owner know? (optional)').fill(message);
  await tina.getByRole('button', { name: 'Ask the owner to look' }).click();
  await expect(tina.getByText('The owner was asked to look at the failed run: the request is in their inbox')).toBeVisible();

  const owen = await (await browser.newContext()).newPage();
  await signIn(owen, 'owen', 'owner-password-1');
  await expect(owen.getByTestId('unread-badge')).toHaveText(/^\d+ unread$/);
  await owen.getByRole('link', { name: /^Inbox/ }).click();
  const notice = owen.getByTestId('notice').filter({ hasText: `tina asks you to look at node ${node}` });
  await expect(notice).toContainText(message);
  await accessible(owen, 'owner inbox');
  await notice.getByRole('link', { name: 'Open the request' }).click();
  await expect(owen.getByRole('heading', { level: 1 })).toHaveText(`Request about node ${node}`);
  await expect(owen.getByTestId('thread-failure')).toContainText('(RAID) failed');
  await expect(owen.getByTestId('posts')).toContainText(message);
  await noAPIPaths(owen);
  const answer = 'Set RAID 1 on both SSDs; run it again.';
  await owen.getByLabel('Your answer').fill(answer);
  await owen.getByRole('button', { name: 'Send' }).click();
  await expect(owen.locator('main .flash')).toHaveText('Sent: the other side finds your answer in their inbox.');
  await expect(owen.getByTestId('posts').locator('li')).toHaveCount(2);
  owen.once('dialog', (d) => d.accept());
  await owen.getByRole('button', { name: 'Close the request' }).click();
  await expect(owen.getByTestId('thread-status')).toHaveText(/^Closed by owen at /);
  await accessible(owen, 'closed request');

  await tina.getByRole('link', { name: /^Inbox/ }).click();
  await expect(tina.getByTestId('notice').filter({ hasText: `owen answered about node ${node}` })).toContainText(answer);
  await expect(tina.getByTestId('notice').filter({ hasText: `owen closed your request about node ${node}` })).toBeVisible();
  await tina.getByRole('button', { name: 'Mark all read' }).click();
  await expect(tina.getByTestId('unread')).toHaveText('(0 unread)');
  await expect(tina.getByTestId('unread-badge')).toHaveCount(0);
  await noAPIPaths(tina);
  await accessible(tina, 'tenant inbox');
}
