// A bundled deployment of the swapped server: `durable-touch swap` on a copy of the reference
// server's src/, then `bun build` of its Compute entry (`src/compute/entry.ts`) with its worker
// entries laid out as `compute/worker_module_url.ts` expects them (`--root src`: the entry at
// `<out>/compute/entry.js`, its workers at `<out>/touch/processor_worker.js` and
// `<out>/segment/segmenter_worker.js`), following the note the CLI prints: durable-touch
// external, installed in a node_modules beside the bundle. The bundle is started as its own
// Bun process (one segmenter worker thread, which loads the swapped SQLite adapter from the
// bundle too) and must serve a touch wait woken by an append, with the native module loaded at
// run time from the installed package (not a copy inside the bundle).
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { test, tempDir, dt, sleep } from "./harness.mjs";
import { ROOT, BUN, referenceAvailable } from "./reference.mjs";
import { BUNDLE_NOTE } from "../apps/swap/swap.mjs";
import { serverCopies } from "./support/server-copies.mjs";

/** The worker entries the server's bundle needs next to its entry (its `resolveWorkerModuleUrl` calls). */
const WORKER_ENTRIES = ["touch/processor_worker.ts", "segment/segmenter_worker.ts"];
const ENTITY = "public.posts";
const post = (i) => ({ type: ENTITY, key: String(i), value: { id: i, title: `t${i}` }, headers: { operation: "insert" } });
const JSON_HEADERS = { "content-type": "application/json" };

async function call(base, path, method = "GET", json) {
  const res = await fetch(base + path, { method, headers: JSON_HEADERS, body: json === undefined ? undefined : JSON.stringify(json) });
  const text = await res.text();
  let body = text;
  try {
    body = text === "" ? null : JSON.parse(text);
  } catch {}
  return { status: res.status, body, headers: res.headers };
}

/** Files under `dir`, relative to it. */
const files = (dir, base = dir) =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name), base) : [join(dir, e.name).slice(base.length + 1)]));

test("a bun build bundle of the swapped server, built and installed as `swap` says, starts and serves a touch wait on the native core", async () => {
  const { swapped } = serverCopies("swapped");
  const copies = dirname(dirname(swapped));
  const deploy = tempDir("dt-swap-bundle-");
  let server = null;
  try {
    // The swap, as `npx durable-touch swap` runs it: it says what a bundle needs.
    const r = spawnSync(process.execPath, [join(ROOT, "bin", "durable-touch.mjs"), "swap", swapped], { encoding: "utf8" });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /touch\/worker_pool\.ts: swapped to durable-touch\/compat/);
    assert.ok(r.stdout.split("\n").includes(BUNDLE_NOTE), `the CLI prints the bundling note:\n${r.stdout}`);
    const external = BUNDLE_NOTE.match(/--external \S+?(?=\))/)?.[0].split(" ");
    assert.deepEqual(external, ["--external", "durable-touch"]);
    assert.match(BUNDLE_NOTE, /install durable-touch, with better-result, where the bundle runs/);
    // The undo prints no note.
    const undo = spawnSync(process.execPath, [join(ROOT, "bin", "durable-touch.mjs"), "swap", swapped, "--undo"], { encoding: "utf8" });
    assert.equal(undo.status, 0, undo.stderr);
    assert.ok(!undo.stdout.includes(BUNDLE_NOTE));
    assert.equal(spawnSync(process.execPath, [join(ROOT, "bin", "durable-touch.mjs"), "swap", swapped], { encoding: "utf8" }).status, 0);

    // The swap keeps every worker entry file, so the build's entry points are all there.
    for (const entry of WORKER_ENTRIES) assert.ok(existsSync(join(swapped, entry)), entry);

    // The bundle, with durable-touch external as the note says.
    const out = join(deploy, "app");
    const entries = ["compute/entry.ts", ...WORKER_ENTRIES].map((e) => join(swapped, e));
    const build = spawnSync(BUN, ["build", ...entries, "--target", "bun", "--outdir", out, "--root", swapped, ...external], { encoding: "utf8" });
    assert.equal(build.status, 0, `bun build failed:\n${build.stdout}\n${build.stderr}`);
    const built = files(out).sort();
    assert.deepEqual(built, ["compute/entry.js", "segment/segmenter_worker.js", "touch/processor_worker.js"], "the entry and its workers, and nothing of durable-touch inlined (no .node asset)");
    // The build check: every worker a bundle starts is among the outputs, where it looks for it.
    const entryJs = readFileSync(join(out, "compute/entry.js"), "utf8");
    for (const file of built) {
      const text = readFileSync(join(out, file), "utf8");
      for (const m of text.matchAll(/resolveWorkerModuleUrl\(import\.meta\.url, "[^"]+", "([^"]+)"\)/g)) {
        const worker = resolve(dirname(join(out, file)), m[1]);
        assert.ok(existsSync(worker), `${file} starts ${m[1]}, which the bundle holds`);
      }
    }
    assert.match(entryJs, /resolveWorkerModuleUrl\(import\.meta\.url, "\.\/segmenter_worker\.ts", "\.\.\/segment\/segmenter_worker\.js"\)/);
    // The swapped modules import durable-touch at run time.
    assert.match(entryJs, /from "durable-touch\/compat"/);
    assert.match(entryJs, /from "durable-touch\/compat\/sqlite-adapter"/);
    assert.doesNotMatch(entryJs, /class TouchProcessorWorkerPool|processor_worker\.js/, "the reference's pool is not in the swapped bundle");

    // Installed beside the bundle: durable-touch (this checkout) and better-result.
    mkdirSync(join(deploy, "node_modules"));
    symlinkSync(ROOT, join(deploy, "node_modules", "durable-touch"));
    symlinkSync(realpathSync(join(ROOT, "node_modules", "better-result")), join(deploy, "node_modules", "better-result"));

    // Started as a deployment starts it, from its own folder.
    const data = join(deploy, "data");
    mkdirSync(data);
    server = startBundle(out, data);
    await server.listening;
    const base = server.base;

    assert.equal((await call(base, "/v1/stream/x", "PUT")).status, 201);
    const profile = { apiVersion: "durable.streams/profile/v1", profile: { kind: "state-protocol", touch: { enabled: true } } };
    const installed = await call(base, "/v1/stream/x/_profile", "POST", profile);
    assert.equal(installed.status, 200, JSON.stringify(installed.body));
    assert.equal((await call(base, "/v1/stream/x", "POST", [post(1)])).status, 204);
    const meta = await call(base, "/v1/stream/x/touch/meta?settle=flush&timeoutMs=2000");
    assert.equal(meta.status, 200, JSON.stringify(meta.body));
    assert.equal(typeof meta.body.cursor, "string");

    const wait = (key, timeoutMs) => call(base, "/v1/stream/x/touch/wait", "POST", { cursor: meta.body.cursor, keys: [key], interestMode: "coarse", timeoutMs });
    const woken = wait(dt.keys.tableKey(ENTITY), 8000);
    const control = wait(dt.keys.tableKey("public.comments"), 1000);
    await sleep(200);
    const t0 = performance.now();
    assert.equal((await call(base, "/v1/stream/x", "POST", [post(2)])).status, 204);
    const w = await woken;
    const wokenMs = performance.now() - t0;
    assert.equal(w.status, 200, JSON.stringify(w.body));
    assert.equal(w.body.touched, true, JSON.stringify(w.body));
    assert.equal(w.body.effectiveWaitKind, "tableKey");
    assert.ok(wokenMs < 5000, `woken ${wokenMs.toFixed(0)} ms after the append`);
    const c = await control;
    assert.equal(c.status, 200, JSON.stringify(c.body));
    assert.equal(c.body.touched, false, "a wait on another table times out");

    // The native module was loaded at run time from the installed package.
    const maps = `/proc/${server.child.pid}/maps`;
    if (existsSync(maps)) {
      const root = realpathSync(ROOT);
      const mapped = [...new Set(readFileSync(maps, "utf8").split("\n").map((l) => l.split(/\s+/).slice(5).join(" ")).filter((p) => /\.node( \(deleted\))?$/.test(p)))];
      assert.ok(mapped.length > 0 && mapped.every((p) => p.startsWith(`${root}/durable-touch.`)), `native modules mapped: ${mapped.join(", ")}`);
    }
    assert.doesNotMatch(server.output(), /\[ERROR\]|error:/i, "the server and its segmenter worker logged no error");
  } finally {
    if (server) await server.stop();
    rmSync(deploy, { recursive: true, force: true });
    rmSync(copies, { recursive: true, force: true });
  }
}, { timeout: 60_000, skip: !referenceAvailable() });

/** Starts `<out>/compute/entry.js` under Bun on `data` (any free port, one segmenter worker). */
function startBundle(out, data) {
  const child = spawn(BUN, ["--no-install", join("compute", "entry.js"), "--object-store", "local", "--no-auth"], {
    cwd: out,
    env: { ...process.env, DS_ROOT: data, DS_HOST: "127.0.0.1", PORT: "0", DS_SEGMENTER_WORKERS: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const chunks = [];
  const output = () => Buffer.concat(chunks).toString();
  child.stdout.on("data", (d) => chunks.push(d));
  child.stderr.on("data", (d) => chunks.push(d));
  const exited = new Promise((r) => child.on("exit", (code, signal) => r(signal ?? code)));
  const srv = { child, output, base: null };
  srv.listening = new Promise((resolveListening, reject) => {
    const timer = setTimeout(() => reject(new Error(`the bundle did not listen within 20 s:\n${output()}`)), 20_000);
    const check = () => {
      const m = output().match(/listening on 127\.0\.0\.1:(\d+)/);
      if (!m) return;
      clearTimeout(timer);
      srv.base = `http://127.0.0.1:${m[1]}`;
      resolveListening();
    };
    child.stdout.on("data", check);
    exited.then((how) => {
      clearTimeout(timer);
      reject(new Error(`the bundle exited ${how} before listening:\n${output()}`));
    });
  });
  srv.listening.catch(() => {});
  srv.stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const done = await Promise.race([exited.then(() => true), sleep(5000).then(() => false)]);
      if (!done) {
        child.kill("SIGKILL");
        await exited;
      }
    }
  };
  return srv;
}
