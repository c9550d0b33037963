// The swapped `TouchProcessorManager` has every public member of the reference's class, and each
// answers as the reference's does: the member list is read from the reference's own source
// (`touch/manager.ts`), so a reference version that adds a member fails here until the compat
// class has it; `reference/manager-surface.ts` drives every member on an unswapped and a
// swapped copy of the server (no processing loop, `notify` + `tick()` by hand, as the server's
// own tests do) and the two must agree.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "./harness.mjs";
import { REFERENCE_SRC, runReference, referenceAvailable } from "./reference.mjs";
import { swap } from "../apps/swap/swap.mjs";
import { serverCopies } from "./support/server-copies.mjs";
import { createTouchProcessorManager } from "../compat/manager.mjs";

/** The public methods of the reference's `TouchProcessorManager`, from its source. */
function referenceMembers() {
  const src = readFileSync(join(REFERENCE_SRC, "touch", "manager.ts"), "utf8");
  const start = src.indexOf("export class TouchProcessorManager");
  assert.ok(start >= 0, "the reference defines TouchProcessorManager");
  // The class body ends at the first line that closes a block at column 0.
  const body = src.slice(start, src.indexOf("\n}\n", start));
  const members = new Set();
  for (const m of body.matchAll(/^ {2}(?!private |protected |constructor\b)(?:public )?(?:async )?(?:get |set )?([A-Za-z_$][\w$]*)\s*(?:<[^>]*>)?\(/gm)) {
    members.add(m[1]);
  }
  for (const m of body.matchAll(/^ {2}(?:public )?(?:readonly )?([A-Za-z_$][\w$]*)\s*[:=]/gm)) {
    if (!/^ {2}(private|protected)\b/.test(m[0])) members.add(m[1]);
  }
  return [...members].sort();
}

test("the reference's public member list is what the compat class is held to", () => {
  const members = referenceMembers();
  // 0.1.11's list, so a parser that finds nothing cannot pass.
  for (const m of ["tick", "notify", "start", "stop", "getOrCreateJournal", "beginHotWaitInterest", "getTouchRuntimeSnapshot"]) {
    assert.ok(members.includes(m), `found ${m}`);
  }
  assert.ok(!members.includes("processOne") && !members.includes("sweepHotFineState"), "private members are not part of it");
  const Manager = createTouchProcessorManager({});
  const missing = members.filter((m) => typeof Manager.prototype[m] !== "function");
  assert.deepEqual(missing, [], "public members of the reference class the compat class lacks");
});

test("every public member answers on a swapped server as on the unswapped one", async () => {
  const { plain, swapped } = serverCopies("plain", "swapped");
  swap(swapped);
  const { out: a, kinds: ka } = await runReference("manager-surface", {}, { env: { APP_SRC: plain }, retries: 2 });
  const { out: b, kinds: kb } = await runReference("manager-surface", {}, { env: { APP_SRC: swapped }, retries: 2 });
  assert.deepEqual(a.covered, referenceMembers(), "the scenario calls every public member");
  assert.deepEqual(b, a);
  // What the reference answers, so that two broken copies cannot agree by accident.
  assert.equal(a.tableWait, true);
  assert.equal(a.journalWait, true);
  assert.equal(a.journalTouch, true);
  assert.deepEqual(a.fineWait, [true, "tableKey"]);
  assert.deepEqual(a.afterTick, { walScannedThrough: true, lag: 0, scanRows: 2 });
  // [hotFineKeys, hotTemplates, fine, coarse, broad waiters, keys and templates in grace]: the
  // earlier fine wait's key is still in its grace when the interest begins.
  assert.deepEqual(a.hotBegun, [3, 1, 1, 0, 0, 1, 0]);
  assert.deepEqual(a.hotReleased, [3, 1, 0, 0, 0, 3, 1]);
  assert.deepEqual(a.hotReleasedTwice, a.hotReleased);
  assert.deepEqual(a.hotExpired, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0], "swept once the grace passed, /touch/meta included");
  assert.deepEqual(a.hotCoarseBroad, [0, 0, 1, 1, 1, 0, 0]);
  assert.deepEqual(a.entities, ["public.todos"]);
  assert.deepEqual(a.waitTotals, [1, 1]);
  assert.equal(a.memory.dirtyStreams, 0, "a tick leaves no stream dirty");
  assert.deepEqual(a.plainJournal, [true, true], "a journal for a stream without touch too");
  assert.deepEqual(a.hugeCoarse, [0, 1, 0], "a coarse waiter counted, its keys not read");
  assert.deepEqual(a.topNaN, []);
  // Deliberate differences (docs/deviations.md): waits left parked by the reference's stop()
  // (B29), and interest it still counts after stop, when nothing processes.
  assert.deepEqual(ka, { pendingAfterStop: "pending", afterStopHotKeys: 1 });
  assert.deepEqual(kb, { pendingAfterStop: null, afterStopHotKeys: 0 });
}, { timeout: 90_000, skip: !referenceAvailable() });
