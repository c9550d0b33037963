// The local runtime as `prisma dev` runs it, for bench/local.mjs: copied into a project whose
// node_modules holds @prisma/streams-local (swapped or not), imported by its package name and
// started with `startLocalDurableStreamsServer` (data under $DS_LOCAL_DATA_ROOT). Prints one
// JSON line ({ url, pid, runtime, version, swapped }) once it listens, then serves until
// SIGTERM or until its stdin closes (the bench ended).
const runtime = typeof globalThis.Bun !== "undefined" ? "bun" : "node";
const { startLocalDurableStreamsServer } = await import("@prisma/streams-local");
const server = await startLocalDurableStreamsServer({ name: "bench", hostname: "127.0.0.1", port: 0 });
// Swapped, the runtime's connections are durable-touch's (the module instance the chunk imports).
const adapter = await import("durable-touch/compat/sqlite-adapter");
const swapped = adapter.getSqliteAdapterRuntimeCounts().open_connections > 0;
process.stdout.write(JSON.stringify({ url: server.exports.http.url, pid: process.pid, runtime, version: process.versions.bun ?? process.versions.node, swapped }) + "\n");

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  await server.close();
  process.exit(0);
}
process.on("SIGTERM", stop);
process.stdin.on("end", stop);
process.stdin.on("close", stop);
process.stdin.resume();
