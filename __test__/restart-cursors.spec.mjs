// Restarts keep every cursor: our server, and a swapped `prisma dev` runtime
// (@prisma/streams-local under this file's runtime), as real processes stopped with SIGKILL
// while appends run and then with SIGTERM, answer the cursors they handed out before as they
// did (never `stale`): a wait whose table was written before, around or after the crash is
// woken, and the others stay parked until their timeout.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { copyFileSync, existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { test, dt, tempDir, sleep, runtime } from "./harness.mjs";
import { referenceAvailable } from "./reference.mjs";
import { swap } from "../apps/swap/swap.mjs";
import { SUPPORTED } from "../apps/swap/swap-local.mjs";
import { LOCAL_PACKAGE_DIR, npmProject } from "./support/local-copies.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const LOCAL_SERVE = join(root, "__test__", "support", "local-serve.mjs");
const localAvailable = referenceAvailable() && existsSync(join(LOCAL_PACKAGE_DIR, SUPPORTED[0].chunk));
const JSON_HEADERS = { "content-type": "application/json" };
const ENTITIES = Array.from({ length: 40 }, (_, i) => `public.t${i}`);
const row = (entity, id) => ({ type: entity, key: String(id), value: { id }, headers: { operation: "insert" } });

/** Starts `bin/durable-touch.mjs` on `dataDir` in this runtime; resolves { url, child, exited }. */
async function serve(dataDir, extra = []) {
  const child = spawn(process.execPath, [join(root, "bin", "durable-touch.mjs"), "--port", "0", "--data", dataDir, ...extra], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise((r) => child.on("exit", (code, signal) => r({ code, signal })));
  let out = "";
  let err = "";
  child.stderr.on("data", (d) => (err += d));
  const url = await new Promise((resolve, reject) => {
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[^\s]+)/);
      if (m) resolve(m[1]);
    });
    exited.then((how) => reject(new Error(`server exited early (${JSON.stringify(how)}): ${out}${err}`)));
  });
  return { url, child, exited, stderr: () => err };
}

/**
 * Starts the swapped local runtime of `project` on `dataRoot` in this runtime; as serve(). After
 * a SIGKILL the runtime's own lock on its data (proper-lockfile's `server.lock.lock` folder)
 * is left behind, and it refuses to start until the lock is 30 s stale, as `prisma dev` does;
 * the test removes the dead process's lock instead of waiting (what the runtime itself does
 * once it is stale).
 */
async function serveLocal(project, dataRoot, env = {}) {
  try {
    return await serveLocalOnce(project, dataRoot, env);
  } catch (e) {
    if (!/ELOCKED|already being held/.test(String(e.message))) throw e;
    for (const f of readdirSync(dataRoot, { recursive: true })) {
      if (String(f).endsWith("server.lock.lock")) rmSync(join(dataRoot, String(f)), { recursive: true, force: true });
    }
    return serveLocalOnce(project, dataRoot, env);
  }
}

async function serveLocalOnce(project, dataRoot, env) {
  copyFileSync(LOCAL_SERVE, join(project, "serve.mjs"));
  const child = spawn(process.execPath, [join(project, "serve.mjs")], {
    cwd: project,
    env: { ...process.env, DS_LOCAL_DATA_ROOT: dataRoot, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise((r) => child.on("exit", (code, signal) => r({ code, signal })));
  let err = "";
  child.stderr.on("data", (d) => (err += d));
  const port = await new Promise((resolve, reject) => {
    let buf = "";
    child.stdout.on("data", (d) => {
      buf += d;
      const i = buf.indexOf("\n");
      if (i >= 0) resolve(JSON.parse(buf.slice(0, i)).port);
    });
    exited.then((how) => reject(new Error(`the local runtime exited early (${JSON.stringify(how)}): ${err}`)));
  });
  return { url: `http://127.0.0.1:${port}`, child, exited, stderr: () => err };
}

async function stop(srv, signal) {
  if (srv.child.exitCode === null && srv.child.signalCode === null) srv.child.kill(signal);
  return srv.exited;
}

const call = async (url, path, method = "GET", body) => {
  const r = await fetch(url + path, { method, headers: JSON_HEADERS, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
};

const wait = (url, cursor, entity, timeoutMs) =>
  call(url, "/v1/stream/r/touch/wait", "POST", { cursor, keyIds: [dt.keys.tableKeyId(entity)], interestMode: "coarse", timeoutMs }).then(
    (r) => r.body,
    () => null, // the server went away under the wait (the kill)
  );

/** Waits with `cursor` on every table at `url`; appends `after` meanwhile; returns entity → reply. */
async function waitAll(url, cursor, after = []) {
  const replies = ENTITIES.map((e) => wait(url, cursor, e, 2_000).then((r) => [e, r]));
  await sleep(100);
  let id = 1e6;
  for (const e of after) assert.ok((await call(url, "/v1/stream/r", "POST", [row(e, id++)])).status < 300);
  return new Map(await Promise.all(replies));
}

function check(replies, touched, label) {
  for (const [e, r] of replies) {
    assert.ok(r, `${label}: ${e}: no reply`);
    assert.notEqual(r.stale, true, `${label}: ${e}: stale`);
    assert.equal(r.touched, touched.has(e), `${label}: ${e}: touched ${r.touched}, written ${touched.has(e)}`);
  }
}

/**
 * The scenario on the server `start()` starts (on the same data each time); `ours`: our
 * server, whose meta and stats say what was kept.
 */
async function keepsEveryCursor(start, { ours }) {
  let srv = await start();
  try {
    assert.ok((await call(srv.url, "/v1/stream/r", "PUT")).status < 300);
    const profile = { apiVersion: "durable.streams/profile/v1", profile: { kind: "state-protocol", touch: { enabled: true } } };
    assert.equal((await call(srv.url, "/v1/stream/r/_profile", "POST", profile)).status, 200);
    let id = 0;
    const append = (url, e) => call(url, "/v1/stream/r", "POST", [row(e, id++)]);
    // Written before the cursor: never a reason to wake.
    for (const e of ENTITIES.slice(0, 5)) assert.ok((await append(srv.url, e)).status < 300);
    const c1 = (await call(srv.url, "/v1/stream/r/touch/meta?settle=flush")).body.cursor;
    // Parked on the server that will be killed (within the reference hosts' 5 s limit).
    const parked = ENTITIES.map((e) => wait(srv.url, c1, e, 4_000));
    await sleep(100);
    const touched = new Set();
    // Before the crash.
    for (const e of ENTITIES.slice(5, 10)) {
      assert.ok((await append(srv.url, e)).status < 300);
      touched.add(e);
    }
    // Around it: appends run when the process is killed; the acknowledged ones must wake.
    const around = ENTITIES.slice(10, 15);
    let running = true;
    const appender = (async () => {
      for (let i = 0; running; i++) {
        const e = around[i % around.length];
        const r = await append(srv.url, e).catch(() => null);
        if (r && r.status < 300) touched.add(e);
      }
    })();
    while (around.some((e) => !touched.has(e))) await sleep(5);
    await sleep(150);
    assert.deepEqual(await stop(srv, "SIGKILL"), { code: null, signal: "SIGKILL" });
    running = false;
    await appender;
    await Promise.all(parked);

    srv = await start();
    const meta = (await call(srv.url, "/v1/stream/r/touch/meta")).body;
    assert.equal(meta.epoch, c1.split(":")[0], "the same epoch after the crash");
    if (ours) {
      assert.equal(meta.journalKept, true);
      assert.ok(meta.replayedFlushes > 0, "the flushes since the snapshot were replayed");
    }
    // After it.
    const after = ENTITIES.slice(15, 20);
    for (const e of after) touched.add(e);
    check(await waitAll(srv.url, c1, after), touched, "after SIGKILL");
    if (ours) {
      const stats = (await call(srv.url, "/v1/stats")).body;
      assert.equal(stats.engine.keptJournals.kept, 1);
      assert.equal(stats.engine.keptJournals.refused, 0);
    }

    // A clean restart: the same answers, nothing replayed.
    assert.deepEqual(await stop(srv, "SIGTERM"), { code: 0, signal: null });
    srv = await start();
    const clean = (await call(srv.url, "/v1/stream/r/touch/meta")).body;
    assert.equal(clean.epoch, meta.epoch);
    if (ours) assert.equal(clean.replayedFlushes, 0);
    check(await waitAll(srv.url, c1), touched, "after SIGTERM");
    await stop(srv, "SIGTERM");

    // The reference's behaviour on request: a new epoch, old cursors stale.
    srv = await start(false);
    const r = await wait(srv.url, c1, ENTITIES[30], 1_000);
    assert.equal(r.stale, true);
  } finally {
    await stop(srv, "SIGKILL");
  }
}

test("our server keeps every cursor across SIGKILL while appending and across a clean restart", async () => {
  const dataDir = tempDir("dt-restart-");
  await keepsEveryCursor((keep = true) => serve(dataDir, keep ? [] : ["--no-keep-cursors"]), { ours: true });
}, { timeout: 90_000 });

test(`a swapped prisma dev runtime (${runtime}) keeps every cursor across SIGKILL while appending and across a clean restart`, async () => {
  const { project } = npmProject(join(tempDir("dt-restart-local-"), "project"));
  swap(project);
  const dataRoot = tempDir("dt-restart-local-data-");
  await keepsEveryCursor((keep = true) => serveLocal(project, dataRoot, keep ? {} : { DURABLE_TOUCH_KEEP_CURSORS: "0" }), { ours: false });
}, { timeout: 120_000, skip: !localAvailable });

test("a damaged kept journal is refused: that stream starts a new epoch, the others keep theirs, the server starts", async () => {
  const dataDir = tempDir("dt-restart-damage-");
  let srv = await serve(dataDir);
  try {
    const cursors = {};
    for (const name of ["a", "b"]) {
      assert.equal((await call(srv.url, `/v1/stream/${name}`, "PUT")).status, 201);
      const profile = { profile: { kind: "state-protocol", touch: { enabled: true } } };
      assert.equal((await call(srv.url, `/v1/stream/${name}/_profile`, "POST", profile)).status, 200);
      assert.equal((await call(srv.url, `/v1/stream/${name}`, "POST", [row("public.t0", 1)])).status, 204);
      cursors[name] = (await call(srv.url, `/v1/stream/${name}/touch/meta?settle=flush`)).body.cursor;
    }
    assert.deepEqual(await stop(srv, "SIGTERM"), { code: 0, signal: null });
    const folder = join(dataDir, "durable-touch.sqlite-journals");
    const snaps = readdirSync(folder).filter((f) => f.endsWith(".snap"));
    assert.equal(snaps.length, 2);
    // Which file is stream a's: its name is in its header.
    const aSnap = snaps.find((f) => readFileSync(join(folder, f)).includes(Buffer.from("\u0001\u0000\u0000\u0000a")));
    assert.ok(aSnap);
    const bytes = readFileSync(join(folder, aSnap));
    writeFileSync(join(folder, aSnap), bytes.subarray(0, bytes.length - 3)); // truncated
    srv = await serve(dataDir);
    const ask = (name) =>
      call(srv.url, `/v1/stream/${name}/touch/wait`, "POST", { cursor: cursors[name], keyIds: [dt.keys.tableKeyId("public.t9")], timeoutMs: 300 });
    assert.equal((await ask("a")).body.stale, true, "the damaged journal's cursors are stale");
    const b = (await ask("b")).body;
    assert.deepEqual([b.stale === true, b.touched], [false, false], "the other stream keeps its cursors");
    assert.match(srv.stderr(), /was not taken up \(truncated|was not taken up \(checksum/);
  } finally {
    await stop(srv, "SIGKILL");
  }
}, { timeout: 60_000 });
