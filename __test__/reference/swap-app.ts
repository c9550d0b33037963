// Drives a copy of the reference server (its src/ at $APP_SRC, swapped or not) like a user:
// createApp on a temp root with the in-memory object store, Bun.serve on a loopback port,
// fetch. Creates a stream, installs a touch-enabled state-protocol profile, appends State
// Protocol records, reads touch/meta cursors and runs touch/wait woken by writes (table key,
// watch key after template activation, keyIds only), 200 concurrent waits that must time out
// on schedule, and a stale cursor after restarting the app on the same root.
// Output: { uses, steps: [{ name, status, body?, elapsedMs? }], timeouts, restart }.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { output } from "./common.ts";

const APP = process.env.APP_SRC!;
const { createApp } = await import(`${APP}/app.ts`);
const { loadConfig } = await import(`${APP}/config.ts`);
const { MockR2Store } = await import(`${APP}/objectstore/mock_r2.ts`);
const K = await import(`${APP}/touch/live_keys.ts`);
const journalModule = await import(`${APP}/touch/touch_journal.ts`);
const poolModule = await import(`${APP}/touch/worker_pool.ts`);
const managerModule = await import(`${APP}/touch/manager.ts`);
const routesModule = await import(`${APP}/profiles/stateProtocol/routes.ts`);
const adapterModule = await import(`${APP}/sqlite/adapter.ts`);
const NATIVE = Symbol.for("durable-touch.native");
const compat = await import(Bun.resolveSync("durable-touch/compat", APP));

const root = mkdtempSync(join(tmpdir(), "dt-swap-app-"));
const cfg = { ...loadConfig(), rootDir: root, dbPath: `${root}/wal.sqlite`, port: 0 };
const JSON_HEADERS = { "content-type": "application/json" };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function start() {
  const app = createApp(cfg, new MockR2Store());
  const server = Bun.serve({ hostname: "127.0.0.1", port: 0, idleTimeout: 60, fetch: app.fetch });
  const base = `http://127.0.0.1:${server.port}`;
  return {
    request: (path: string, init?: RequestInit) => fetch(base + path, init),
    close: async () => {
      server.stop(true);
      await app.close();
    },
  };
}

const steps: any[] = [];
async function call(srv: ReturnType<typeof start>, name: string, path: string, init?: RequestInit & { json?: unknown }) {
  const t0 = performance.now();
  const res = await srv.request(path, init?.json === undefined ? init : { ...init, headers: JSON_HEADERS, body: JSON.stringify(init.json) });
  const text = await res.text();
  const elapsedMs = performance.now() - t0;
  let body: any = null;
  try {
    body = text === "" ? null : JSON.parse(text);
  } catch {
    body = text;
  }
  const step = { name, status: res.status, body, elapsedMs, nextOffset: res.headers.get("stream-next-offset") };
  steps.push(step);
  return step;
}

const post = (i: number, authorId: number, op: "insert" | "update" = "insert") => ({
  type: "public.posts",
  key: String(i),
  value: { id: i, authorId, status: "published", title: `t${i}` },
  ...(op === "update" ? { old_value: { id: i, authorId, status: "draft", title: `t${i}` } } : {}),
  headers: { operation: op, timestamp: new Date(1_700_000_000_000 + i).toISOString() },
});
const wait = (srv: ReturnType<typeof start>, name: string, body: unknown) => call(srv, name, "/v1/stream/x/touch/wait", { method: "POST", json: body });

/** Appends, then waits until the touch processor has scanned through the append. */
async function append(srv: ReturnType<typeof start>, name: string, records: unknown[]) {
  const step = await call(srv, name, "/v1/stream/x", { method: "POST", json: records });
  for (let i = 0; i < 400; i++) {
    const meta = await (await srv.request("/v1/stream/x/touch/meta")).json();
    if (meta.walScannedThrough === step.nextOffset) return step;
    await sleep(10);
  }
  throw new Error(`${name}: the touch processor did not reach ${step.nextOffset}`);
}

/** Starts a wait, writes `records` after 300 ms, resolves the wait's step. */
async function wakeBy(srv: ReturnType<typeof start>, name: string, body: unknown, records: unknown[]) {
  const w = wait(srv, name, body);
  await sleep(300);
  await call(srv, `${name}: write`, "/v1/stream/x", { method: "POST", json: records });
  return w;
}

let srv = start();
await call(srv, "create stream", "/v1/stream/x", { method: "PUT", headers: JSON_HEADERS });
await call(srv, "install profile", "/v1/stream/x/_profile", {
  method: "POST",
  json: { apiVersion: "durable.streams/profile/v1", profile: { kind: "state-protocol", touch: { enabled: true } } },
});
await append(srv, "append first records", [post(1, 42), post(2, 7)]);
const meta0 = await call(srv, "touch/meta", "/v1/stream/x/touch/meta?settle=flush&timeoutMs=2000");

const table = K.tableKeyFor("public.posts");
const otherTable = K.tableKeyFor("public.comments");
const tableWait = wakeBy(srv, "table-key wait", { cursor: meta0.body.cursor, keys: [table], interestMode: "coarse", timeoutMs: 4000 }, [post(3, 42)]);
const tableControl = wait(srv, "other table-key wait (control)", { cursor: meta0.body.cursor, keys: [otherTable], interestMode: "coarse", timeoutMs: 1500 });
await Promise.all([tableWait, tableControl]);

const activate = await call(srv, "activate template", "/v1/stream/x/touch/templates/activate", {
  method: "POST",
  json: { templates: [{ entity: "public.posts", fields: [{ name: "authorId", encoding: "int64" }] }] },
});
const templateId = K.templateIdFor("public.posts", ["authorId"]);
const watch42 = K.watchKeyFor(templateId, ["42"]);
const watch99 = K.watchKeyFor(templateId, ["99"]);
const meta1 = await call(srv, "touch/meta after activation", "/v1/stream/x/touch/meta?settle=flush&timeoutMs=2000");
// No templateIdsUsed: with them the route may widen the wait to the table key while the stream's
// touch mode is still "coarseOnly" (no fine waiter was active during the last batch).
const fine = (keys: string[], timeoutMs: number) => ({ cursor: meta1.body.cursor, keys, interestMode: "fine", timeoutMs });
await Promise.all([
  wakeBy(srv, "watch-key wait", fine([watch42], 4000), [post(4, 42, "update")]),
  wait(srv, "other watch-key wait (control)", fine([watch99], 1500)),
]);
const meta2 = await call(srv, "touch/meta before keyIds wait", "/v1/stream/x/touch/meta?settle=flush&timeoutMs=2000");
await wakeBy(srv, "keyIds-only wait", { cursor: meta2.body.cursor, keyIds: [K.watchKeyIdFor(templateId, ["42"]) >>> 0], interestMode: "fine", timeoutMs: 4000 }, [post(5, 42)]);

// 200 concurrent waits on keys nothing touches: half fine watch keys, half a coarse table key.
const meta3 = await call(srv, "touch/meta before the timeouts", "/v1/stream/x/touch/meta?settle=flush&timeoutMs=2000");
const TIMEOUT_MS = 1500;
const t0 = performance.now();
const many = await Promise.all(
  Array.from({ length: 200 }, async (_, i) => {
    const body =
      i % 2 === 0
        ? { cursor: meta3.body.cursor, keys: [K.watchKeyFor(templateId, [String(1000 + i)])], interestMode: "fine", timeoutMs: TIMEOUT_MS }
        : { cursor: meta3.body.cursor, keys: [otherTable], interestMode: "coarse", timeoutMs: TIMEOUT_MS };
    const s = performance.now();
    const res = await srv.request("/v1/stream/x/touch/wait", { method: "POST", headers: JSON_HEADERS, body: JSON.stringify(body) });
    const j: any = await res.json();
    return { status: res.status, touched: j.touched, stale: j.stale ?? false, kind: j.effectiveWaitKind, elapsedMs: performance.now() - s };
  })
);
const timeouts = {
  timeoutMs: TIMEOUT_MS,
  count: many.length,
  statuses: [...new Set(many.map((m) => m.status))],
  touched: many.filter((m) => m.touched).length,
  stale: many.filter((m) => m.stale).length,
  kinds: [...new Set(many.map((m) => m.kind))].sort(),
  minElapsedMs: Math.min(...many.map((m) => m.elapsedMs)),
  maxElapsedMs: Math.max(...many.map((m) => m.elapsedMs)),
  wallMs: performance.now() - t0,
};
const metaBefore = await call(srv, "touch/meta before restart", "/v1/stream/x/touch/meta");

// Restart on the same root: the old cursor is stale, the new one works.
await srv.close();
srv = start();
const stale = await wait(srv, "wait with the old cursor after restart", { cursor: metaBefore.body.cursor, keys: [table], interestMode: "coarse", timeoutMs: 2000 });
const metaAfter = await call(srv, "touch/meta after restart", "/v1/stream/x/touch/meta?settle=flush&timeoutMs=2000");
await wakeBy(srv, "table-key wait after restart", { cursor: metaAfter.body.cursor, keys: [table], interestMode: "coarse", timeoutMs: 4000 }, [post(6, 42)]);
const read = await call(srv, "read the stream back", "/v1/stream/x?offset=-1");
await srv.close();
rmSync(root, { recursive: true, force: true });

output({
  uses: {
    nativeJournal: journalModule.TouchJournal === compat.TouchJournal,
    nativePool: poolModule.TouchProcessorWorkerPool === compat.TouchProcessorWorkerPool,
    parseTouchCursor: journalModule.parseTouchCursor === compat.parseTouchCursor,
    nativeManager: managerModule.TouchProcessorManager[NATIVE] === true,
    nativeRoutes: routesModule.handleStateProtocolTouchRoute[NATIVE] === true,
    nativeSqlite: adapterModule.openSqliteDatabase[NATIVE] === true,
  },
  templateId,
  activated: activate.body,
  steps,
  timeouts,
  restart: { oldEpoch: metaBefore.body.epoch, newEpoch: metaAfter.body.epoch, stale: stale.body },
  records: Array.isArray(read.body) ? read.body.length : null,
});
// Once (of many runs) Bun stayed alive after app.close() with the reference's worker threads
// still up; everything is measured and written by now, so leave explicitly.
process.stdout.write("", () => process.exit(0));
