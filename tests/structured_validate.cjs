// Validates structured outputs against their JSON Schemas with ajv (2020-12 dialect) and ajv-formats:
// node tests/structured_validate.cjs PAIRS.json, PAIRS being [{schema, output}, ...]. Prints each
// failure and a summary; exits 1 when any output does not validate (test_structured_output.py).
const fs = require("fs");
const Ajv2020 = require("ajv/dist/2020");
const addFormats = require("ajv-formats");

const pairs = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
let bad = 0;
for (const [i, p] of pairs.entries()) {
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats(ajv);
    let validate;
    try {
        validate = ajv.compile(p.schema);
    } catch (e) {
        console.log(`schema ${i} does not compile in ajv: ${e.message}`);
        bad++;
        continue;
    }
    const value = JSON.parse(p.output);
    if (!validate(value)) {
        bad++;
        console.log(`output ${i} invalid: ${JSON.stringify(validate.errors).slice(0, 400)}\n  schema ${JSON.stringify(p.schema).slice(0, 400)}\n  output ${p.output.slice(0, 400)}`);
    }
}
console.log(`ajv: ${pairs.length - bad} of ${pairs.length} outputs valid`);
process.exit(bad ? 1 : 0);
