// Shared by the swap scripts: a server started in-process on a data dir, and small HTTP helpers.
// Which server:
// - a copy of the reference server (its src/ at $APP_SRC, swapped or not): createApp with the
//   in-memory object store, Bun.serve on a loopback port;
// - with $LOCAL_PROJECT, the local runtime `prisma dev` embeds (@prisma/streams-local, swapped or
//   not, resolved from that project as `prisma dev` imports it): startLocalDurableStreamsServer
//   on a loopback port, its data under the data dir ($DS_LOCAL_DATA_ROOT). Its config is its
//   own (loadConfig's env, the local presets); `touchWorkers` and `touchCheckIntervalMs`
//   overrides go through their env variables. Pure modules (keys, offsets) come from the
//   reference's src/ ($REFERENCE_SRC), the same version the local runtime is built from.
const LOCAL_PROJECT = process.env.LOCAL_PROJECT;
const APP = process.env.APP_SRC!;
/** Where the pure modules (`touch/live_keys.ts`, `offset.ts`) are imported from. */
export const SRC = LOCAL_PROJECT ? process.env.REFERENCE_SRC! : APP;
const appModules = LOCAL_PROJECT
  ? null
  : {
      createApp: (await import(`${APP}/app.ts`)).createApp,
      loadConfig: (await import(`${APP}/config.ts`)).loadConfig,
      MockR2Store: (await import(`${APP}/objectstore/mock_r2.ts`)).MockR2Store,
      openSqliteDatabase: (await import(`${APP}/sqlite/adapter.ts`)).openSqliteDatabase,
    };
const localModules = LOCAL_PROJECT
  ? {
      startLocalDurableStreamsServer: (await import(Bun.resolveSync("@prisma/streams-local", LOCAL_PROJECT))).startLocalDurableStreamsServer,
      // The same module instance the swapped chunk imports (both resolve through the project).
      compatSqlite: await import(Bun.resolveSync("durable-touch/compat/sqlite-adapter", LOCAL_PROJECT)),
    }
  : null;
/** The copy's own key functions (`touch/live_keys.ts`). */
export const K = await import(`${SRC}/touch/live_keys.ts`);
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const JSON_HEADERS = { "content-type": "application/json" };

export type Reply = { status: number; body: any; text: string; headers: Headers };
export type Server = {
  /** The app itself (`app.deps.touch` is the server's touch manager); null for the local runtime. */
  app: any;
  /** The server's SQLite file. */
  dbPath: string;
  /** A connection to it through the server's own SQLite library (a second library on the file in
   * this process would break its POSIX locks): the copy's adapter; for the local runtime,
   * durable-touch's when swapped, else bun:sqlite (its adapter's under Bun). */
  openSqlite: () => any;
  base: string;
  port: number;
  fetch: (path: string, init?: RequestInit) => Promise<Response>;
  /** `json` is sent as the JSON body; the reply's body is parsed when it is JSON. */
  call: (path: string, method?: string, json?: unknown) => Promise<Reply>;
  close: () => Promise<void>;
};

export async function reply(res: Response): Promise<Reply> {
  const text = await res.text();
  let body: any = null;
  try {
    body = text === "" ? null : JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: res.status, body, text, headers: res.headers };
}

/** Starts the server on `root` (the copy's SQLite file is `root/wal.sqlite`). */
export async function startServer(root: string, overrides: Record<string, unknown> = {}): Promise<Server> {
  if (localModules) return startLocal(root, overrides);
  const { createApp, loadConfig, MockR2Store, openSqliteDatabase } = appModules!;
  const cfg = { ...loadConfig(), rootDir: root, dbPath: `${root}/wal.sqlite`, port: 0, ...overrides };
  const app = createApp(cfg, new MockR2Store());
  const server = Bun.serve({ hostname: "127.0.0.1", port: 0, idleTimeout: 120, fetch: app.fetch });
  return served(`http://127.0.0.1:${server.port}`, server.port, {
    app,
    dbPath: cfg.dbPath,
    openSqlite: () => openSqliteDatabase(cfg.dbPath),
    close: async () => {
      server.stop(true);
      await app.close();
    },
  });
}

const LOCAL_ENV: Record<string, string> = { touchWorkers: "DS_TOUCH_WORKERS", touchCheckIntervalMs: "DS_TOUCH_CHECK_MS" };

async function startLocal(root: string, overrides: Record<string, unknown>): Promise<Server> {
  const { startLocalDurableStreamsServer, compatSqlite } = localModules!;
  const unknown = Object.keys(overrides).filter((k) => !LOCAL_ENV[k]);
  if (unknown.length > 0) throw new Error(`the local runtime takes no ${unknown.join(", ")} override`);
  // Its config is read from the environment while it starts.
  const env = { DS_LOCAL_DATA_ROOT: root, ...Object.fromEntries(Object.entries(overrides).map(([k, v]) => [LOCAL_ENV[k], String(v)])) };
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, env);
  let local: any;
  try {
    local = await startLocalDurableStreamsServer({ name: "test", hostname: "127.0.0.1", port: 0 });
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
  const dbPath: string = local.exports.sqlite.path;
  const swapped = compatSqlite.getSqliteAdapterRuntimeCounts().open_connections > 0;
  return served(local.exports.http.url, local.exports.http.port, {
    app: null,
    dbPath,
    openSqlite: () => (swapped ? compatSqlite.openSqliteDatabase(dbPath) : new (require("bun:sqlite").Database)(dbPath)),
    close: () => local.close(),
  });
}

function served(base: string, port: number, rest: Pick<Server, "app" | "dbPath" | "openSqlite" | "close">): Server {
  const fetchPath = (path: string, init?: RequestInit) => fetch(base + path, init);
  return {
    ...rest,
    base,
    port,
    fetch: fetchPath,
    call: async (path, method = "GET", json?) =>
      reply(await fetchPath(path, json === undefined ? { method, headers: JSON_HEADERS } : { method, headers: JSON_HEADERS, body: JSON.stringify(json) })),
  };
}

/** Throws unless the reply's status is 2xx. */
export function ok(r: Reply, what: string): Reply {
  if (r.status < 200 || r.status >= 300) throw new Error(`${what}: ${r.status} ${r.text}`);
  return r;
}

/** Creates `stream` with a state-protocol profile whose touch config is `touch` (+ enabled). */
export async function touchStream(srv: Server, stream: string, touch: Record<string, unknown> = {}) {
  ok(await srv.call(`/v1/stream/${stream}`, "PUT"), `create ${stream}`);
  ok(
    await srv.call(`/v1/stream/${stream}/_profile`, "POST", {
      apiVersion: "durable.streams/profile/v1",
      profile: { kind: "state-protocol", touch: { enabled: true, ...touch } },
    }),
    `profile ${stream}`
  );
}

/** Appends `records`; resolves the `stream-next-offset` the server answered. */
export async function append(srv: Server, stream: string, records: unknown[]): Promise<string> {
  const r = ok(await srv.call(`/v1/stream/${stream}`, "POST", records), `append ${stream}`);
  return r.headers.get("stream-next-offset")!;
}

/** Resolves once meta's `walScannedThrough` is `nextOffset` (throws after `ms`). */
export async function processed(srv: Server, stream: string, nextOffset: string, ms = 5000) {
  const until = performance.now() + ms;
  for (;;) {
    const meta = ok(await srv.call(`/v1/stream/${stream}/touch/meta`), "meta").body;
    if (meta.walScannedThrough === nextOffset) return meta;
    if (performance.now() > until) throw new Error(`${stream}: not processed through ${nextOffset} (at ${meta.walScannedThrough})`);
    await sleep(10);
  }
}

/** Ends the process once stdout is written (the reference's worker threads can keep Bun up). */
export function exit() {
  process.stdout.write("", () => process.exit(0));
}
