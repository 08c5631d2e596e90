import { test, expect } from '@playwright/test';
import { accessible, operatorAPI, shot, signIn } from './helpers.mjs';

// The node list (issue #28): one-line rows, pick-lists with counts, group
// headers and the page jump, all in the URL, on a wide screen and a phone,
// light and dark. The demo fleet (serve.sh) has 40 nodes owned by hw-east,
// hw-west and hw-lab in turn; journeys that ran before may have enrolled
// more, so totals are read from the API.
for (const scheme of ['light', 'dark']) {
  test(`the list at 1440×900 shows 20 rows or more and its pick-lists count what the API lists (${scheme})`, async ({ page, browser, request }, testInfo) => {
    test.setTimeout(90_000);
    await page.emulateMedia({ colorScheme: scheme });
    await page.setViewportSize({ width: 1440, height: 900 });
    await signIn(page, 'olga', 'operator-password-1');
    const api = await operatorAPI(browser, request, `nodelist ${scheme}`);
    const total = (await api('GET', '/v1/nodes?limit=1000')).nodes.length;
    await expect(page.getByTestId('range')).toHaveText(`1–${total} of ${total}`);
    // Rows wholly inside the first screen.
    const visible = await page.locator('table.nodes tbody tr[data-node]').evaluateAll((rows) =>
      rows.filter((r) => r.getBoundingClientRect().bottom <= window.innerHeight).length);
    expect(visible).toBeGreaterThanOrEqual(20);
    await accessible(page, `node list ${scheme}`);
    await shot(page, testInfo, `nodelist-1440-${scheme}`);

    // The owner pick-list's count is what the API lists for that owner.
    const east = await api('GET', '/v1/nodes?owner=hw-east&limit=1000');
    const option = page.locator('#f-owner option[value="hw-east"]');
    await expect(option).toHaveAttribute('data-count', String(east.nodes.length));
    await page.getByLabel('Owner').selectOption('hw-east');
    await expect(page).toHaveURL(/owner=hw-east/);
    await expect(page.getByTestId('range')).toHaveText(`1–${east.nodes.length} of ${east.nodes.length}`);
    const uuids = await page.locator('table.nodes tbody tr[data-node]').evaluateAll((rows) => rows.map((r) => r.dataset.node).sort());
    expect(uuids).toEqual(east.nodes.map((n) => n.uuid).sort());
    // The other lists now count under the owner filter: the states add up.
    const states = await page.locator('#f-state option[data-count]').evaluateAll((os) => os.reduce((s, o) => s + Number(o.dataset.count), 0));
    expect(states).toBe(east.nodes.length);

    // Group by provision state: headers whose counts are the API's.
    await page.getByLabel('Group by').selectOption('state');
    await expect(page).toHaveURL(/group=state/);
    const headers = page.getByTestId('group');
    await expect(headers.first()).toBeVisible();
    for (const h of await headers.all()) {
      const label = (await h.locator('th').evaluate((th) => th.firstChild.textContent)).trim();
      const listed = await api('GET', `/v1/nodes?owner=hw-east&provision_state=${encodeURIComponent(label)}&limit=1000`);
      await expect(h.getByTestId('group-count')).toContainText(`${listed.nodes.length} node`);
    }
    await accessible(page, `grouped list ${scheme}`);

    // A page jump keeps the view: 25 a page, page 2 of all owners.
    await page.goto('/nodes?size=25&group=owner');
    await expect(page.getByLabel('Page', { exact: true })).toHaveAttribute('max', String(Math.ceil(total / 25)));
    await page.getByLabel('Page', { exact: true }).fill('2');
    await page.getByRole('button', { name: 'Go' }).click();
    await expect(page).toHaveURL(/page=2/);
    await expect(page).toHaveURL(/group=owner/);
    await expect(page).toHaveURL(/size=25/);
    await expect(page.getByTestId('range')).toHaveText(`26–${Math.min(total, 50)} of ${total}`);
    await page.reload();
    await expect(page.getByTestId('range')).toHaveText(`26–${Math.min(total, 50)} of ${total}`);
    await expect(page.getByLabel('Group by')).toHaveValue('owner');
  });

  test(`the list on a 390 px phone: filters folded, nothing wider than the screen (${scheme})`, async ({ page }, testInfo) => {
    await page.emulateMedia({ colorScheme: scheme });
    await page.setViewportSize({ width: 390, height: 844 });
    await signIn(page, 'olga', 'operator-password-1');
    await expect(page.getByTestId('range')).toHaveText(/^1–(\d+) of \1$/);
    await expect(page.locator('#filterbox')).not.toHaveAttribute('open', '');
    await expect(page.getByLabel('Owner')).toBeHidden();
    const overflow = () => page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(await overflow()).toBeLessThanOrEqual(0);
    await accessible(page, `phone list ${scheme}`);
    await shot(page, testInfo, `nodelist-390-${scheme}`, { fullPage: false });

    // Unfolded, the filters work as on a wide screen and still fit.
    await page.locator('#filterbox > summary').click();
    await page.getByLabel('Owner').selectOption('hw-lab');
    await expect(page).toHaveURL(/owner=hw-lab/);
    await expect(page.getByTestId('range')).toContainText('of 13');
    await page.getByLabel('Group by').selectOption('state');
    await expect(page.getByTestId('group').first()).toBeVisible();
    expect(await overflow()).toBeLessThanOrEqual(0);
    await accessible(page, `phone filters ${scheme}`);
    await shot(page, testInfo, `nodelist-390-filters-${scheme}`, { fullPage: false });
  });
}

// Issue #44: from the keyboard, "Skip to the results" passes the filters
// and the column headers, and each row costs two Tab stops, its checkbox
// and its link (the row's UUID Copy button is left out of the Tab order;
// the node's page has it).
test('the keyboard reaches the first row at once and crosses a row in two Tab stops', async ({ page }) => {
  await signIn(page, 'olga', 'operator-password-1');
  await page.goto('/nodes');
  const rows = page.locator('table.nodes tbody tr[data-node]');
  await expect(rows.nth(1)).toBeVisible();
  const skip = page.getByRole('link', { name: 'Skip to the results' });
  await skip.focus();
  await expect(skip).toBeVisible();
  await page.keyboard.press('Enter');
  const focused = () => page.evaluate(() => {
    const e = document.activeElement;
    return `${e.tagName.toLowerCase()} ${e.getAttribute('aria-label') || e.textContent.trim()} in ${e.closest('tr')?.getAttribute('data-node') || '-'}`;
  });
  const first = await rows.nth(0).getAttribute('data-node');
  const second = await rows.nth(1).getAttribute('data-node');
  const firstName = (await rows.nth(0).locator('td.name a').textContent()).trim();
  await page.keyboard.press('Tab');
  expect(await focused()).toBe(`input Select ${firstName} in ${first}`);
  await page.keyboard.press('Tab');
  expect(await focused()).toBe(`a ${firstName} in ${first}`);
  await page.keyboard.press('Tab');
  expect(await focused()).toMatch(new RegExp(`^input Select .* in ${second}$`));
});
