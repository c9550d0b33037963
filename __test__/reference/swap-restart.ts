// One server's life on a data dir that outlives it ($DATA_DIR; the copy at $APP_SRC, swapped or
// not): the test runs phase "first" on one copy, swaps or undoes the copy, then runs phase
// "second" on the same dir, so a server starts on the state the other one left.
//
// - first: a touch stream with a rate limit of 2 activations a minute; activates two templates,
//   appends, runs a wait woken by an append, lets everything process (meta's walScannedThrough
//   reaches the tail) and closes; then restarts with processing off, appends one last batch of
//   5 rows and closes again.
// - second: what the server sees at start (meta); two new templates (the rate limit's two
//   tokens), then the first two again (active ones need no token: `activated`; retired ones
//   would be `rate_limited`); meta until walScannedThrough reaches the first server's tail
//   (rows it processed on the way: scanRowsTotal); the first server's cursor (stale, or kept
//   and touched by the last rows when both servers are swapped); waits
//   woken by a new append; the stream read back.
import { output, input } from "./common.ts";
import { K, append, exit, ok, sleep, startServer, touchStream, type Server } from "./swap-server.ts";

const DIR = process.env.DATA_DIR!;
const { phase, ...prev } = input<{ phase: "first" | "second"; lastOffset?: string; cursor?: string; templates?: string[] }>();
const S = "orders";
const ENTITY = "public.orders";
const decl = (field: string, encoding = "string") => ({ entity: ENTITY, fields: [{ name: field, encoding }] });
const T1 = decl("customer");
const T2 = decl("region");
const N1 = decl("status");
const N2 = decl("total", "int64");
const idOf = (d: { fields: Array<{ name: string }> }) => K.templateIdFor(ENTITY, d.fields.map((f) => f.name));
const order = (i: number, customer: string, region = "eu") => ({
  type: ENTITY,
  key: String(i),
  value: { id: i, customer, region, status: "new", total: i },
  headers: { operation: "insert" },
});
const activate = async (srv: Server, templates: unknown[]) => {
  const b = ok(await srv.call(`/v1/stream/${S}/touch/templates/activate`, "POST", { templates }), "activate").body;
  return { activated: b.activated.map((a: any) => a.templateId), denied: b.denied };
};
const meta = async (srv: Server, q = "") => ok(await srv.call(`/v1/stream/${S}/touch/meta${q}`), "meta").body;
/** Polls meta until walScannedThrough is `offset`; resolves that meta (throws after 10 s). */
async function scannedThrough(srv: Server, offset: string) {
  const until = performance.now() + 10_000;
  for (;;) {
    const m = await meta(srv);
    if (m.walScannedThrough === offset) return m;
    if (performance.now() > until) throw new Error(`walScannedThrough stayed at ${m.walScannedThrough}, not ${offset}`);
    await sleep(20);
  }
}
/** A wait parked on `body`'s keys, woken by appending `records` 150 ms later. */
async function wokenBy(srv: Server, body: Record<string, unknown>, records: unknown[]) {
  const w = srv.call(`/v1/stream/${S}/touch/wait`, "POST", { timeoutMs: 5000, ...body });
  await sleep(150);
  const next = await append(srv, S, records);
  const r = await w;
  return { next, status: r.status, touched: r.body?.touched, effectiveWaitKind: r.body?.effectiveWaitKind };
}
async function readAll(srv: Server) {
  const rows: any[] = [];
  let offset = "-1";
  for (let page = 0; page < 1000; page++) {
    const res = await srv.fetch(`/v1/stream/${S}?offset=${encodeURIComponent(offset)}`);
    const body = await res.json();
    rows.push(...body);
    offset = res.headers.get("stream-next-offset")!;
    if (res.headers.get("stream-up-to-date") === "true") break;
  }
  return rows;
}

const srv = await startServer(DIR);
if (phase === "first") {
  await touchStream(srv, S, { templates: { activationRateLimitPerMinute: 2 } });
  const activated = await activate(srv, [T1, T2]);
  let next = await append(srv, S, Array.from({ length: 50 }, (_, i) => order(i, `c${i % 5}`)));
  await scannedThrough(srv, next);
  const m0 = await meta(srv, "?settle=flush&timeoutMs=3000");
  const woken = await wokenBy(srv, { cursor: m0.cursor, keys: [K.watchKeyFor(idOf(T1), ["c-new"])], templateIdsUsed: [idOf(T1)] }, [order(50, "c-new")]);
  const settled = await scannedThrough(srv, woken.next);
  const cursor = (await meta(srv, "?settle=flush&timeoutMs=3000")).cursor;
  await srv.close();
  // One last batch through the same server with processing off (touchWorkers 0), so the next
  // server starts with the checkpoint 5 rows behind the tail.
  const idle = await startServer(DIR, { touchWorkers: 0 });
  const lastOffset = await append(idle, S, Array.from({ length: 5 }, (_, i) => order(51 + i, "c-last")));
  await sleep(300);
  const idleMeta = await meta(idle);
  await idle.close();
  output({
    templates: [idOf(T1), idOf(T2)],
    activated,
    woken,
    settled: { walScannedThrough: settled.walScannedThrough, activeTemplates: settled.activeTemplates },
    cursor,
    lastOffset,
    idle: { walScannedThrough: idleMeta.walScannedThrough },
  });
} else {
  const atStart = await meta(srv);
  const fresh = await activate(srv, [N1, N2]);
  const again = await activate(srv, [T1, T2]);
  const caughtUp = await scannedThrough(srv, prev.lastOffset!);
  const staleReply = ok(await srv.call(`/v1/stream/${S}/touch/wait`, "POST", { cursor: prev.cursor, keys: [K.tableKeyFor(ENTITY)], timeoutMs: 1000 }), "stale wait").body;
  const m = await meta(srv, "?settle=flush&timeoutMs=3000");
  const fine = await wokenBy(srv, { cursor: m.cursor, keys: [K.watchKeyFor(idOf(T1), ["c-after"])], templateIdsUsed: [idOf(T1)] }, [order(100, "c-after")]);
  const m2 = await meta(srv, "?settle=flush&timeoutMs=3000");
  const coarse = await wokenBy(srv, { cursor: m2.cursor, keys: [K.tableKeyFor(ENTITY)], interestMode: "coarse" }, [order(101, "c-x")]);
  const tail = await scannedThrough(srv, coarse.next);
  const rows = await readAll(srv);
  await srv.close();
  output({
    atStart: { activeTemplates: atStart.activeTemplates, walScannedThrough: atStart.walScannedThrough, epoch: atStart.epoch },
    fresh,
    again,
    caughtUp: { walScannedThrough: caughtUp.walScannedThrough, scanRowsTotal: caughtUp.scanRowsTotal, activeTemplates: caughtUp.activeTemplates },
    stale: { stale: staleReply.stale, code: staleReply.error?.code, touched: staleReply.touched },
    fine,
    coarse,
    tail: { walScannedThrough: tail.walScannedThrough, activeTemplates: tail.activeTemplates },
    rows: rows.map((r) => r.key ?? r.value?.id),
  });
}
exit();
