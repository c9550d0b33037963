// stop() (J15, B29 fixed): every pending wait settles with null, the timers stop, and a process
// holding 100,000 parked waits exits on its own afterwards.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { test, dt, bound } from "./harness.mjs";

const { TouchJournal } = dt;
const here = dirname(fileURLToPath(import.meta.url));

test("stop() with 100,000 pending waits settles them all with null, and the process exits by itself", async () => {
  const child = spawn(process.execPath, [join(here, "fixtures", "journal-stop-child.mjs"), "100000"], { stdio: ["ignore", "pipe", "pipe"] });
  const out = [];
  const err = [];
  child.stdout.on("data", (d) => out.push(d));
  child.stderr.on("data", (d) => err.push(d));
  const exited = new Promise((resolve) => child.on("close", (code, signal) => resolve({ code, signal })));
  const timedOut = bound(30_000).then(() => "timeout");
  const r = await Promise.race([exited, timedOut]);
  if (r === "timeout") {
    child.kill("SIGKILL");
    assert.fail("the child did not exit on its own within 30 s after stop()");
  }
  assert.equal(r.code, 0, Buffer.concat(err).toString());
  const res = JSON.parse(Buffer.concat(out).toString().trim().split("\n").pop());
  assert.deepEqual(res, { parked: 100_000, stopped: 100_000, nulls: 100_000, active: 0, pendingKeys: 0 });
}, { timeout: 60_000 });

test("after stop() the journal keeps its epoch and generation and still serves waits", async () => {
  const j = new TouchJournal();
  j.touch(1);
  j.flush();
  const cursor = j.getCursor();
  const p = j.waitForAny({ keys: [2], timeoutMs: 60_000 });
  assert.equal(j.stop(), 1);
  assert.equal(await p, null);
  assert.equal(j.getCursor(), cursor);
  assert.equal(j.maybeTouchedSince(1, 0), true);
  assert.equal(j.getMeta().bucketMaxSourceOffsetSeq, "-1");
  const q = j.waitForAny({ keys: [2], timeoutMs: 60_000 });
  j.touch(2);
  j.flush();
  assert.equal((await q).generation, 2);
});
