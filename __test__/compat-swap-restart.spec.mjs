// The swapped server's state on disk, across restarts of the reference server (under Bun):
// `swap --undo` and restart on the same data dir (and the reverse) keeps the templates, the
// touch checkpoint and working waits; and a swapped server killed with SIGKILL while it appends
// and processes keeps every acknowledged append and every cursor it handed out, and its touch
// processing resumes and catches up.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { test, dt, tempDir, sleep } from "./harness.mjs";
import { BUN, referenceAvailable } from "./reference.mjs";
import { serverCopies } from "./support/server-copies.mjs";
import { lifeAndRestart, checkRestart } from "./support/restart-checks.mjs";
import { swap } from "../apps/swap/swap.mjs";
import { openSqliteDatabase } from "../compat/sqlite-adapter.mjs";

const SERVE = join(dirname(fileURLToPath(import.meta.url)), "reference", "swap-serve.ts");

test("swap --undo and restart: the unswapped server starts on the swapped one's data dir (templates, checkpoint, waits), and the reverse; swapped twice, the cursor is kept", async () => {
  const { undone, swapped, kept } = serverCopies("undone", "swapped", "kept");
  swap(undone);
  swap(kept);
  const [a, b, c] = await Promise.all([
    lifeAndRestart({ APP_SRC: undone }, () => swap(undone, { undo: true })),
    lifeAndRestart({ APP_SRC: swapped }, () => swap(swapped)),
    lifeAndRestart({ APP_SRC: kept }, () => {}),
  ]);
  checkRestart(a, "swapped, then undone");
  checkRestart(b, "unswapped, then swapped");
  checkRestart(c, "swapped, then swapped", { kept: true });
}, { timeout: 60_000, skip: !referenceAvailable() });

/** Starts __test__/reference/swap-serve.ts on `dir`; resolves { port, base, child, exited },
 * which is in `running` until it exits. */
async function serve(copy, dir, running) {
  const child = spawn(BUN, ["--no-install", SERVE], {
    env: { ...process.env, APP_SRC: copy, DATA_DIR: dir },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise((r) => child.on("exit", (code, signal) => r(signal ?? code)));
  const srv = { child, exited };
  running.add(srv);
  exited.then(() => running.delete(srv));
  const err = [];
  child.stderr.on("data", (d) => err.push(d));
  const port = await new Promise((resolve, reject) => {
    let buf = "";
    child.stdout.on("data", (d) => {
      buf += d;
      const i = buf.indexOf("\n");
      if (i >= 0) resolve(JSON.parse(buf.slice(0, i)).port);
    });
    exited.then((how) => reject(new Error(`swap-serve exited ${how}: ${Buffer.concat(err)}`)));
  });
  return Object.assign(srv, { port, base: `http://127.0.0.1:${port}` });
}

const JSON_HEADERS = { "content-type": "application/json" };
async function call(base, path, method = "GET", json) {
  const res = await fetch(base + path, { method, headers: JSON_HEADERS, body: json === undefined ? undefined : JSON.stringify(json) });
  const text = await res.text();
  return { status: res.status, body: text === "" ? null : JSON.parse(text), headers: res.headers };
}

/** Runs the kill scenario; `running` holds the servers still up (the test kills them at the end). */
async function killAndRestart(running) {
  const { swapped } = serverCopies("swapped");
  swap(swapped);
  const dir = tempDir("dt-swap-kill-");
  const ENTITY = "public.items";
  const table = dt.keys.tableKey(ENTITY);
  const item = (id, group) => ({ type: ENTITY, key: id, value: { id, group, n: 1 }, headers: { operation: "insert" } });

  let srv = await serve(swapped, dir, running);
  assert.equal((await call(srv.base, "/v1/stream/k", "PUT")).status < 300, true);
  const profile = { apiVersion: "durable.streams/profile/v1", profile: { kind: "state-protocol", touch: { enabled: true } } };
  assert.equal((await call(srv.base, "/v1/stream/k/_profile", "POST", profile)).status, 200);
  const act = await call(srv.base, "/v1/stream/k/touch/templates/activate", "POST", { templates: [{ entity: ENTITY, fields: [{ name: "group", encoding: "string" }] }] });
  assert.equal(act.body.activated.length, 1);
  const templateId = act.body.activated[0].templateId;
  const cursor = (await call(srv.base, "/v1/stream/k/touch/meta")).body.cursor;

  // 6 appenders of 100-row batches and 20 waiters on table and template keys, until the kill.
  const acked = new Set();
  let stop = false;
  const appender = async (w) => {
    for (let n = 0; !stop; n++) {
      const rows = Array.from({ length: 100 }, (_, j) => item(`w${w}-${n}-${j}`, `g${j % 13}`));
      try {
        const res = await fetch(`${srv.base}/v1/stream/k`, { method: "POST", headers: JSON_HEADERS, body: JSON.stringify(rows) });
        await res.arrayBuffer();
        if (res.status === 200 || res.status === 204) for (const r of rows) acked.add(r.key);
      } catch {
        return; // the server is gone
      }
    }
  };
  const lastCursors = [];
  const waiter = async (i) => {
    let c = cursor;
    while (!stop) {
      lastCursors[i] = c;
      const body = i % 2 ? { cursor: c, keys: [table], interestMode: "coarse", timeoutMs: 2000 } : { cursor: c, keys: [dt.keys.watchKey(templateId, [`g${i % 13}`])], templateIdsUsed: [templateId], timeoutMs: 2000 };
      try {
        const r = await call(srv.base, "/v1/stream/k/touch/wait", "POST", body);
        c = r.body?.cursor ?? c;
      } catch {
        return;
      }
    }
  };
  const load = [...Array.from({ length: 6 }, (_, w) => appender(w)), ...Array.from({ length: 20 }, (_, i) => waiter(i))];
  // Kill once at least 6,000 rows are acknowledged (or after 4 s), mid-stream.
  for (let t = 0; t < 400 && acked.size < 6000; t++) await sleep(10);
  srv.child.kill("SIGKILL");
  assert.equal(await srv.exited, "SIGKILL");
  stop = true;
  await Promise.all(load);
  assert.ok(acked.size >= 600, `acknowledged before the kill: ${acked.size}`);

  // The checkpoint the killed server left.
  const db = openSqliteDatabase(join(dir, "wal.sqlite"));
  const state = db.query("SELECT processed_through FROM stream_touch_state WHERE stream = ?").get("k");
  const tailRow = db.query("SELECT next_offset FROM streams WHERE stream = ?").get("k");
  db.close();
  const checkpoint = BigInt(state?.processed_through ?? -1);
  const rowsInStream = BigInt(tailRow.next_offset);

  srv = await serve(swapped, dir, running);
  // Every acknowledged append is there, once, and nothing else but what was sent.
  const keys = [];
  let offset = "-1";
  let tail;
  for (let page = 0; page < 10_000; page++) {
    const res = await fetch(`${srv.base}/v1/stream/k?offset=${encodeURIComponent(offset)}`);
    const rows = await res.json();
    for (const r of rows) keys.push(r.key);
    offset = res.headers.get("stream-next-offset");
    if (res.headers.get("stream-up-to-date") === "true") {
      tail = offset;
      break;
    }
  }
  assert.ok(tail, "the read reached the tail");
  assert.equal(BigInt(keys.length), rowsInStream, "the reads return every row of the stream");
  const seen = new Set(keys);
  assert.equal(seen.size, keys.length, "no row twice");
  const missing = [...acked].filter((k) => !seen.has(k));
  assert.deepEqual(missing.slice(0, 5), [], `${missing.length} of ${acked.size} acknowledged rows are missing`);

  // Touch processing resumes from the checkpoint and catches up with the tail.
  let meta;
  for (let t = 0; t < 1000; t++) {
    meta = (await call(srv.base, "/v1/stream/k/touch/meta")).body;
    if (meta.walScannedThrough === tail) break;
    await sleep(10);
  }
  assert.equal(meta.walScannedThrough, tail, "the checkpoint reached the tail");
  assert.equal(meta.activeTemplates, 1);
  const behind = rowsInStream - 1n - checkpoint;
  // It resumed where it was: from the last row whose touches its kept journal holds (at most
  // a batch or two behind the stored checkpoint, or ahead of it), not the stream again.
  assert.ok(checkpoint >= 0n, `the killed server had processed nothing (${acked.size} rows acknowledged)`);
  assert.ok(meta.scanRowsTotal <= Number(behind) + 1000 && meta.scanRowsTotal < Number(rowsInStream),
    `processed ${meta.scanRowsTotal} rows after the restart; ${behind} of ${rowsInStream} were after the checkpoint ${checkpoint}`);

  // Every cursor handed out before the kill is kept: the first one and each waiter's last one
  // (all of the same epoch as now), woken at once by the rows written since, never stale; a
  // table nobody wrote stays quiet.
  const epoch = meta.epoch;
  for (const c of [cursor, ...lastCursors]) {
    assert.equal(c.split(":")[0], epoch, `${c}: the epoch survives the kill`);
  }
  const firstWait = (await call(srv.base, "/v1/stream/k/touch/wait", "POST", { cursor, keys: [table], interestMode: "coarse", timeoutMs: 3000 })).body;
  assert.deepEqual([firstWait.stale === true, firstWait.touched], [false, true], JSON.stringify(firstWait));
  const quiet = (await call(srv.base, "/v1/stream/k/touch/wait", "POST", { cursor, keys: [dt.keys.tableKey("public.nobody")], interestMode: "coarse", timeoutMs: 300 })).body;
  assert.deepEqual([quiet.stale === true, quiet.touched], [false, false], JSON.stringify(quiet));
  const replies = await Promise.all(
    lastCursors.map((c) => call(srv.base, "/v1/stream/k/touch/wait", "POST", { cursor: c, keys: [dt.keys.tableKey("public.nobody")], interestMode: "coarse", timeoutMs: 300 })),
  );
  assert.deepEqual(replies.filter((r) => r.body.stale === true).map((r) => r.body), [], "no waiter's last cursor is stale");

  // A wait from a fresh cursor is woken by a new append (a watch key of the template).
  const fresh = (await call(srv.base, "/v1/stream/k/touch/meta?settle=flush&timeoutMs=3000")).body.cursor;
  const w = call(srv.base, "/v1/stream/k/touch/wait", "POST", { cursor: fresh, keys: [dt.keys.watchKey(templateId, ["g-after"])], templateIdsUsed: [templateId], timeoutMs: 5000 });
  await sleep(150);
  assert.equal((await call(srv.base, "/v1/stream/k", "POST", [item("after", "g-after")])).status < 300, true);
  const r = await w;
  assert.deepEqual([r.status, r.body.touched], [200, true], JSON.stringify(r.body));
}

test("a swapped server killed (SIGKILL) while it appends and processes: every acknowledged append is readable after a restart, touch processing resumes and catches up, waits work", async () => {
  const running = new Set();
  try {
    await killAndRestart(running);
  } finally {
    // A failed assertion must not leave a server behind.
    for (const s of running) {
      s.child.kill("SIGKILL");
      await s.exited;
    }
  }
}, { timeout: 60_000, skip: !referenceAvailable() });
