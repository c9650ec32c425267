// Helpers for the web page test: find Chromium and playwright-core, launch a headless browser, and
// measure element boxes (layout is checked by boxes and positions, not pixels, since fonts differ).
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

// $PITH_CHROMIUM, else Debian's chromium (or a Chrome) on the usual paths; null when there is none.
export function findChromium() {
  const candidates = [process.env.PITH_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser',
    '/usr/bin/google-chrome', '/usr/bin/google-chrome-stable'];
  return candidates.find((p) => p && existsSync(p)) || null;
}

// playwright-core from the repository's node_modules (PITH_NPM_DIR), or null.
export async function loadPlaywright() {
  const dir = process.env.PITH_NPM_DIR || process.env.PITH_SOURCE_DIR || process.cwd();
  try {
    const req = createRequire(path.join(dir, 'package.json'));
    const mod = await import(pathToFileURL(req.resolve('playwright-core')).href);
    return mod.chromium ? mod : mod.default;
  } catch {
    return null;
  }
}

export async function launchBrowser() {
  const pw = await loadPlaywright();
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  return pw.chromium.launch({ executablePath: findChromium(), headless: true, args: ['--no-sandbox'] });
}

// The bounding boxes of the selectors' first matches: {sel: {x, y, width, height, right, bottom}}.
export async function boxes(page, selectors) {
  const out = {};
  for (const sel of selectors) {
    const b = await page.locator(sel).first().boundingBox();
    if (!b) throw new Error(`${sel} is not visible`);
    out[sel] = { ...b, right: b.x + b.width, bottom: b.y + b.height };
  }
  return out;
}
