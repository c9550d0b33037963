// durable-touch/compat: drop-in replacements for the Prisma Streams server's touch journal
// (`touch/touch_journal.ts`) and touch worker pool (`touch/worker_pool.ts`), backed by the
// native core. `npx durable-touch swap <server-src>` rewrites those two modules into
// re-exports of this one (lib/swap.mjs).
export { TouchJournal, parseTouchCursor, formatTouchCursor } from "./journal.mjs";
export { TouchProcessorWorkerPool } from "./pool.mjs";
