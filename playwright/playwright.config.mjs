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
  webServer: {
    command: './serve.sh',
    url: 'http://127.0.0.1:18085/healthz',
    reuseExistingServer: false,
    timeout: 180_000,
    stdout: 'ignore',
    stderr: 'pipe',
  },
});
