// durable-touch/compat: drop-in replacements for modules of the Prisma Streams server
// (@prisma/streams-server 0.1.11), backed by the native core. `npx durable-touch swap
// <server-src>` rewrites the server's modules into shims over this one (apps/swap/swap.mjs):
// its touch journal and worker pool, its touch manager and touch routes (on the native
// engine), and its SQLite binding (`sqliteAdapter`, also importable alone as
// `durable-touch/compat/sqlite-adapter`), so that one SQLite library serves the whole process.
export { TouchJournal, parseTouchCursor, formatTouchCursor } from "./journal.mjs";
export { TouchProcessorWorkerPool } from "./pool.mjs";
export { createTouchProcessorManager } from "./manager.mjs";
export { createStateProtocolTouchRoute } from "./routes.mjs";
export * as sqliteAdapter from "./sqlite-adapter.mjs";
export { clonePlainData } from "./clone.mjs";
