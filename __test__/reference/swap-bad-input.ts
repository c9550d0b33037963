// Bad requests on the touch routes (`touch/wait`, `touch/meta`, `touch/templates/activate`) of
// one copy of the reference server (its src/ at $APP_SRC, swapped or not): a table of cases,
// each sent once, recording what a client sees — the status, and the error's code and message,
// or for a 200 the reply's fields (in order) and its `touched` / `stale` /
// `effectiveWaitKind`, or an activation's `activated` ids, `denied` and `limits`.
// Output: { cases: [{ name, status, ... }] }.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { output } from "./common.ts";
import { K, append, exit, ok, processed, reply, sleep, startServer, touchStream, JSON_HEADERS } from "./swap-server.ts";

const root = mkdtempSync(join(tmpdir(), "dt-swap-bad-"));
const srv = await startServer(root);

const ENTITY = "public.posts";
const post = (i: number, authorId: number) => ({ type: ENTITY, key: String(i), value: { id: i, authorId, title: `t${i}` }, headers: { operation: "insert" } });
const decl = (entity: string, ...fields: Array<[string, string]>) => ({ entity, fields: fields.map(([name, encoding]) => ({ name, encoding })) });

// Stream w: waits and meta. A template on authorId; c0 is a cursor from before an append of
// authorId 42, c1 one from after it.
await touchStream(srv, "w");
ok(await srv.call("/v1/stream/w/touch/templates/activate", "POST", { templates: [decl(ENTITY, ["authorId", "int64"])] }), "activate");
const tid = K.templateIdFor(ENTITY, ["authorId"]);
const c0 = ok(await srv.call("/v1/stream/w/touch/meta?settle=flush&timeoutMs=3000"), "meta").body.cursor as string;
await processed(srv, "w", await append(srv, "w", [post(1, 42)]));
const c1 = ok(await srv.call("/v1/stream/w/touch/meta?settle=flush&timeoutMs=3000"), "meta").body.cursor as string;
if (c0 === c1) throw new Error("the append did not move the cursor");
const epoch = c1.split(":")[0];
const gen = Number(c1.split(":")[1]);
const otherEpoch = epoch === "0000000000000000" ? "1111111111111111" : "0000000000000000";
const table = K.tableKeyFor(ENTITY);
const watch7 = K.watchKeyFor(tid, ["7"]);
// Streams a* (activation; each case group on its own stream, so the rate limit and caps of one
// group do not reach another), nt (no touch profile).
for (const s of ["a", "a256", "arebind"]) await touchStream(srv, s);
ok(await srv.call("/v1/stream/nt", "PUT"), "create nt");

type Case = { name: string; method?: string; path: string; raw?: string; json?: unknown; abortAfterMs?: number };
const cases: Case[] = [];
const W = "/v1/stream/w/touch/wait";
const M = "/v1/stream/w/touch/meta";
const A = "/v1/stream/a/touch/templates/activate";
/** A wait that answers at once when it is valid (timeoutMs 0 unless `extra` says otherwise). */
const wait = (name: string, body: Record<string, unknown>, extra: Partial<Case> = {}) =>
  cases.push({ name: `wait: ${name}`, method: "POST", path: W, json: { cursor: c1, keys: [watch7], timeoutMs: 0, ...body }, ...extra });
const hex = (i: number) => i.toString(16).padStart(16, "0");
const range = (n: number, f: (i: number) => unknown) => Array.from({ length: n }, (_, i) => f(i));

// Bodies and methods.
cases.push({ name: "wait: bad JSON", method: "POST", path: W, raw: "{" });
cases.push({ name: "wait: empty body", method: "POST", path: W, raw: "" });
for (const [n, raw] of [["null", "null"], ["array", "[]"], ["number", "5"], ["string", '"x"'], ["true", "true"], ["array with a wait inside", JSON.stringify([{ cursor: c1, keys: [watch7] }])]]) {
  cases.push({ name: `wait: ${n} body`, method: "POST", path: W, raw });
}
for (const m of ["GET", "PUT", "DELETE", "PATCH"]) cases.push({ name: `wait: method ${m}`, method: m, path: W, ...(m === "GET" ? {} : { json: { cursor: c1, keys: [watch7] } }) });
cases.push({ name: "wait: unknown stream", method: "POST", path: "/v1/stream/missing/touch/wait", json: { cursor: c1, keys: [watch7] } });
cases.push({ name: "wait: stream without touch", method: "POST", path: "/v1/stream/nt/touch/wait", json: { cursor: c1, keys: [watch7] } });

// Cursors.
wait("no cursor", { cursor: undefined });
for (const [n, cursor] of [
  ["empty cursor", ""],
  ["blank cursor", "   "],
  ["cursor xyz", "xyz"],
  ["cursor 0123456789abcdef:-1", "0123456789abcdef:-1"],
  ["cursor with a fractional generation", `${epoch}:1.5`],
  ["cursor without a generation", `${epoch}:`],
  ["cursor without an epoch", `:${gen}`],
  ["cursor with a short epoch", `${epoch.slice(1)}:${gen}`],
  ["cursor with a plus sign", `${epoch}:+${gen}`],
  ["cursor number", 5],
  ["cursor null", null],
  ["cursor of another epoch", `${otherEpoch}:0`],
  ["cursor of another epoch, bad generation", `${otherEpoch}:x`],
  ["cursor with an uppercase epoch", `${epoch.toUpperCase()}:${gen}`],
  ["cursor with spaces around", `  ${c1}  `],
  ["cursor with leading zeros", `${epoch}:000${gen}`],
  ["cursor ahead of the journal", `${epoch}:${gen + 1000}`],
  ["cursor beyond u32", `${epoch}:99999999999`],
  ["cursor with 400 digits", `${epoch}:${"9".repeat(400)}`],
  ["cursor now", "now"],
  ["cursor NOW", "NOW"],
  ["cursor ' now '", " now "],
] as Array<[string, unknown]>) {
  wait(n, { cursor });
}

// Keys and keyIds.
wait("keys not an array", { keys: "k" });
wait("keys empty", { keys: [] });
wait("keys with an empty string", { keys: [""] });
wait("keys with a blank string", { keys: ["  "] });
wait("keys with a number", { keys: [1] });
wait("keys with null", { keys: [null] });
wait("keys null", { keys: null });
wait("keys with spaces and repeats", { keys: [` ${watch7} `, watch7, watch7.toUpperCase()] });
wait("keys that are not routing keys", { keys: ["some key", "ünïcode"] });
wait("no keys, keyIds only", { keys: undefined, keyIds: [K.watchKeyIdFor(tid, ["7"]) >>> 0] });
wait("no keys, keyIds empty", { keys: undefined, keyIds: [] });
wait("keyIds -1", { keyIds: [-1] });
wait("keyIds 1.5", { keyIds: [1.5] });
wait("keyIds 2^32", { keyIds: [2 ** 32] });
wait("keyIds max u32", { keys: undefined, keyIds: [2 ** 32 - 1] });
wait("keyIds as strings", { keys: undefined, keyIds: ["7", " 12 ", "0x10", ""] });
wait("keyIds true, null, [5]", { keys: undefined, keyIds: [true, null, [5]] });
wait("keyIds object", { keyIds: [{}] });
wait("keyIds with duplicates", { keys: undefined, keyIds: [1, 2, 1] });
wait("keyIds that repeat as numbers", { keys: undefined, keyIds: [1, "1"] });
wait("keyIds not an array", { keyIds: 5 });
wait("keys 1,024 distinct", { keys: range(1024, (i) => hex(i + 1)) });
wait("keys 1,025 distinct", { keys: range(1025, (i) => hex(i + 1)) });
wait("keys 1,025 that dedupe to 1,000", { keys: range(1025, (i) => hex((i % 1000) + 1)) });
wait("keys 50,000", { keys: range(50_000, (i) => hex(i + 1)) });
wait("keyIds 1,024 distinct", { keys: undefined, keyIds: range(1024, (i) => i + 1) });
wait("keyIds 1,025 distinct", { keys: undefined, keyIds: range(1025, (i) => i + 1) });
wait("keyIds 1,025 with duplicates", { keys: undefined, keyIds: range(1025, (i) => (i % 1000) + 1) });
wait("keyIds 50,000", { keys: undefined, keyIds: range(50_000, (i) => i + 1) });
wait("keyIds 50,000 with an invalid one first", { keys: undefined, keyIds: [-1, ...range(49_999, (i) => i + 1)] });

// Nested and oversized values where a scalar is expected (the binding copies at most 65,536
// values of a request).
wait("keyIds with a 70,000-element array inside", { keys: undefined, keyIds: [range(70_000, (i) => i)] });
wait("keys with a 70,000-element array inside", { keys: [range(70_000, (i) => i)] });
wait("a cursor of 1 MB", { cursor: "9".repeat(1 << 20) });
wait("an unknown field of 100,000 values", { junk: range(100_000, (i) => i) });
wait("exact with a 70,000-element array", { exact: range(70_000, (i) => i) });
wait("interestMode a 70,000-element array", { interestMode: range(70_000, (i) => i) });
wait("timeoutMs a 70,000-element array", { timeoutMs: range(70_000, (i) => i) });
wait("declareTemplates with 70,000 values inside", { declareTemplates: [{ ...decl(ENTITY, ["title", "string"]), junk: range(70_000, (i) => i) }] });
wait("declareTemplates valid, inactivityTtlMs a 70,000-element array", { declareTemplates: [decl(ENTITY, ["title", "string"])], inactivityTtlMs: range(70_000, (i) => i) });
wait("declareTemplates with a 70,000-value field name", { declareTemplates: [{ entity: ENTITY, fields: [{ name: range(70_000, (i) => i), encoding: "string" }] }] });

// Template ids.
wait("templateIdsUsed known", { templateIdsUsed: [tid] });
wait("templateIdsUsed unknown hex", { templateIdsUsed: ["ffffffffffffffff"] });
wait("templateIdsUsed uppercase", { templateIdsUsed: [tid.toUpperCase()] });
wait("templateIdsUsed short hex", { templateIdsUsed: ["ab"] });
wait("templateIdsUsed non-hex", { templateIdsUsed: ["zz"] });
wait("templateIdsUsed non-hex, coarse", { templateIdsUsed: ["not-hex!"], interestMode: "coarse" });
wait("templateIdsUsed 0x-prefixed", { templateIdsUsed: ["0x10"] });
wait("templateIdsUsed empty string", { templateIdsUsed: [""] });
wait("templateIdsUsed number", { templateIdsUsed: [5] });
wait("templateIdsUsed not an array", { templateIdsUsed: "abc" });
wait("templateIdsUsed empty", { templateIdsUsed: [] });
wait("templateIdsUsed 1,024", { templateIdsUsed: range(1024, (i) => hex(i + 1)) });
wait("templateIdsUsed 1,025", { templateIdsUsed: range(1025, (i) => hex(i + 1)) });
wait("templateIdsUsed with spaces and repeats", { templateIdsUsed: [` ${tid} `, tid] });
// 1,024 keys and 1,024 template ids: 2,048 wait keys, more than one journal wait takes.
const manyKeys = [table, ...range(1023, (i) => hex(i + 1))];
const manyTemplates = [tid, ...range(1023, (i) => hex(i + 1))];
wait("1,024 keys and 1,024 templateIdsUsed, touched at once", { cursor: c0, keys: manyKeys, templateIdsUsed: manyTemplates, timeoutMs: 1e12 });
wait("1,024 keys and 1,024 templateIdsUsed, parked", { keys: manyKeys.slice(1), templateIdsUsed: manyTemplates, timeoutMs: 1e12 }, { abortAfterMs: 400 });

// Other fields.
wait("interestMode medium", { interestMode: "medium" });
wait("interestMode null", { interestMode: null });
wait("interestMode coarse", { interestMode: "coarse" });
wait("interestMode coarse with templates", { interestMode: "coarse", templateIdsUsed: [tid] });
wait("exact yes", { exact: "yes" });
wait("exact on non-hex keys", { exact: true, keys: ["k1"] });
wait("exact on coarse", { exact: true, keys: [watch7], interestMode: "coarse" });
wait("exact on 17 keys", { exact: true, keys: range(17, (i) => hex(i + 1)) });
wait("exact on a routing key", { exact: true, keys: [watch7] });
wait("exact on an uppercase routing key with templates", { exact: true, keys: [watch7.toUpperCase()], templateIdsUsed: [tid] });
wait("exact false", { exact: false });

// Timeouts.
wait("timeoutMs -5", { timeoutMs: -5 });
wait("timeoutMs '5'", { timeoutMs: "5" });
wait("timeoutMs 'NaN'", { timeoutMs: "NaN" });
wait("timeoutMs null", { timeoutMs: null });
wait("timeoutMs true", { timeoutMs: true });
wait("timeoutMs 0.5", { timeoutMs: 0.5 });
wait("timeoutMs 1e12, touched at once", { cursor: c0, keys: [table], interestMode: "coarse", timeoutMs: 1e12 });
wait("timeoutMs 1e308, touched at once", { cursor: c0, keys: [table], timeoutMs: 1e308 });
wait("timeoutMs 1e12, parked", { timeoutMs: 1e12 }, { abortAfterMs: 400 });
wait("timeoutMs 150", { timeoutMs: 150 });
wait("timeoutMs omitted, parked", { timeoutMs: undefined }, { abortAfterMs: 400 });

// declareTemplates and inactivityTtlMs on a wait.
wait("declareTemplates 257", { declareTemplates: range(257, (i) => decl(ENTITY, [`f${i}`, "string"])) });
wait("declareTemplates with 0 fields", { declareTemplates: [decl(ENTITY)] });
wait("declareTemplates not an array", { declareTemplates: { entity: ENTITY } });
wait("declareTemplates with an unknown encoding", { declareTemplates: [decl(ENTITY, ["title", "float"])] });
wait("declareTemplates with a bad inactivityTtlMs", { declareTemplates: [decl(ENTITY, ["title", "string"])], inactivityTtlMs: -1 });
wait("inactivityTtlMs bad without declareTemplates", { inactivityTtlMs: "x" });
wait("declareTemplates valid", { declareTemplates: [decl(ENTITY, ["title", "string"])], inactivityTtlMs: 60_000 });
wait("keys invalid and cursor invalid", { keys: [""], cursor: "" });
wait("keyIds invalid and timeoutMs invalid", { keys: undefined, keyIds: [-1], timeoutMs: "x" });
wait("cursor invalid and timeoutMs invalid", { cursor: "", timeoutMs: "x" });
wait("timeoutMs invalid and templateIdsUsed invalid", { timeoutMs: "x", templateIdsUsed: [5] });
wait("templateIdsUsed non-hex and cursor malformed", { templateIdsUsed: ["zz"], cursor: "xyz" });
wait("interestMode invalid and declareTemplates invalid", { interestMode: "x", declareTemplates: [decl(ENTITY)] });
wait("cursor malformed and exact invalid for coarse", { cursor: "xyz", exact: true, interestMode: "coarse" });

// Meta.
for (const q of [
  "",
  "?settle=nope",
  "?settle=",
  "?settle=FLUSH",
  "?timeoutMs=abc",
  "?timeoutMs=",
  "?timeoutMs=Infinity",
  "?timeoutMs=-5",
  "?timeoutMs=1e12",
  "?settle=flush&timeoutMs=-5",
  "?settle=flush&timeoutMs=abc",
  "?settle=nope&timeoutMs=abc",
  "?settle=flush&timeoutMs=1e12",
  "?settle=flush&timeoutMs=0x10",
  "?settle=flush&settle=nope",
]) {
  cases.push({ name: `meta${q}`, method: "GET", path: M + q });
}
for (const m of ["POST", "PUT", "DELETE"]) cases.push({ name: `meta: method ${m}`, method: m, path: M, json: {} });
cases.push({ name: "meta: unknown stream", method: "GET", path: "/v1/stream/missing/touch/meta" });
cases.push({ name: "meta: stream without touch", method: "GET", path: "/v1/stream/nt/touch/meta" });

// Activation.
const activate = (name: string, json: unknown, path = A) => cases.push({ name: `activate: ${name}`, method: "POST", path, json });
cases.push({ name: "activate: bad JSON", method: "POST", path: A, raw: "{" });
cases.push({ name: "activate: empty body", method: "POST", path: A, raw: "" });
cases.push({ name: "activate: null body", method: "POST", path: A, raw: "null" });
cases.push({ name: "activate: array body", method: "POST", path: A, raw: JSON.stringify([decl(ENTITY, ["title", "string"])]) });
for (const m of ["GET", "PUT", "DELETE"]) cases.push({ name: `activate: method ${m}`, method: m, path: A, ...(m === "GET" ? {} : { json: { templates: [decl(ENTITY, ["title", "string"])] } }) });
activate("no templates", {});
activate("templates empty", { templates: [] });
activate("templates a string", { templates: "x" });
activate("templates an object", { templates: decl(ENTITY, ["title", "string"]) });
activate("257 templates", { templates: range(257, (i) => decl(ENTITY, [`f${i}`, "string"])) });
activate("0 fields", { templates: [decl(ENTITY)] });
activate("4 fields", { templates: [decl(ENTITY, ["a", "string"], ["b", "string"], ["c", "string"], ["d", "string"])] });
activate("fields not an array", { templates: [{ entity: ENTITY, fields: "title" }] });
activate("no entity", { templates: [{ fields: [{ name: "title", encoding: "string" }] }] });
activate("blank entity", { templates: [decl("  ", ["title", "string"])] });
activate("entity a number", { templates: [{ entity: 5, fields: [{ name: "title", encoding: "string" }] }] });
activate("blank field name", { templates: [decl(ENTITY, [" ", "string"])] });
activate("field name a number", { templates: [{ entity: ENTITY, fields: [{ name: 5, encoding: "string" }] }] });
activate("field a string", { templates: [{ entity: ENTITY, fields: ["title"] }] });
activate("one invalid template among valid ones", { templates: [decl(ENTITY, ["title", "string"]), decl(ENTITY)] });
activate("unknown encoding", { templates: [decl(ENTITY, ["title", "float"])] });
activate("uppercase encoding", { templates: [decl(ENTITY, ["title", "STRING"])] });
activate("missing encoding", { templates: [{ entity: ENTITY, fields: [{ name: "title" }] }] });
activate("duplicate field names", { templates: [decl(ENTITY, ["title", "string"], ["title", "string"])] });
activate("valid, unknown encoding, valid", {
  templates: [decl(ENTITY, ["title", "string"]), decl(ENTITY, ["slug", "bytes"]), decl(ENTITY, ["views", "float"]), decl(" public.users ", ["id", "int64"], ["org", "string"])],
});
activate("the same template twice in one call", { templates: [decl(ENTITY, ["rank", "int64"]), decl(ENTITY, ["rank", "int64"])] });
activate("fields in another order", { templates: [decl(ENTITY, ["b", "bool"], ["a", "datetime"]), decl(ENTITY, ["a", "datetime"], ["b", "bool"])] });
activate("a template with 70,000 values inside", { templates: [{ ...decl(ENTITY, ["title", "string"]), junk: range(70_000, (i) => i) }] });
activate("a field with 70,000 values inside", { templates: [{ entity: ENTITY, fields: [{ name: "title", encoding: "string", junk: range(70_000, (i) => i) }] }] });
activate("an entity of 70,000 values", { templates: [{ entity: range(70_000, (i) => i), fields: [{ name: "title", encoding: "string" }] }] });
activate("an unknown field of 100,000 values", { templates: [decl(ENTITY, ["title", "string"])], junk: range(100_000, (i) => i) });
activate("inactivityTtlMs a 70,000-element array", { templates: [decl(ENTITY, ["title", "string"])], inactivityTtlMs: range(70_000, (i) => i) });
activate("inactivityTtlMs -1", { templates: [decl(ENTITY, ["title", "string"])], inactivityTtlMs: -1 });
activate("inactivityTtlMs '5'", { templates: [decl(ENTITY, ["title", "string"])], inactivityTtlMs: "5" });
activate("inactivityTtlMs null", { templates: [decl(ENTITY, ["title", "string"])], inactivityTtlMs: null });
activate("inactivityTtlMs 1.5", { templates: [decl(ENTITY, ["title", "string"])], inactivityTtlMs: 1.5 });
activate("inactivityTtlMs 1e308", { templates: [decl(ENTITY, ["title", "string"])], inactivityTtlMs: 1e308 });
activate("invalid templates and a bad inactivityTtlMs", { templates: [decl(ENTITY)], inactivityTtlMs: -1 });
activate("256 templates (rate limit 100/min)", { templates: range(256, (i) => decl(ENTITY, [`f${i}`, "string"])) }, "/v1/stream/a256/touch/templates/activate");
activate("a template", { templates: [decl(ENTITY, ["owner", "string"])] }, "/v1/stream/arebind/touch/templates/activate");
activate("the same template with another encoding", { templates: [decl(ENTITY, ["owner", "int64"])] }, "/v1/stream/arebind/touch/templates/activate");
activate("the same template again", { templates: [decl(ENTITY, ["owner", "string"])] }, "/v1/stream/arebind/touch/templates/activate");
activate("unknown stream", { templates: [decl(ENTITY, ["title", "string"])] }, "/v1/stream/missing/touch/templates/activate");
activate("stream without touch", { templates: [decl(ENTITY, ["title", "string"])] }, "/v1/stream/nt/touch/templates/activate");

/** What a client sees of one reply. */
function seen(status: number, body: any) {
  const out: Record<string, unknown> = { status };
  if (body && typeof body === "object" && !Array.isArray(body)) {
    if (body.error && !body.stale) {
      out.error = body.error;
      out.fields = Object.keys(body);
    } else if ("activated" in body) {
      out.fields = Object.keys(body);
      out.activated = body.activated.map((a: any) => [a.templateId, a.state, Object.keys(a), /^[0-9a-f]{16}:\d+$/.test(a.activeFromTouchOffset)]);
      out.denied = body.denied;
      out.limits = body.limits;
    } else {
      out.fields = Object.keys(body);
      for (const f of ["touched", "stale", "effectiveWaitKind", "mode", "settled"]) if (f in body) out[f] = body[f];
      if (body.stale) out.error = body.error;
      if (typeof body.cursor === "string") out.cursorForm = /^[0-9a-f]{16}:\d+$/.test(body.cursor);
    }
  } else {
    out.body = body;
  }
  return out;
}

const results: any[] = [];
for (const c of cases) {
  const headers = c.raw !== undefined || c.json !== undefined ? JSON_HEADERS : undefined;
  const body = c.raw ?? (c.json === undefined ? undefined : JSON.stringify(c.json));
  const ctl = new AbortController();
  const t0 = performance.now();
  const pending = srv.fetch(c.path, { method: c.method ?? "GET", headers, body, signal: ctl.signal }).then(reply);
  if (c.abortAfterMs !== undefined) {
    const first = await Promise.race([pending.then((r) => ({ r })), sleep(c.abortAfterMs).then(() => null)]);
    if (first === null) {
      ctl.abort();
      await pending.catch(() => null);
      results.push({ name: c.name, status: "parked" });
    } else {
      results.push({ name: c.name, ...seen(first.r.status, first.r.body) });
    }
    continue;
  }
  const r = await pending;
  results.push({ name: c.name, ...seen(r.status, r.body), elapsedMs: Math.round(performance.now() - t0) });
}

// The server still answers, and the streams still process and wake.
const after = ok(await srv.call("/v1/stream/w/touch/meta?settle=flush&timeoutMs=3000"), "meta after");
const w = srv.call(W, "POST", { cursor: after.body.cursor, keys: [watch7], timeoutMs: 4000 });
await sleep(100);
await append(srv, "w", [post(2, 7)]);
const woken = await w;

await srv.close();
rmSync(root, { recursive: true, force: true });
output({ cases: results, afterwards: { status: woken.status, touched: woken.body?.touched } });
exit();
