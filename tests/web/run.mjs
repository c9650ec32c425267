// ctest entry point for the web page test: skips (exit 77, saying why) when the pith binary, its default
// model, Chromium or the playwright-core npm package is missing, otherwise runs tests/web/*.test.mjs
// with node's test runner.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { findChromium, loadPlaywright } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const skip = (why) => {
  console.log(`SKIP: ${why}`);
  process.exit(77);
};
const bin = process.env.PITH_BIN;
if (!bin || !existsSync(bin)) skip('PITH_BIN does not name the pith binary');
if (!existsSync(path.join(path.dirname(bin), 'pith-default.gguf'))) skip('no default model next to the pith binary');
if (!findChromium()) skip('Chromium is not installed (apt-get install chromium, or set PITH_CHROMIUM)');
if (!(await loadPlaywright())) skip('the playwright-core npm package is not installed (run `npm ci` in the source tree)');

const files = process.argv.length > 2 ? process.argv.slice(2)
  : readdirSync(here).filter((f) => f.endsWith('.test.mjs')).sort().map((f) => path.join(here, f));
const r = spawnSync(process.execPath, ['--test', '--test-reporter=spec', ...files], { stdio: 'inherit' });
process.exit(r.status ?? 1);
