// Validates constrained generations (hearth grammar --generate JSON lines)
// against their schemas with ajv, an independent JSON Schema validator.
// Usage: node grammar_validate.mjs OUT.jsonl  -> prints a summary JSON line;
// exit 1 if any output that ended is invalid.
import fs from "node:fs";
import { createRequire } from "node:module";
const require = createRequire(process.env.HEARTH_ROOT + "/.deps/npm/");
const Ajv = require("ajv").default;
const Ajv2019 = require("ajv/dist/2019").default;
const Ajv2020 = require("ajv/dist/2020").default;

// The formats hearth supports, checked independently of its grammars.
const formats = {
  "date": (s) => isDate(s),
  "time": (s) => /^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$/.test(s),
  "date-time": (s) => {
    const m = /^(.{10})[Tt ](.*)$/.exec(s);
    return !!m && isDate(m[1]) && formats.time(m[2]);
  },
  "email": /^[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/i,
  "uuid": /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i,
  "ipv4": /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/,
};
function isDate(s) {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(s);
  if (!m) return false;
  const y = +m[1], mo = +m[2], d = +m[3];
  const leap = (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
  return mo >= 1 && mo <= 12 && d >= 1 && d <= days[mo - 1];
}

// Draft-04 documents: ajv 8 speaks draft-07; rewrite what changed
// (boolean exclusiveMinimum/Maximum, "id") and drop the draft-04 $schema.
function draft4(s) {
  if (Array.isArray(s)) return s.map(draft4);
  if (!s || typeof s !== "object") return s;
  const o = {};
  for (const [k, v] of Object.entries(s)) o[k] = draft4(v);
  if (typeof o.$schema === "string" && /draft-0[346]/.test(o.$schema)) delete o.$schema;
  if (o.exclusiveMinimum === true && typeof o.minimum === "number") { o.exclusiveMinimum = o.minimum; delete o.minimum; }
  if (o.exclusiveMaximum === true && typeof o.maximum === "number") { o.exclusiveMaximum = o.maximum; delete o.maximum; }
  if (o.exclusiveMinimum === false) delete o.exclusiveMinimum;
  if (o.exclusiveMaximum === false) delete o.exclusiveMaximum;
  if (typeof o.id === "string" && !("$id" in o)) { delete o.id; }
  return o;
}

function makeAjv(schema) {
  const s = String(schema.$schema || "");
  const opts = { strict: false, allErrors: false, validateFormats: true, formats, logger: false };
  if (s.includes("2020-12")) return new Ajv2020(opts);
  if (s.includes("2019-09")) return new Ajv2019(opts);
  return new Ajv(opts);
}

const lines = fs.readFileSync(process.argv[2], "utf8").split("\n").filter((l) => l.trim());
const cache = new Map();
const st = { samples: 0, ended: 0, valid: 0, invalid: 0, not_json: 0, not_ended: 0, validator_errors: 0, schemas: new Set() };
const bad = [];
const verrs = [];
for (const line of lines) {
  const r = JSON.parse(line);
  if (!("text" in r)) continue;
  st.samples++;
  st.schemas.add(r.file);
  if (!r.ended) { st.not_ended++; continue; }
  st.ended++;
  let validate = cache.get(r.file);
  if (validate === undefined) {
    const f = JSON.parse(fs.readFileSync(r.file, "utf8"));
    const schema = f.schema && Array.isArray(f.tests) ? f.schema : f;
    try { validate = makeAjv(schema).compile(draft4(schema)); } catch (e) { validate = null; verrs.push(r.id + ": " + e.message.slice(0, 120)); }
    cache.set(r.file, validate);
  }
  if (!validate) { st.validator_errors++; continue; }
  let data;
  try { data = JSON.parse(r.text); } catch (e) { st.not_json++; bad.push({ id: r.id, why: "not JSON", text: r.text.slice(0, 300) }); continue; }
  if (validate(data)) st.valid++;
  else { st.invalid++; bad.push({ id: r.id, why: JSON.stringify(validate.errors[0]), text: r.text.slice(0, 300) }); }
}
st.schemas = st.schemas.size;
console.log(JSON.stringify(st));
for (const b of bad.slice(0, 20)) console.error(JSON.stringify(b));
if (process.env.VERBOSE) for (const v of verrs) console.error("ajv could not compile " + v);
process.exit(st.invalid || st.not_json ? 1 : 0);
