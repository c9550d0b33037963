// Shared by the swap scripts: a copy of the reference server (its src/ at $APP_SRC, swapped or
// not) started in-process on a data dir (createApp with the in-memory object store,
// Bun.serve on a loopback port), and small HTTP helpers.
const APP = process.env.APP_SRC!;
const { createApp } = await import(`${APP}/app.ts`);
const { loadConfig } = await import(`${APP}/config.ts`);
const { MockR2Store } = await import(`${APP}/objectstore/mock_r2.ts`);
/** The copy's own key functions (`touch/live_keys.ts`). */
export const K = await import(`${APP}/touch/live_keys.ts`);
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const JSON_HEADERS = { "content-type": "application/json" };

export type Reply = { status: number; body: any; text: string; headers: Headers };
export type Server = {
  /** The app itself (`app.deps.touch` is the server's touch manager). */
  app: any;
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

/** Starts the app on `root` (its SQLite file is `root/wal.sqlite`). */
export function startServer(root: string, overrides: Record<string, unknown> = {}): Server {
  const cfg = { ...loadConfig(), rootDir: root, dbPath: `${root}/wal.sqlite`, port: 0, ...overrides };
  const app = createApp(cfg, new MockR2Store());
  const server = Bun.serve({ hostname: "127.0.0.1", port: 0, idleTimeout: 120, fetch: app.fetch });
  const base = `http://127.0.0.1:${server.port}`;
  const fetchPath = (path: string, init?: RequestInit) => fetch(base + path, init);
  return {
    app,
    base,
    port: server.port,
    fetch: fetchPath,
    call: async (path, method = "GET", json?) =>
      reply(await fetchPath(path, json === undefined ? { method, headers: JSON_HEADERS } : { method, headers: JSON_HEADERS, body: JSON.stringify(json) })),
    close: async () => {
      server.stop(true);
      await app.close();
    },
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
