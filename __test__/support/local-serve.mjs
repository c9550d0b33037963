// Serves @prisma/streams-local as `prisma dev` embeds it, under Bun or Node: copied into a
// project whose node_modules holds the package (swapped or not), imported by its package name,
// started with `startLocalDurableStreamsServer({ name, hostname: "127.0.0.1", port: 0 })` (its
// data under $DS_LOCAL_DATA_ROOT, its config from its own environment). Prints
// `{"port":<n>,"runtime":…}` and a newline once it listens, then serves until killed.
const { startLocalDurableStreamsServer } = await import("@prisma/streams-local");
const server = await startLocalDurableStreamsServer({ name: "serve", hostname: "127.0.0.1", port: 0 });
const port = Number(new URL(server.exports.http.url).port);
const runtime = typeof globalThis.Bun !== "undefined" ? "bun" : "node";
process.stdout.write(JSON.stringify({ port, runtime, version: process.versions.bun ?? process.versions.node }) + "\n");
// SIGTERM closes it as `prisma dev` does when it stops (the touch manager stops, its journals
// are kept); SIGKILL is a crash.
process.once("SIGTERM", () => server.close().then(() => process.exit(0)));
