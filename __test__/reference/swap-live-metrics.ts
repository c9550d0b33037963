// What the server's `live.metrics` stream says about touch processing, on a copy of the
// server ($APP_SRC, swapped or not) run with its processing loop: two touch streams, templates
// activated over HTTP (one refreshed, one evicted by the per-entity cap, one declared by a
// wait), rows appended and processed, the templates left to retire (a short inactivity TTL and
// `gcIntervalMs`), then one forced `live.metrics` flush on top of its 1 s timer. Prints, per
// stream, the `live.tick` counters summed over every tick and the lifecycle event rows.
import { append, exit, ok, processed, sleep, startServer, touchStream, K } from "./swap-server.ts";
import { output } from "./common.ts";

const root = `${process.env.REF_TMP}/data`;
const srv = await startServer(root, { touchCheckIntervalMs: 50, touchWorkers: 1 });
const METRICS = "live.metrics";
const ENTITY = "public.posts";
const TTL_MS = 300;
const touch = { templates: { gcIntervalMs: 50, maxActiveTemplatesPerEntity: 2 } };
const decl = (...fields: [string, string][]) => ({ entity: ENTITY, fields: fields.map(([name, encoding]) => ({ name, encoding })) });
const T1 = decl(["authorId", "int64"]);
const T2 = decl(["status", "string"]);
const T3 = decl(["authorId", "int64"], ["status", "string"]);
const T4 = { entity: "public.users", fields: [{ name: "id", encoding: "int64" }] };
const post = (i: number) => ({
  type: ENTITY,
  key: String(i),
  value: { id: i, authorId: i % 7, status: i % 2 ? "draft" : "published" },
  headers: { operation: "insert", timestamp: new Date(1_700_000_000_000 + i).toISOString() },
});
const user = (i: number) => ({ type: "public.users", key: String(i), value: { id: i }, headers: { operation: "insert" } });
const activate = async (stream: string, templates: unknown[]) =>
  ok(await srv.call(`/v1/stream/${stream}/touch/templates/activate`, "POST", { templates, inactivityTtlMs: TTL_MS }), "activate").body;
const meta = async (stream: string) => ok(await srv.call(`/v1/stream/${stream}/touch/meta`), "meta").body;

async function readAll(stream: string) {
  const rows: any[] = [];
  let offset = "-1";
  for (let page = 0; page < 1000; page++) {
    const res = await srv.fetch(`/v1/stream/${encodeURIComponent(stream)}?offset=${encodeURIComponent(offset)}`);
    if (res.status !== 200) throw new Error(`read ${stream}: ${res.status} ${await res.text()}`);
    rows.push(...(await res.json()));
    offset = res.headers.get("stream-next-offset")!;
    if (res.headers.get("stream-up-to-date") === "true") break;
  }
  return rows;
}

try {
  await touchStream(srv, "m", touch);
  await touchStream(srv, "n", touch);
  // Five activations on m: T1, T2; T1 again (refreshed, still an activation); T3, which the
  // per-entity cap of 2 makes evict the least recently seen (T2); T4 declared by a wait.
  const first = await activate("m", [T1, T2]);
  await sleep(20);
  await activate("m", [T1]);
  await sleep(20);
  await activate("m", [T3]);
  const cursor = (await meta("m")).cursor;
  ok(await srv.call(`/v1/stream/m/touch/wait`, "POST", { cursor, keys: [K.tableKeyFor("public.users")], declareTemplates: [T4], inactivityTtlMs: TTL_MS, timeoutMs: 10 }), "declaring wait");

  await append(srv, "m", Array.from({ length: 120 }, (_, i) => post(i)));
  await append(srv, "m", [user(1), user(2)]);
  const mLast = await append(srv, "m", Array.from({ length: 30 }, (_, i) => post(200 + i)));
  const nLast = await append(srv, "n", Array.from({ length: 30 }, (_, i) => user(i)));
  await processed(srv, "m", mLast);
  await processed(srv, "n", nLast);

  // Every template retires once its TTL has passed (the GC runs every 50 ms).
  const until = performance.now() + 5000;
  while ((await meta("m")).activeTemplates > 0) {
    if (performance.now() > until) throw new Error("the templates did not retire");
    await sleep(25);
  }
  // Then one flush of everything counted so far (the swapped manager hands its records over
  // every 200 ms), on top of those of the 1 s timer.
  await sleep(450);
  const touchManager = srv.app.deps.touch;
  await touchManager.liveMetrics.flushTick();

  const rows = await readAll(METRICS);
  const sum = (xs: any[], f: (x: any) => number) => xs.reduce((a, x) => a + (Number(f(x)) || 0), 0);
  const streams: Record<string, any> = {};
  for (const s of ["m", "n"]) {
    const ticks = rows.filter((r) => r.type === "live.tick" && r.stream === s);
    const events = rows.filter((r) => r.stream === s && String(r.type).startsWith("live.template_"));
    streams[s] = {
      ticks: ticks.length,
      templates: {
        activated: sum(ticks, (t) => t.templates.activated),
        retired: sum(ticks, (t) => t.templates.retired),
        evicted: sum(ticks, (t) => t.templates.evicted),
        activationDenied: sum(ticks, (t) => t.templates.activationDenied),
      },
      processor: {
        eventsIn: sum(ticks, (t) => t.processor.eventsIn),
        changesOut: sum(ticks, (t) => t.processor.changesOut),
        errors: sum(ticks, (t) => t.processor.errors),
        scannedBatches: sum(ticks, (t) => t.processor.scannedBatches),
        scannedButEmitted0Batches: sum(ticks, (t) => t.processor.scannedButEmitted0Batches),
        processedThroughDelta: sum(ticks, (t) => t.processor.processedThroughDelta),
        touchesEmittedDelta: sum(ticks, (t) => t.processor.touchesEmittedDelta),
        // p50 is a bucket bound (at least 1 ms) once a batch had a commit lag, 0 ms included.
        commitLagTicks: ticks.filter((t) => t.processor.commitLagMsP50 > 0).length,
        lastMode: ticks.length > 0 ? ticks[ticks.length - 1].touch.mode : null,
      },
      touch: {
        touchesEmitted: sum(ticks, (t) => t.touch.touchesEmitted),
        uniqueKeysTouched: sum(ticks, (t) => t.touch.uniqueKeysTouched),
        tableTouchesEmitted: sum(ticks, (t) => t.touch.tableTouchesEmitted),
        templateTouchesEmitted: sum(ticks, (t) => t.touch.templateTouchesEmitted),
      },
      wait: { calls: sum(ticks, (t) => t.wait.calls) },
      // The lifecycle rows, without what differs per run (times, cursors, instance), by kind
      // and template (retirements that fall in one GC pass come in last-seen order).
      events: events
        .sort((a, b) => String(a.type).localeCompare(b.type) || String(a.templateId).localeCompare(b.templateId))
        .map((e) => {
        const { ts, lastSeenAt, inactiveForMs, activeFromTouchOffset, instanceId, region, ...rest } = e;
        return {
          ...rest,
          keys: Object.keys(e),
          ts: typeof ts === "string" && !Number.isNaN(Date.parse(ts)),
          lastSeenAt: lastSeenAt === undefined ? undefined : !Number.isNaN(Date.parse(lastSeenAt)),
          inactiveForMs: inactiveForMs === undefined ? undefined : inactiveForMs >= TTL_MS,
          activeFromTouchOffset: activeFromTouchOffset === undefined ? undefined : /^[0-9a-f]{16}:\d+$/.test(activeFromTouchOffset),
        };
      }),
    };
  }
  output({ activatedFirst: first.activated.length, streams });
} finally {
  await srv.close();
  exit();
}
