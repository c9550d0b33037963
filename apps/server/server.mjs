// `durable-touch/server`: the Live HTTP server on the native core (Store + TouchEngine on an
// embedded SQLite file), on Node's `http` or on Bun.serve. `startServer` reads the options and
// their environment fallbacks, opens the store and the engine for the server's role, listens,
// and closes it all again; the routes are routes.mjs's (`createHandler`, exported here too),
// the HTTP plumbing http.mjs's, the fan-out's flags fanout-flags.mjs's.
//
// Fan-out over NATS JetStream (`nats` option): a *writer* is this server with its
// engine publishing its journals' flushes and beats; an *edge* (`edge: true`) holds no data
// (a TouchEngine over Store.open(":memory:") mirroring the writer's journals) and serves the
// touch wait and meta routes with the writer's cursors, sending the rest to the writer.
//
// With `nativeWaits`, the port is the native module's (`WaitListener`): it answers touch waits
// itself, without entering JavaScript, and passes every other request (and a wait the engine
// refuses, which the handler then answers) to this server, listening on loopback.
import { createRequire } from "node:module";
import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { switchedOff } from "../../lib/settings.mjs";
import { HttpError, errorReply, toResponse } from "./replies.mjs";
import { createHandler } from "./routes.mjs";
import { serveNode, serveBun } from "./http.mjs";
import { fanoutOptions, engineFanout } from "./fanout-flags.mjs";

export { createHandler };

const require = createRequire(import.meta.url);
const { Store, TouchEngine, WaitListener } = require("../../index.js");

/** How long a starting edge waits for its writer's first beat before it listens. */
const EDGE_FIRST_BEAT_MS = 2_000;

/**
 * Starts the server. Options (env fallbacks): dataDir (DATA_DIR, "./data"), port (PORT, 8787),
 * host (HOST, "127.0.0.1"), workers (TOUCH_WORKERS), bodyLimit (10 MiB), keepCursors (KEEP_CURSORS,
 * true: touch journals are kept across restarts in `<data>/durable-touch.sqlite-journals/`, so
 * cursors handed out before a restart stay valid; false: a new epoch at every start); the fan-out over NATS
 * JetStream (no env fallbacks): nats (the broker's URL: this server publishes its touches as
 * a writer), natsPrefix (`fanoutDefaults.prefix`, one per writer), natsMaxAgeMs / natsMaxBytes (a
 * writer's retention of its flushes: 10 minutes, 256 MiB; what an edge started anew can replay),
 * natsBatchMs (a writer's batching window: 0, each flush at once; more: fewer bytes per key to
 * each edge, that much later),
 * publicUrl (the URL a writer's edges send clients to; default its own URL), edge (serve waits and meta as an edge of the writer
 * publishing on `nats`/`natsPrefix`; no data dir), writer (an edge's writer URL, which takes
 * precedence over the one the writer's beats carry); nativeWaits (NATIVE_WAITS; default true
 * for an edge, else false: touch waits answered by the native module's listener on the port,
 * without entering JavaScript; the rest passed to this server on loopback).
 */
export async function startServer(opts = {}) {
  const dataDir = resolve(opts.dataDir ?? process.env.DATA_DIR ?? "./data");
  const port = Number(opts.port ?? process.env.PORT ?? 8787);
  const host = opts.host ?? process.env.HOST ?? "127.0.0.1";
  const workersRaw = opts.workers ?? process.env.TOUCH_WORKERS;
  const workers = workersRaw === undefined || workersRaw === "" ? undefined : Number(workersRaw);
  const bodyLimit = opts.bodyLimit ?? 10 * 1024 * 1024;
  const keepCursors = !switchedOff(opts.keepCursors ?? process.env.KEEP_CURSORS);
  const fo = fanoutOptions(opts);
  // An edge serves waits, so its listener is on unless switched off; elsewhere it is asked for.
  const nativeWaitsRaw = opts.nativeWaits ?? process.env.NATIVE_WAITS;
  const nativeWaits =
    nativeWaitsRaw === undefined || nativeWaitsRaw === "" ? fo?.edge === true : !switchedOff(nativeWaitsRaw);
  let store;
  let engine;
  let handler = null;
  const open = (writerUrl) => {
    if (fo?.edge) {
      // An edge keeps nothing: its streams and cursors are the writer's, from NATS.
      store = Store.open(":memory:");
      engine = new TouchEngine(store, { ...(workers === undefined ? {} : { workers }), fanout: engineFanout(fo, "edge", fo.writer) });
    } else {
      mkdirSync(dataDir, { recursive: true });
      store = Store.open(join(dataDir, "durable-touch.sqlite"));
      const options = { ...(workers === undefined ? {} : { workers }), keepCursors };
      engine = new TouchEngine(store, fo ? { ...options, fanout: engineFanout(fo, "writer", writerUrl) } : options);
    }
    handler = createHandler({ store, engine, bodyLimit, edge: fo?.edge ? { writer: fo.writer } : null });
  };
  // A writer names its own URL to its edges, which is known once it listens (port 0 picks
  // one): it listens first and answers 503 until its engine is made (moments later).
  const late = fo !== null && !fo.edge && fo.publicUrl === undefined;
  if (!late) open(fo?.publicUrl);
  // An edge listens once it has heard its writer's first beat (its streams and the writer's
  // URL; the writer answers a new edge at once), so its first clients are served, not sent
  // away; with no writer heard within EDGE_FIRST_BEAT_MS it listens anyway (and answers 503).
  if (fo?.edge) {
    const until = Date.now() + EDGE_FIRST_BEAT_MS;
    while (!(engine.fanoutStats()?.beats > 0) && Date.now() < until) await new Promise((r) => setTimeout(r, 5));
  }
  const starting = () => errorReply(new HttpError(503, "ERR_STARTING", "the server is starting"));
  const front = {
    fetch: (req) => (handler ? handler.fetch(req) : Promise.resolve(toResponse(starting()))),
    waitReply: (...args) => (handler ? handler.waitReply(...args) : Promise.resolve(starting())),
  };
  let http;
  let listener = null;
  try {
    // With native waits this server listens on loopback behind the listener.
    const at = nativeWaits ? { port: 0, host: "127.0.0.1" } : { port, host };
    http = typeof globalThis.Bun !== "undefined" ? serveBun(front, at) : await serveNode(front, { ...at, bodyLimit });
    if (nativeWaits) {
      try {
        listener = new WaitListener(engine ?? null, { host, port, upstreamPort: http.port });
      } catch (e) {
        await http.close();
        throw e;
      }
    }
  } catch (e) {
    await engine?.close();
    await store?.close();
    throw e;
  }
  const url = `http://${host}:${listener ? listener.port : http.port}`;
  if (late) {
    try {
      open(url);
      listener?.serve(engine);
    } catch (e) {
      await listener?.close();
      await http.close();
      await store?.close();
      throw e;
    }
  }
  let closing = null;
  return {
    url,
    port: listener ? listener.port : http.port,
    /** The native wait listener on `port` (`nativeWaits`), else null. */
    listener,
    /** The JS server's URL: `url`, or with `nativeWaits` the loopback one behind the listener. */
    handlerUrl: `http://${nativeWaits ? "127.0.0.1" : host}:${http.port}`,
    store,
    engine,
    /** "writer" or "edge" with a fan-out, else null. */
    role: fo ? (fo.edge ? "edge" : "writer") : null,
    /** Answers pending waits (touched: false), stops listening and closes the store. */
    close() {
      closing ??= (async () => {
        await engine.close();
        await listener?.close();
        await http.close();
        await store.close();
      })();
      return closing;
    },
  };
}
