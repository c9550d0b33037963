import type { Store, TouchEngine, WaitListener } from "../../index.js";

export interface ServerOptions {
  /** Directory of the SQLite file (default $DATA_DIR or ./data). */
  dataDir?: string;
  /** Port (default $PORT or 8787; 0 picks a free one). */
  port?: number | string;
  /** Host (default $HOST or 127.0.0.1). */
  host?: string;
  /** Touch workers (default $TOUCH_WORKERS or the engine's default). */
  workers?: number | string;
  /** Largest request body in bytes (default 10 MiB). */
  bodyLimit?: number;
  /**
   * Keep touch journals across restarts, so cursors handed out before one stay valid (default
   * $KEEP_CURSORS or true; false, "0", "no": a new epoch at every start, as the reference).
   */
  keepCursors?: boolean | string;
  /**
   * `nats://host:port`: the server publishes its touches over NATS JetStream (a writer), or,
   * with `edge`, mirrors the writer publishing there.
   */
  nats?: string;
  /** The writer's subject prefix (default `durable-touch`; one per writer). */
  natsPrefix?: string;
  /** A writer's beat and an edge's interest report, in ms (the engine's default, 500). */
  natsBeatMs?: number;
  /**
   * A writer's batching window in ms (default 0: each flush goes at once): flushes within it
   * share one broker message, fewer bytes per key reach each edge, this much later.
   */
  natsBatchMs?: number | string;
  /** A writer: the URL its edges send clients to (default its own URL). */
  publicUrl?: string;
  /**
   * Serve as an edge (needs `nats`): no data dir; touch waits and meta are served with the
   * writer's cursors, every other request is answered 307 to the writer.
   */
  edge?: boolean;
  /** An edge: the writer's URL (default: the one the writer's beats carry). */
  writer?: string;
  /**
   * Answer touch waits with the native module's HTTP listener (`WaitListener`) on the port,
   * without entering JavaScript: ~2 KB a parked wait instead of ~14 KB on Node. Every other
   * request is passed to this server on loopback. Default $NATIVE_WAITS, else true for an
   * edge and false otherwise.
   */
  nativeWaits?: boolean | string;
}

export interface RunningServer {
  url: string;
  port: number;
  store: Store;
  engine: TouchEngine;
  /** The native wait listener on `port` (with `nativeWaits`), else null. */
  listener: WaitListener | null;
  /** The JS server's URL: `url`, or with `nativeWaits` the loopback one behind the listener. */
  handlerUrl: string;
  /** `"writer"` or `"edge"` with a fan-out (`nats`), else null. */
  role: "writer" | "edge" | null;
  /** Answers pending waits (touched: false), stops listening and closes the store. */
  close(): Promise<void>;
}

export function startServer(options?: ServerOptions): Promise<RunningServer>;

export interface Handler {
  fetch(request: Request): Promise<Response>;
}

export function createHandler(options: {
  store: Store;
  engine: TouchEngine;
  bodyLimit?: number;
  /**
   * The engine is an edge's: only touch waits, meta and /v1/stats are served, the rest is
   * answered 307 to `writer` (default: the writer's URL the engine heard from its beats).
   */
  edge?: { writer?: string } | null;
}): Handler;
