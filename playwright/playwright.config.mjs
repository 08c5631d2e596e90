import { defineConfig } from '@playwright/test';
import { execFileSync } from 'node:child_process';

// Debian's Chromium, never a downloaded browser.
const chromiumArgs = ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run'];

// The ports of this run's servers, free when the run starts, so two
// copies of the suite (two worktrees, two CI jobs) do not collide; one
// set in the environment is kept. The config is loaded again in each
// worker, which inherits the environment: the ports are chosen once, by
// the first load. Node's listen is asynchronous and the config is not,
// hence the child process. The ports are released before the servers
// bind them; the kernel hands out ephemeral ports in turn, so another
// process taking one in between is unlikely.
const portVars = ['ANVIL_E2E_PORT', 'ANVIL_E2E_FLEET_PORT', 'ANVIL_E2E_SIM_PORT', 'ANVIL_E2E_OP_PORT', 'ANVIL_E2E_IPMI_PORT',
  'ANVIL_E2E_CONSOLE_PORT'];
if (portVars.some((v) => !process.env[v])) {
  const script = `const net = require('net');
    const ls = [0, 1, 2, 3, 4, 5].map(() => net.createServer());
    Promise.all(ls.map((l) => new Promise((ok) => l.listen(0, '127.0.0.1', ok)))).then(() => {
      console.log(ls.map((l) => l.address().port).join(' '));
      ls.forEach((l) => l.close());
    });`;
  const free = execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' }).trim().split(' ');
  portVars.forEach((v, i) => { process.env[v] ||= free[i]; });
}
const { ANVIL_E2E_PORT: anvil, ANVIL_E2E_FLEET_PORT: fleet, ANVIL_E2E_SIM_PORT: sim, ANVIL_E2E_OP_PORT: op,
  ANVIL_E2E_IPMI_PORT: ipmi, ANVIL_E2E_CONSOLE_PORT: consolePort } = process.env;

export default defineConfig({
  testDir: './tests',
  timeout: 30_000,
  workers: 1,
  reporter: [['list']],
  use: {
    baseURL: `http://127.0.0.1:${anvil}`,
    browserName: 'chromium',
    launchOptions: { executablePath: '/usr/bin/chromium', args: chromiumArgs },
  },
  // The journeys' Anvil with 40 demo nodes, a Redfish simulator, an IPMI
  // one with serial-over-LAN and an OpenID provider; and a second one with 500 for the fleet-scale list
  // (fleet500.spec.mjs).
  webServer: [{
    command: `ANVIL_PORT=${anvil} ANVIL_SIM_PORT=${sim} ANVIL_OP_PORT=${op} ANVIL_IPMI_PORT=${ipmi} ANVIL_CONSOLE_PORT=${consolePort} ./serve.sh`,
    url: `http://127.0.0.1:${anvil}/healthz`,
    reuseExistingServer: false,
    timeout: 180_000,
    stdout: 'ignore',
    stderr: 'pipe',
  }, {
    command: `ANVIL_PORT=${fleet} ANVIL_DEMO=500 ./serve.sh`,
    url: `http://127.0.0.1:${fleet}/healthz`,
    reuseExistingServer: false,
    timeout: 180_000,
    stdout: 'ignore',
    stderr: 'pipe',
  }],
});
