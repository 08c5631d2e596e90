import { expect, test } from '@playwright/test';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(import.meta.url);
// Evaluated through the DevTools protocol rather than added as a script
// tag, which the portal's Content-Security-Policy rightly refuses.
const axeSource = fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

// accessible asserts that axe finds no serious or critical violation on the page.
// Each run brings its own 15 s to the test's timeout: axe takes a second
// on a long page and many more on a machine busy with the rest of the
// suite, so a test's budget grows with the pages it checks rather than
// each test guessing how many it can afford (a four-pass check of the
// 40-node list ran past the 30 s default in CI).
export async function accessible(page, name) {
  test.info().setTimeout(test.info().timeout + 15_000);
  await page.evaluate(`${axeSource}\n;undefined`);
  const result = await page.evaluate(async () => await window.axe.run(document, { resultTypes: ['violations'] }));
  const bad = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  expect(bad.map((v) => `${name}: ${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`)).toEqual([]);
}

// signIn uses the local login form and waits for the nodes page.
export async function signIn(page, user, password) {
  await page.goto('/login');
  await page.getByLabel('Username').fill(user);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page).toHaveURL(/\/nodes$/);
}

// operatorAPI calls Anvil's API as olga (system admin) with a token made
// in the portal; purpose becomes the token's description. Each call must
// answer 2xx and returns its JSON body, if any.
export async function operatorAPI(browser, request, purpose) {
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  await signIn(page, 'olga', 'operator-password-1');
  await page.goto('/account');
  await page.getByRole('checkbox', { name: 'admin' }).check();
  await page.getByLabel('Description').fill(purpose);
  await page.getByRole('button', { name: 'Create token' }).click();
  const token = await page.getByTestId('new-token').textContent();
  await ctx.close();
  const headers = { 'X-Auth-Token': token, 'X-OpenStack-Ironic-API-Version': 'latest' };
  return async (method, url, data) => {
    const res = await request.fetch(url, { method, headers, data });
    expect(res.status(), `${method} ${url}: ${await res.text()}`).toBeLessThan(300);
    return (res.headers()['content-type'] || '').includes('json') ? res.json() : null;
  };
}

// ports are this run's servers' ports, which playwright.config.mjs chose.
export const ports = {
  anvil: Number(process.env.ANVIL_E2E_PORT),
  fleet: Number(process.env.ANVIL_E2E_FLEET_PORT),
  sim: Number(process.env.ANVIL_E2E_SIM_PORT),
  op: Number(process.env.ANVIL_E2E_OP_PORT),
  ipmi: Number(process.env.ANVIL_E2E_IPMI_PORT),
};

// shot saves a screenshot as name.png: in $ANVIL_SHOTS_DIR when set (the
// screenshots task sets docs/screenshots), else among the test's own
// output, so an ordinary run leaves the source tree alone.
export async function shot(page, testInfo, name, options = {}) {
  const dir = process.env.ANVIL_SHOTS_DIR || testInfo.outputPath();
  fs.mkdirSync(dir, { recursive: true });
  // A bound of its own: a screenshot caught by a navigation can hang
  // until the test's timeout, and the failure should name the shot.
  await page.screenshot({ timeout: 60_000, ...options, path: path.join(dir, `${name}.png`) });
}

// ipmiConsoleNode enrols a node on this run's IPMI simulator (serve.sh's
// ANVIL_IPMI_PORT) with an ipmitool-socat console, owned and leased by
// projects no other journey uses, and returns its UUID. Only one such
// node may have its console on at a time: serve.sh gives the console
// listener one port.
export async function ipmiConsoleNode(api, name) {
  const node = await api('POST', '/v1/nodes', {
    name, driver: 'ipmi', console_interface: 'ipmitool-socat', owner: 'console-lab', lessee: 'console-lease',
    driver_info: { ipmi_address: '127.0.0.1', ipmi_port: ports.ipmi, ipmi_username: 'admin', ipmi_password: 'password', ipmi_cipher_suite: 3 },
  });
  return node.uuid;
}

// watchCSP collects every Content-Security-Policy violation a page
// reports, through a listener the policy cannot block (Playwright injects
// it); the function it returns asserts there was none.
export async function watchCSP(page) {
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));
  });
  const console = [];
  page.on('console', (m) => { if (/Content.Security.Policy/i.test(m.text())) console.push(m.text()); });
  return async () => {
    const seen = await page.evaluate(() => window.__csp);
    expect([...seen, ...console]).toEqual([]);
  };
}
