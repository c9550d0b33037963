// The local runtime `prisma dev` embeds (@prisma/streams-local, under Bun, started with
// `startLocalDurableStreamsServer` in a project that holds it), driven over HTTP by the scripts
// that test the server swap (__test__/reference/swap-*.ts; swap-server.ts starts the local
// runtime when $LOCAL_PROJECT is set):
// - swap-losses.ts: the invalidations the reference loses (docs/deviations.md, B1–B7) are lost by
//   the unswapped runtime too, and delivered by the swapped one;
// - swap-oracle.ts: the randomized oracle (a writer and ~50 chains of waiters) has no timed-out
//   wait of the swapped runtime that missed a change to its keys;
// - swap-restart.ts: a runtime's life and restart on one data dir: the old cursor is kept when
//   both runs are swapped (stale otherwise),
//   templates, checkpoint and waits carry over; swapped, and across `swap` and `swap --undo`
//   between the two lives.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { test, tempDir } from "./harness.mjs";
import { runReference, referenceAvailable } from "./reference.mjs";
import { swap } from "../apps/swap/swap.mjs";
import { SUPPORTED } from "../apps/swap/swap-local.mjs";
import { LOCAL_PACKAGE_DIR, npmProject } from "./support/local-copies.mjs";
import { lifeAndRestart, checkRestart } from "./support/restart-checks.mjs";

const available = referenceAvailable() && existsSync(join(LOCAL_PACKAGE_DIR, SUPPORTED[0].chunk));
/** One temp folder for the file's projects (removed at exit). */
const WORK = tempDir("dt-swap-local-delivery-");
let projects = 0;
/** A project holding a copy of @prisma/streams-local, swapped or not. */
function project(swapped) {
  const { project: dir } = npmProject(join(WORK, `p${projects++}`));
  if (swapped) swap(dir);
  return dir;
}
const local = (dir) => ({ env: { LOCAL_PROJECT: dir }, retries: 2 });

test("B1–B7 through the local runtime's routes: unswapped, it loses what the reference loses; swapped, it delivers every one", async () => {
  const lost = await runReference("swap-losses", {}, local(project(false)));
  const kept = await runReference("swap-losses", {}, local(project(true)));
  // As the reference server: a budget of 3 keys per batch wakes a few of 40 waiters; the other
  // scenarios wake none of theirs.
  assert.ok(lost.B1.filter(Boolean).length <= 5, `unswapped B1: ${lost.B1.filter(Boolean).length} of 40 woken`);
  for (const b of ["B2", "B3", "B4", "B5", "B6", "B7"]) assert.ok(lost[b].every((t) => !t), `unswapped ${b}: ${JSON.stringify(lost[b])}`);
  for (const b of ["B1", "B2", "B3", "B4", "B5", "B6", "B7"]) assert.ok(kept[b].every(Boolean), `swapped ${b}: ${JSON.stringify(kept[b])}`);
}, { timeout: 60_000, skip: !available });

test("HTTP oracle on the swapped local runtime: no timed-out wait missed a change to its keys within its cursors", async () => {
  const seed = Number(process.env.DT_SWAP_ORACLE_SEED ?? Math.floor(Math.random() * 2 ** 31));
  const r = await runReference("swap-oracle", { seed, writeMs: 14_000, chains: 50 }, local(project(true)));
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
}, { timeout: 60_000, skip: !available });

test("restart on the same data dir: the old cursor is kept swapped (stale otherwise), templates, checkpoint and waits carry over (swapped; swapped then undone; unswapped then swapped)", async () => {
  const swapped = project(true);
  const undone = project(true);
  const later = project(false);
  checkRestart(await lifeAndRestart({ LOCAL_PROJECT: swapped }, () => {}), "swapped", { kept: true });
  checkRestart(await lifeAndRestart({ LOCAL_PROJECT: undone }, () => swap(undone, { undo: true })), "swapped, then undone");
  checkRestart(await lifeAndRestart({ LOCAL_PROJECT: later }, () => swap(later)), "unswapped, then swapped");
}, { timeout: 60_000, skip: !available });
