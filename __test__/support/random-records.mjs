// Random processor inputs for the differential tests: realistic State Protocol records from
// the benchmark workload, mutated into every shape the processor must survive.
import { generateRecords, ENTITIES } from "../../testkit/gen-workload.mjs";

const FIELD_NAMES = ["tenantId", "status", "userId", "id", "priority", "updatedAt", "title", "missing", "0", "__proto__"];
const ENCODINGS = ["string", "int64", "bool", "datetime", "bytes"];

function deep(n) {
  return "[".repeat(n) + "1" + "]".repeat(n);
}

function mutateImage(r, img) {
  if (!img || typeof img !== "object") return img;
  const o = { ...img };
  switch (r.int(14)) {
    case 0: o.tenantId = r.pick([42, 1e21, -0, 3.5, true, null, { x: 1 }, ["t1"], " 7 ", "007"]); break;
    case 1: o.priority = r.pick([9007199254740993, 1e400 === Infinity ? 1.5 : 1, "3", null, -0]); break;
    case 2: o.updatedAt = r.pick(["2024-01-02T03:04:05Z", "2024-01-02", "Jan 5 2024 10:00 pm", "nope", 1704067200000, "1"]); break;
    case 3: o.status = r.pick([true, false, "done", "ｏｐｅｎ", "\u0000x", "é😀"]); break;
    case 4: delete o.tenantId; break;
    case 5: o.nested = { deep: [1, { a: 2 }] }; break;
    case 6: o.title = r.pick([{ a: 1 }, [1], null, 5]); break;
    case 7: o["5"] = "index"; o["1"] = "one"; break;
    case 8: o.userId = r.pick(["u1", "u2", 1, true]); break;
    default: break;
  }
  return o;
}

/** One payload (a string, or a Buffer for byte-level oddities). */
function mutate(r, line) {
  const rec = JSON.parse(line);
  switch (r.int(40)) {
    case 0: return line.slice(0, r.int(line.length));
    case 1: return r.pick(['{"headers":{"control":"reset"}}', '{"headers":{"control":"snapshot-start","offset":"1"}}', '{"headers":{"control":"snapshot-end"}}']);
    case 2: return r.pick(["[1,2]", "42", '"str"', "null", "{}", "[]", "true"]);
    case 3: rec.headers = r.pick([[], null, "insert", { operation: "upsert" }, { control: 1, operation: rec.headers.operation }, {}]); break;
    case 4: rec.type = r.pick(["", " ", 5, null, ` ${rec.type} `, "\u3000"]); break;
    case 5: rec.key = r.pick(["", " \t", 7, null]); break;
    case 6: rec.value = r.pick([null, [1, 2], "v", 3]); break;
    case 7: rec.old_value = r.pick([null, [1], "x"]); break;
    case 8: delete rec.old_value; break;
    case 9: delete rec.value; break;
    case 10: return JSON.stringify(rec).replace('"tenantId"', '"\\u0074enantId"');
    case 11: return JSON.stringify(rec).replace('"value":{', '"value":{"tenantId":"tDUP",');
    case 12: return JSON.stringify(rec).replace('"headers":', `"junk":${deep(300)},"headers":`);
    case 13: return Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(JSON.stringify(rec))]);
    case 14: return Buffer.from(JSON.stringify(rec).replace('"title":"', '"title":"\u00ff'), "latin1");
    case 15: return JSON.stringify(rec).replace('"status":"', '"status":"\\ud800');
    case 16: return " \n" + JSON.stringify(rec) + "\t\r\n";
    case 17: return JSON.stringify(rec) + " x";
    case 18: rec.type = r.pick(["public.\u4e2d", "Ωmega", "public.e0\u0000"]); break;
    case 19: return JSON.stringify(rec).replace('"operation":"', '"operation":"\\u0069') .replace('"\\u0069insert"', '"\\u0069nsert"');
    default: break;
  }
  if (rec.value) rec.value = mutateImage(r, rec.value);
  if (rec.old_value) rec.old_value = mutateImage(r, rec.old_value);
  return JSON.stringify(rec);
}

export function randomRows(r, n) {
  const lines = generateRecords({ n, seed: 1 + r.int(1000) });
  let ts = 1000;
  return lines.map((line) => {
    ts += r.chance(0.05) ? -r.int(30) : r.int(r.chance(0.3) ? 200 : 40);
    const p = r.chance(0.35) ? mutate(r, line) : line;
    return { tsMs: ts, payload: Buffer.isBuffer(p) ? p : Buffer.from(p) };
  });
}

export function randomTemplates(r, keys) {
  const n = r.int(10);
  const out = [];
  for (let i = 0; i < n; i++) {
    const entity = r.chance(0.1) ? r.pick([" public.e1 ", "public.\u4e2d", "Ωmega", " "]) : r.pick(ENTITIES);
    const k = 1 + r.int(r.chance(0.05) ? 4 : 3);
    const names = [...new Set([...Array(k)].map(() => r.pick(FIELD_NAMES)))];
    const fields = keys.canonicalizeTemplateFields(names.map((name) => ({ name, encoding: r.chance(0.03) ? "uuid" : r.pick(ENCODINGS) })));
    let templateId = keys.templateId(entity, fields.map((f) => f.name));
    if (r.chance(0.05)) templateId = r.pick([templateId.toUpperCase(), templateId.slice(1), "zz" + templateId.slice(2)]);
    let encodings = fields.map((f) => f.encoding);
    if (r.chance(0.03)) encodings = encodings.slice(1);
    if (out.some((t) => t.templateId === templateId)) continue; // (stream, template_id) is the primary key
    out.push({ templateId, entity, fields: fields.map((f) => f.name), encodings, activeFromSourceOffset: r.chance(0.2) ? r.int(200) : 0 });
  }
  return out;
}

export function randomRequest(r, n, templateIds) {
  const from = r.chance(0.6) ? 0 : r.int(n);
  const to = r.chance(0.7) ? n - 1 : from - 1 + r.int(n - from + 1);
  const touch = { enabled: r.chance(0.97) };
  const opt = (name, values) => {
    const v = r.pick(values);
    if (v !== undefined) touch[name] = v;
  };
  opt("coarseIntervalMs", [undefined, 1, 50, 100, 1000, 0.5]);
  opt("touchCoalesceWindowMs", [undefined, 1, 10, 100, 1000]);
  opt("onMissingBefore", [undefined, "coarse", "skipBefore", "skipBefore", "error"]);
  opt("fineTouchBudgetPerBatch", [undefined, undefined, 5, 2000]);
  const req = {
    fromOffset: BigInt(from),
    toOffset: BigInt(to),
    profile: { kind: r.chance(0.98) ? "state-protocol" : "generic", touch },
    maxRows: r.pick([1, 50, 500, 10000]),
    maxBytes: r.pick([100, 5000, 4 * 1024 * 1024]),
  };
  const set = (name, values) => {
    const v = r.pick(values);
    if (v !== "absent") req[name] = v;
  };
  set("emitFineTouches", ["absent", true, true, false]);
  set("fineTouchBudget", ["absent", null, null, 0, 1, 3, 17, 200, 2000, 2.5]);
  set("fineGranularity", ["absent", "key", "key", "template", "KEY"]);
  set("processingMode", ["absent", "full", "hotTemplatesOnly"]);
  set("filterHotTemplates", ["absent", false, false, true]);
  if (req.filterHotTemplates) req.hotTemplateIds = [...templateIds.filter(() => r.chance(0.5)), ...(r.chance(0.3) ? ["ABCDEF0123456789", "short"] : [])];
  return req;
}
