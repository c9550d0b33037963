// A randomized oracle through the swapped server's HTTP routes (under Bun): a writer appends
// random State Protocol records for rows it keeps in memory while ~50 chains of waiters wait on
// watch and membership keys of three templates; no wait that timed out may have missed a change
// that concerned its keys within what its cursors covered (__test__/reference/swap-oracle.ts).
// The unswapped server misses some (updates and deletes without `old_value`, rows moving
// through null fields: deviations.md B4, B5), which is why this runs on the swapped copy only.
import assert from "node:assert/strict";
import { test } from "./harness.mjs";
import { runReference, referenceAvailable } from "./reference.mjs";
import { serverCopies } from "./support/server-copies.mjs";
import { swap } from "../apps/swap/swap.mjs";

test("HTTP oracle: no timed-out wait of the swapped server missed a change to its keys within its cursors", async () => {
  const { swapped } = serverCopies("swapped");
  swap(swapped);
  const seed = Number(process.env.DT_SWAP_ORACLE_SEED ?? Math.floor(Math.random() * 2 ** 31));
  const r = await runReference("swap-oracle", { seed, writeMs: 16_000, chains: 50 }, { env: { APP_SRC: swapped } });
  const about = `seed ${seed} (DT_SWAP_ORACLE_SEED=${seed} repeats it): ${JSON.stringify({ ...r, firstMisses: undefined })}`;
  assert.deepEqual(r.replies.errors, [], about);
  assert.equal(r.lastOffsetSeq, r.written - 1, `the writer's offsets are the stream's; ${about}`);
  assert.equal(r.settled.settled, true, about);
  // The run checked something: changes of every kind, waits that timed out over windows in
  // which rows were flushed, and waits that were woken.
  for (const c of ["inserts", "updates", "deletes", "noOldValue", "messy", "bursts", "pauses"]) assert.ok(r.counts[c] > 0, `${c}: ${about}`);
  assert.ok(r.windows - r.emptyWindows >= 50, `timed-out waits over flushed rows: ${r.windows - r.emptyWindows}; ${about}`);
  assert.ok(r.replies.touched >= 200, about);
  assert.equal(r.misses, 0, `${about}\nfirst misses: ${JSON.stringify(r.firstMisses, null, 1)}`);
}, { timeout: 60_000, skip: !referenceAvailable() });
