// Runs processor requests through the reference's real TouchProcessorWorkerPool (1 worker) on
// a temporary DB. Input: { scenarios: [{ rows: [{ tsMs, payloadBase64 }] (offsets 0..n-1),
// templates: [{ templateId, entity, fieldsJson, encodingsJson, activeFromSourceOffset }]
// (stored with ascending last_seen_at_ms, which is the order the worker's query returns),
// requests: [ProcessRequest minus type/id/stream] }] }; scenario i lives in stream "s<i>".
// Output: per scenario, one { ok: result } | { error } per request.
import { input, output, SRC, TMP } from "./common.ts";

const { SqliteDurableStore } = await import(`${SRC}/db/db.ts`);
const { loadConfig } = await import(`${SRC}/config.ts`);
const { TouchProcessorWorkerPool } = await import(`${SRC}/touch/worker_pool.ts`);

type Scenario = {
  rows: Array<{ tsMs: number; payloadBase64: string }>;
  templates: Array<{ templateId: string; entity: string; fieldsJson: string; encodingsJson: string; activeFromSourceOffset: number }>;
  requests: any[];
};
const { scenarios } = input<{ scenarios: Scenario[] }>();

const dbPath = `${TMP}/ref.sqlite`;
const cfg = { ...loadConfig(), rootDir: TMP, dbPath };
const db = new SqliteDurableStore(dbPath, { cacheBytes: cfg.sqliteCacheBytes });
const insert = db.db.query(
  `INSERT INTO live_templates(stream, template_id, entity, fields_json, encodings_json, state, created_at_ms, last_seen_at_ms, inactivity_ttl_ms, active_from_source_offset)
   VALUES (?, ?, ?, ?, ?, 'active', 0, ?, 3600000, ?)`
);
scenarios.forEach(({ rows, templates }, si) => {
  const stream = `s${si}`;
  db.ensureStream(stream, { contentType: "application/json" });
  if (rows.length === 0) return;
  const walRows = rows.map((r) => ({
    routingKey: null,
    contentType: "application/json",
    payload: new Uint8Array(Buffer.from(r.payloadBase64, "base64")),
    appendMs: BigInt(r.tsMs),
  }));
  const res = db.appendWalRows({ stream, startOffset: 0n, baseAppendMs: walRows[0].appendMs, rows: walRows });
  if (res.status === "error") throw new Error(`append failed: ${JSON.stringify(res.error)}`);
  templates.forEach((t, i) => insert.run(stream, t.templateId, t.entity, t.fieldsJson, t.encodingsJson, i + 1, t.activeFromSourceOffset));
});

const pool = new TouchProcessorWorkerPool(cfg, 1);
pool.start();
const results: any[] = [];
try {
  for (let si = 0; si < scenarios.length; si++) {
    const out = [];
    for (const req of scenarios[si].requests) {
      const res = await pool.processResult({ ...req, stream: `s${si}` });
      if (res.status === "error") out.push({ error: res.error.message });
      else {
        const { type, id, ...rest } = res.value;
        out.push({ ok: rest });
      }
    }
    results.push(out);
  }
} finally {
  await pool.stop();
  db.close();
}
output(results);
