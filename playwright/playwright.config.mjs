import { defineConfig } from '@playwright/test';

// Debian's Chromium, never a downloaded browser.
const chromiumArgs = ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run'];

export default defineConfig({
  testDir: './tests',
  timeout: 30_000,
  workers: 1,
  reporter: [['list']],
  use: {
    baseURL: 'http://127.0.0.1:18085',
    browserName: 'chromium',
    launchOptions: { executablePath: '/usr/bin/chromium', args: chromiumArgs },
  },
  // The journeys' Anvil with 40 demo nodes, and a second one with 500
  // for the fleet-scale list (fleet500.spec.mjs).
  webServer: [{
    command: './serve.sh',
    url: 'http://127.0.0.1:18085/healthz',
    reuseExistingServer: false,
    timeout: 180_000,
    stdout: 'ignore',
    stderr: 'pipe',
  }, {
    command: 'ANVIL_PORT=18086 ANVIL_DEMO=500 ./serve.sh',
    url: 'http://127.0.0.1:18086/healthz',
    reuseExistingServer: false,
    timeout: 180_000,
    stdout: 'ignore',
    stderr: 'pipe',
  }],
});
