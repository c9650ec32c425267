// ctest entry point for the server tests: skips (exit 77, saying why) when the OpenAI SDK, the pith
// binary or a model is missing, otherwise runs every tests/server/*.test.mjs with node's test runner.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { findModel, loadOpenAI } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const skip = (why) => {
  console.log(`SKIP: ${why}`);
  process.exit(77);
};
if (!process.env.PITH_BIN || !existsSync(process.env.PITH_BIN)) skip('PITH_BIN does not name the pith binary');
if (!(await loadOpenAI())) skip('the openai npm package is not installed (run `npm ci` in the source tree)');
if (!findModel()) skip('no test model: neither $PITH_SHARED/models/stories260K nor assets/default.gguf');

const files = process.argv.length > 2 ? process.argv.slice(2)
  : readdirSync(here).filter((f) => f.endsWith('.test.mjs')).sort().map((f) => path.join(here, f));
const r = spawnSync(process.execPath, ['--test', '--test-reporter=spec', ...files], { stdio: 'inherit' });
process.exit(r.status ?? 1);
