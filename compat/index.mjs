// durable-touch/compat: drop-in replacements for the Prisma Streams server's touch journal
// (`touch/touch_journal.ts`) and touch worker pool (`touch/worker_pool.ts`), backed by the
// native core; `npx durable-touch swap <server-src>` rewrites those two modules into re-exports
// of this one (lib/swap.mjs). `sqliteAdapter` is the server's SQLite adapter (`sqlite/adapter.ts`)
// on durable-touch's SQLite, also importable alone as `durable-touch/compat/sqlite-adapter`.
export { TouchJournal, parseTouchCursor, formatTouchCursor } from "./journal.mjs";
export { TouchProcessorWorkerPool } from "./pool.mjs";
export * as sqliteAdapter from "./sqlite-adapter.mjs";
