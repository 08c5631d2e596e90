import { test, expect } from '@playwright/test';
import { accessible, ipmiConsoleNode, operatorAPI, shot, signIn, watchCSP } from './helpers.mjs';

// The serial console in the browser, on a real IPMI BMC (ipmi_sim with
// serial-over-LAN, serve.sh's ANVIL_IPMI_PORT) whose machine echoes what
// it is sent: the operator turns the console on from the node page, types
// in the terminal and sees the machine's echo, on the node page and on
// the console's own page; the lease's end closes the terminal (and turns
// the console off); the console page turns it on and off again. Axe and the Content-Security-Policy hold throughout.
test('the serial console: on, typed, echoed, closed by the lease, off', async ({ page, browser, request }, testInfo) => {
  test.setTimeout(240_000);
  const api = await operatorAPI(browser, request, 'console journey');
  const id = await ipmiConsoleNode(api, 'console-ipmi');
  const node = async () => api('GET', `/v1/nodes/${id}`);
  const noViolations = await watchCSP(page);
  const status = page.getByTestId('console-status');
  const rows = page.locator('.console-screen .xterm-rows');
  // Types a word and a carriage return into the terminal until the
  // machine's echo shows it: ipmitool may still be opening its SOL
  // session when the socket opens.
  const roundTrip = async (word) => {
    await expect(async () => {
      await page.locator('.console-screen .xterm').click();
      await page.keyboard.type(`${word}\r`);
      await expect(rows).toContainText(word, { timeout: 3_000 });
    }).toPass({ timeout: 45_000 });
  };
  try {
    await signIn(page, 'olga', 'operator-password-1');
    await page.goto(`/nodes/${id}`);
    const section = page.getByTestId('console');
    await expect(section.getByTestId('console-state')).toHaveText('The console is off.');
    await section.getByRole('button', { name: 'Turn the console on' }).click();
    await expect(page.locator('main .flash')).toHaveText('The console of console-ipmi is on.');
    expect((await node()).console_enabled).toBe(true);

    // In the node page: opened in place, typed into, echoed.
    await section.getByRole('button', { name: 'Open console' }).click();
    await expect(status).toHaveText(/^Connected/, { timeout: 15_000 });
    await expect(page.locator('.console-screen .xterm-helper-textarea')).toBeFocused();
    await roundTrip('hello-node-page');
    for (const [scheme, width] of [['light', 1440], ['light', 390], ['dark', 1440], ['dark', 390]]) {
      await page.emulateMedia({ colorScheme: scheme });
      await page.setViewportSize({ width, height: 900 });
      await accessible(page, `node page with its console@${width}, ${scheme}`);
      // The terminal fits its container at either width.
      const fits = await page.evaluate(() => {
        const screen = document.querySelector('.console-screen');
        return screen.querySelector('.xterm-screen').getBoundingClientRect().width <= screen.getBoundingClientRect().width;
      });
      expect(fits, `terminal wider than its box at ${width}`).toBe(true);
    }
    await page.emulateMedia({ colorScheme: 'light' });
    await page.setViewportSize({ width: 1440, height: 900 });
    await shot(page, testInfo, 'console-node-page');
    await section.getByRole('button', { name: 'Close' }).click();
    await expect(status).toHaveText('Closed: you closed it.');
    await expect(section.getByRole('button', { name: 'Open again' })).toBeFocused();
    await noViolations();

    // The console's own page connects at once.
    await section.getByRole('link', { name: 'Open the console on its own page' }).click();
    await expect(status).toHaveText(/^Connected/, { timeout: 15_000 });
    await roundTrip('hello-console-page');
    for (const [scheme, width] of [['light', 1440], ['light', 390], ['dark', 1440], ['dark', 390]]) {
      await page.emulateMedia({ colorScheme: scheme });
      await page.setViewportSize({ width, height: 900 });
      await accessible(page, `console page@${width}, ${scheme}`);
      if (scheme === 'dark' && width === 390) {
        await shot(page, testInfo, 'console-page-390-dark');
      }
    }
    await page.emulateMedia({ colorScheme: 'light' });
    await page.setViewportSize({ width: 1440, height: 900 });
    await shot(page, testInfo, 'console-page');

    // The lease ends: the conductor closes the console, the terminal
    // says so and why, and offers to open it again.
    await api('PATCH', `/v1/nodes/${id}`, [{ op: 'remove', path: '/lessee' }]);
    await expect(status).toHaveText(/^Closed: /, { timeout: 15_000 });
    await expect(rows).toContainText('console closed');
    await expect(status).toHaveText("Closed: the node's lease changed.");
    await expect(page.getByRole('button', { name: 'Open again' })).toBeVisible();
    await expect(page.getByRole('button', { name: 'Close' })).toBeHidden();
    await noViolations();

    // A change of lease also turns the console off (as the API's docs
    // say); the console page turns it on again, connects, and turns it
    // off after a confirmation.
    await expect.poll(async () => (await node()).console_enabled).toBe(false);
    await page.reload();
    await expect(page.getByTestId('console-why')).toHaveText('The console is off.');
    await page.getByRole('button', { name: 'Turn the console on' }).click();
    await expect(page.locator('main .flash')).toHaveText('The console of console-ipmi is on.');
    expect((await node()).console_enabled).toBe(true);
    await expect(status).toHaveText(/^Connected/, { timeout: 15_000 });
    page.once('dialog', (d) => d.accept());
    await page.getByRole('button', { name: 'Turn the console off' }).click();
    await expect(page.locator('main .flash')).toContainText('The console of console-ipmi is off');
    await expect(page.getByTestId('console-why')).toHaveText('The console is off.');
    expect((await node()).console_enabled).toBe(false);
    await noViolations();
  } finally {
    if ((await node()).console_enabled) {
      await api('PUT', `/v1/nodes/${id}/states/console`, { enabled: false });
      await expect.poll(async () => (await node()).console_enabled).toBe(false);
    }
    await api('DELETE', `/v1/nodes/${id}`);
  }
});
