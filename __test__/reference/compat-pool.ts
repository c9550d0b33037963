// The reference's TouchProcessorWorkerPool and durable-touch/compat's, side by side on one
// temporary DB (written by the reference's SqliteDurableStore), called in the same sequence so
// that request ids line up. Input: { scenarios } as in process.ts, where a template may carry
// raw `fieldsJson` / `encodingsJson` / `activeFromSourceOffset` column values (malformed rows
// included), plus `lifecycle: true` to run the error-case sequence. Output:
// { scenarios: [[{ reference, compat }]], lifecycle: [{ step, reference, compat }] } with each
// side the Result value ({ status, value | error }) or a thrown error ({ thrown }).
import { input, output, SRC, TMP } from "./common.ts";

const { SqliteDurableStore } = await import(`${SRC}/db/db.ts`);
const { loadConfig } = await import(`${SRC}/config.ts`);
const Ref = await import(`${SRC}/touch/worker_pool.ts`);
const Compat = await import("durable-touch/compat");

type Template = { templateId: string; entity: string; fieldsJson: string; encodingsJson: string; activeFromSourceOffset: number | string };
type Scenario = { rows: Array<{ tsMs: number; payloadBase64: string }>; templates: Template[]; requests: any[] };
const { scenarios = [], lifecycle = false } = input<{ scenarios?: Scenario[]; lifecycle?: boolean }>();

const dbPath = `${TMP}/pool.sqlite`;
const cfg = { ...loadConfig(), rootDir: TMP, dbPath };
const db = new SqliteDurableStore(dbPath, { cacheBytes: cfg.sqliteCacheBytes });
const insert = db.db.query(
  `INSERT INTO live_templates(stream, template_id, entity, fields_json, encodings_json, state, created_at_ms, last_seen_at_ms, inactivity_ttl_ms, active_from_source_offset)
   VALUES (?, ?, ?, ?, ?, 'active', 0, ?, 3600000, ?)`
);
function fill(stream: string, s: Scenario) {
  db.ensureStream(stream, { contentType: "application/json" });
  if (s.rows.length > 0) {
    const rows = s.rows.map((r) => ({ routingKey: null, contentType: "application/json", payload: new Uint8Array(Buffer.from(r.payloadBase64, "base64")), appendMs: BigInt(r.tsMs) }));
    const res = db.appendWalRows({ stream, startOffset: 0n, baseAppendMs: rows[0].appendMs, rows });
    if (res.status === "error") throw new Error(`append failed: ${JSON.stringify(res.error)}`);
  }
  s.templates.forEach((t, i) => insert.run(stream, t.templateId, t.entity, t.fieldsJson, t.encodingsJson, i + 1, t.activeFromSourceOffset));
}
scenarios.forEach((s, i) => fill(`s${i}`, s));

/** A Result as plain data; a thrown error as { thrown }. */
async function settle(p: Promise<any>): Promise<any> {
  try {
    const r = await p;
    if (r && typeof r === "object" && "status" in r) return r.status === "ok" ? { status: "ok", value: r.value } : { status: "error", error: r.error };
    return { returned: r ?? null };
  } catch (e: any) {
    return { thrown: { name: e?.name, tag: e?._tag, message: e?.message, isError: e instanceof Error } };
  }
}

const pools = { reference: new Ref.TouchProcessorWorkerPool(cfg, 1), compat: new Compat.TouchProcessorWorkerPool(cfg, 1) };
const both = async (call: (pool: any) => Promise<any>) => ({ reference: await settle(call(pools.reference)), compat: await settle(call(pools.compat)) });

const out: any = { scenarios: [], lifecycle: [] };
pools.reference.start();
pools.compat.start();
for (let si = 0; si < scenarios.length; si++) {
  const results = [];
  for (const req of scenarios[si].requests) results.push(await both((p) => p.processResult({ ...req, stream: `s${si}` })));
  out.scenarios.push(results);
}
await pools.reference.stop();
await pools.compat.stop();

if (lifecycle) {
  const base = { fromOffset: 0n, toOffset: 0n, maxRows: 500, maxBytes: 1 << 22, profile: { kind: "state-protocol", touch: { enabled: true } } };
  fill("life", { rows: [{ tsMs: 1000, payloadBase64: Buffer.from(JSON.stringify({ type: "public.t", key: "1", value: { id: 1 }, headers: { operation: "insert" } })).toString("base64") }], templates: [], requests: [] });
  const req = { ...base, stream: "life" };
  const step = async (name: string, call: (pool: any) => Promise<any>) => out.lifecycle.push({ step: name, ...(await both(call)) });
  const fresh = (n: number) => ({ reference: new Ref.TouchProcessorWorkerPool(cfg, n), compat: new Compat.TouchProcessorWorkerPool(cfg, n) });
  let p = fresh(1);
  const on = (fn: (pool: any) => Promise<any>) => (pool: any) => fn(pool === pools.reference ? p.reference : p.compat);
  await step("not started", on((pool) => pool.processResult(req)));
  await step("not started, process()", on((pool) => pool.process(req)));
  await step("stop before start", on((pool) => pool.stop()));
  await step("started", on(async (pool) => (pool.start(), pool.start(), pool.processResult(req))));
  await step("touch not enabled", on((pool) => pool.processResult({ ...req, profile: { kind: "state-protocol", touch: { enabled: false } } })));
  await step("not a state-protocol profile, process()", on((pool) => pool.process({ ...req, profile: { kind: "generic" } })));
  await step("stopped with pending requests", on(async (pool) => {
    const pending = [1, 2, 3, 4, 5].map(() => pool.processResult(req));
    await pool.stop();
    return { status: "ok", value: await Promise.all(pending).then((rs) => rs.map((r: any) => ({ status: r.status, error: r.error, value: r.value }))) };
  }));
  await step("after stop", on((pool) => pool.processResult(req)));
  await step("restart from stopped", on(async (pool) => (await pool.restart(), pool.processResult(req))));
  await step("restart while pending", on(async (pool) => {
    const pending = pool.processResult(req);
    await pool.restart();
    const after = await pool.processResult(req);
    const r: any = await pending;
    return { status: "ok", value: { pending: { status: r.status, error: r.error }, after: { status: after.status, value: after.value } } };
  }));
  await step("process() ok", on((pool) => pool.process(req)));
  await p.reference.stop();
  await p.compat.stop();
  p = fresh(0);
  await step("disabled, not started", on((pool) => pool.processResult(req)));
  await step("disabled", on(async (pool) => (pool.start(), pool.processResult(req))));
  await step("disabled, process()", on((pool) => pool.process(req)));
  await p.reference.stop();
  await p.compat.stop();
  p = fresh(2);
  p.reference.start();
  p.compat.start();
  await step("two workers, eight concurrent requests", on(async (pool) => {
    const rs = await Promise.all([0, 1, 2, 3, 4, 5, 6, 7].map((i) => pool.processResult(i % 3 === 2 ? { ...req, profile: { kind: "generic" } } : req)));
    return { status: "ok", value: rs.map((r: any) => ({ status: r.status, error: r.error, value: r.value })) };
  }));
  await p.reference.stop();
  await p.compat.stop();
}
db.close();
output(out);
