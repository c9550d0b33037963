// A server's life and restart on one data dir (__test__/reference/swap-restart.ts), for the swap
// tests of the reference server (compat-swap-restart.spec.mjs) and of the local runtime
// (compat-swap-local-delivery.spec.mjs).
import assert from "node:assert/strict";
import { tempDir } from "../harness.mjs";
import { runReference } from "../reference.mjs";

/**
 * Phase "first" of swap-restart.ts with `env` (APP_SRC, or LOCAL_PROJECT: which server), then
 * `between()` (a swap or an undo), then phase "second" on the same data dir.
 */
export async function lifeAndRestart(env, between) {
  const dir = tempDir("dt-swap-data-");
  const withDir = { ...env, DATA_DIR: dir };
  const first = await runReference("swap-restart", { phase: "first" }, { env: withDir, retries: 1 });
  between();
  const second = await runReference("swap-restart", { phase: "second", ...first }, { env: withDir, retries: 1 });
  return { first, second };
}

/**
 * What a restart must keep (the same for every kind of server and every swap between the
 * phases). `kept`: both phases ran swapped, so the first server's cursor is kept (the rows
 * appended since touched its key); otherwise it is stale, as in the reference.
 */
export function checkRestart({ first, second }, label, { kept = false } = {}) {
  // The first server: two templates, a woken wait, everything processed before the idle tail.
  assert.deepEqual(first.activated, { activated: first.templates, denied: [] }, label);
  assert.deepEqual([first.woken.status, first.woken.touched], [200, true], `${label}: first server's wait`);
  assert.equal(first.settled.walScannedThrough, first.woken.next, label);
  assert.equal(first.idle.walScannedThrough, first.woken.next, `${label}: the idle server processed nothing`);
  assert.notEqual(first.lastOffset, first.woken.next, label);
  // The second server sees the same templates active...
  assert.equal(second.atStart.activeTemplates, 2, `${label}: active templates at start`);
  // ...so with the rate limit's two tokens spent on two new templates, activating the first
  // two needs no token (a retired template would be rate_limited).
  assert.equal(second.fresh.activated.length, 2, label);
  assert.deepEqual(second.again, { activated: first.templates, denied: [] }, `${label}: the first server's templates are active`);
  assert.equal(second.caughtUp.activeTemplates, 4, label);
  // It starts from the checkpoint the first server left (or has already processed past it)...
  assert.ok([first.woken.next, first.lastOffset].includes(second.atStart.walScannedThrough), `${label}: at start ${second.atStart.walScannedThrough}`);
  // ...and processes exactly the 5 rows after it (not the stream from its start).
  assert.equal(second.caughtUp.walScannedThrough, first.lastOffset, label);
  assert.equal(second.caughtUp.scanRowsTotal, 5, `${label}: rows processed after the restart`);
  const { stale, code, touched } = second.stale;
  if (kept) assert.deepEqual([stale === true, touched], [false, true], `${label}: the first server's cursor, kept`);
  else assert.deepEqual([stale, code], [true, "stale"], `${label}: the first server's cursor`);
  assert.deepEqual([second.fine.status, second.fine.touched, second.fine.effectiveWaitKind], [200, true, "fineKey"], `${label}: watch-key wait after restart`);
  assert.deepEqual([second.coarse.status, second.coarse.touched, second.coarse.effectiveWaitKind], [200, true, "tableKey"], `${label}: table-key wait after restart`);
  assert.equal(second.tail.walScannedThrough, second.coarse.next, label);
  const ids = [...Array.from({ length: 56 }, (_, i) => String(i)), "100", "101"];
  assert.deepEqual(second.rows, ids, `${label}: every row, once, in order`);
}
