#!/usr/bin/env node
// durable-touch command line.
//
//   durable-touch [serve] [--port 8787] [--host 127.0.0.1] [--data ./data] [--workers N]
//                 [--no-keep-cursors] [--native-waits]
//                 [--nats nats://host:4222 [--nats-prefix durable-touch] [--public-url URL]
//                  [--nats-max-age-ms 600000] [--nats-max-bytes 268435456] [--nats-batch-ms 0]]
//   durable-touch [serve] --edge --nats nats://host:4222 [--nats-prefix P] [--writer URL]
//                 [--port N] [--host H] [--no-native-waits]
//   durable-touch swap <path-to-server-src | @prisma/streams-local install> [--undo]
//
// `serve` (the default) starts the Live HTTP server; SIGINT/SIGTERM close it cleanly
// (pending waits are answered, the store is closed). With `--nats` it publishes its touches
// over NATS JetStream (a writer; edges send clients to --public-url, default its own URL);
// with `--edge --nats` it is an edge of the writer publishing there: it serves touch waits
// and meta with the writer's cursors and redirects the rest (307) to the writer (--writer, or
// the URL the writer's beats carry). `swap` rewrites the reference server's
// SQLite adapter, touch manager, touch routes, touch journal and worker pool modules into
// shims over durable-touch/compat (apps/swap/swap.mjs), and says what a bundle of the swapped server
// needs (durable-touch external and installed where the bundle runs); on an install of
// @prisma/streams-local (the package root, or a project holding it), it swaps the same modules
// in the package's bundled chunk (apps/swap/swap-local.mjs).
const argv = process.argv.slice(2);
const command = argv[0] && !argv[0].startsWith("--") ? argv.shift() : "serve";
const flag = (name) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : undefined;
};

if (command === "serve") {
  const { startServer } = await import("../apps/server/server.mjs");
  let server;
  try {
    server = await startServer({
      port: flag("port"),
      host: flag("host"),
      dataDir: flag("data"),
      workers: flag("workers"),
      nats: flag("nats"),
      natsPrefix: flag("nats-prefix"),
      publicUrl: flag("public-url"),
      natsMaxAgeMs: flag("nats-max-age-ms"),
      natsMaxBytes: flag("nats-max-bytes"),
      natsBatchMs: flag("nats-batch-ms"),
      edge: argv.includes("--edge"),
      writer: flag("writer"),
      ...(argv.includes("--no-keep-cursors") ? { keepCursors: false } : {}),
      ...(argv.includes("--native-waits") ? { nativeWaits: true } : {}),
      ...(argv.includes("--no-native-waits") ? { nativeWaits: false } : {}),
    });
  } catch (e) {
    console.error(`durable-touch serve: ${e.message}`);
    process.exit(1);
  }
  if (server.role === "edge") {
    const writer = flag("writer") ?? "from the writer's beats";
    console.log(`durable-touch edge listening on ${server.url} (NATS ${flag("nats")}, writer: ${writer})`);
  } else {
    const nats = server.role === "writer" ? `, publishing on NATS ${flag("nats")}` : "";
    console.log(`durable-touch listening on ${server.url} (data: ${server.store.stats().path}${nats})`);
  }
  const stop = async (signal) => {
    console.log(`${signal}: closing (answering pending waits, closing the store)`);
    await server.close();
    process.exit(0);
  };
  process.once("SIGINT", () => stop("SIGINT"));
  process.once("SIGTERM", () => stop("SIGTERM"));
} else if (command === "swap") {
  const { swap, swapKind, BUNDLE_NOTE } = await import("../apps/swap/swap.mjs");
  const target = argv.find((a) => !a.startsWith("--"));
  if (!target) {
    console.error("usage: durable-touch swap <path-to-server-src | @prisma/streams-local install> [--undo]");
    process.exit(2);
  }
  try {
    const undo = argv.includes("--undo");
    for (const line of swap(target, { undo })) console.log(line);
    if (!undo && swapKind(target) === "server") console.log(BUNDLE_NOTE);
  } catch (e) {
    console.error(`durable-touch swap: ${e.message}`);
    process.exit(1);
  }
} else {
  console.error(`unknown command ${command}; use "serve" or "swap"`);
  process.exit(2);
}
