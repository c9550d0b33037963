// `durable-touch swap` on @prisma/streams-local, the bundled local runtime `prisma dev` embeds
// (apps/swap/swap-local.mjs): it finds the package (its root, or a project holding it), refuses any
// version or chunk it did not verify without writing anything, rewrites the chunk's adapter,
// manager and routes regions and the profile clone (names read from the chunk, checked against
// TypeScript's parse of it), keeps the original (`--undo` byte for byte, twice = once), and the
// swapped package, imported by its name as `prisma dev` does and started with
// `startLocalDurableStreamsServer`, answers the touch flows over HTTP as the unswapped one does
// under Bun, and also under this test's Node, where the unswapped one cannot start (Node 20 has
// no node:sqlite) and the swapped one runs every connection on durable-touch's SQLite, and
// under Node 22 (a real binary from the npm registry's `node` package, installed once into
// node_modules/.cache: testkit/node-binary.mjs), where both run, the unswapped one on
// node:sqlite. The layouts: npm's, a pnpm-like one (symlinks, a store's hard links) and a
// global install (`npm install -g --prefix` of the packed packages, swapped by the global bin).
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { test, tempDir, isBun } from "./harness.mjs";
import { ROOT, BUN } from "./reference.mjs";
import { swap, swapKind, BUNDLE_NOTE } from "../apps/swap/swap.mjs";
import { swapChunk, SUPPORTED } from "../apps/swap/swap-local.mjs";
import { tokenize, topLevelStatements } from "../apps/swap/js-regions.mjs";
import { LOCAL_PACKAGE_DIR, npmProject as makeNpmProject, pnpmProject } from "./support/local-copies.mjs";
import { nodeBinary } from "../testkit/node-binary.mjs";
import { packDurableTouch, run } from "./support/pack.mjs";

const CHUNK = SUPPORTED[0].chunk;
const available = existsSync(join(LOCAL_PACKAGE_DIR, CHUNK)) && existsSync(BUN);
/** A Node.js binary: this test's own runtime under `node --test`, the `node` on PATH under `bun test`. */
const NODE = isBun ? spawnSync("node", ["-p", "process.execPath"], { encoding: "utf8" }).stdout?.trim() || null : process.execPath;
const NODE_VERSION = NODE ? spawnSync(NODE, ["-p", "process.versions.node"], { encoding: "utf8" }).stdout.trim() : null;
const nodeMajor = NODE_VERSION ? Number(NODE_VERSION.split(".")[0]) : 0;
/** Node 22: this test's Node if it is one, else the npm registry's, from the cache (installed once). */
const NODE22 = !available ? { bin: null, reason: "no @prisma/streams-local or Bun" } : nodeMajor === 22 ? { bin: NODE, version: NODE_VERSION } : nodeBinary(22);
if (!NODE22.bin) console.error(`compat-swap-local: no Node 22 (${NODE22.reason}); its test is skipped`);
const LOG_SWAPPED = `${CHUNK}: swapped to durable-touch/compat (@prisma/streams-local 0.1.11; original saved as ${CHUNK}.orig)`;
const LOG_ALREADY = `${CHUNK}: already swapped (original in ${CHUNK}.orig)`;
/** One temp folder for the file's projects and data dirs (removed at exit). */
const WORK = tempDir("dt-swap-local-");
const fresh = (prefix) => mkdtempSync(join(WORK, prefix));
const npmProject = () => makeNpmProject(fresh("npm-"));
const cli = (...args) => spawnSync(process.execPath, [join(ROOT, "bin", "durable-touch.mjs"), "swap", ...args], { encoding: "utf8" });

/** Every file under `dir` (relative path → bytes). */
function snapshot(dir) {
  const out = new Map();
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out.set(p.slice(dir.length + 1), readFileSync(p));
    }
  };
  walk(dir);
  return out;
}

function assertSameFiles(actual, expected, label) {
  assert.deepEqual([...actual.keys()].sort(), [...expected.keys()].sort(), `${label}: the same files`);
  for (const [f, buf] of expected) assert.ok(actual.get(f).equals(buf), `${label}: ${f} unchanged`);
}

test("swap on an npm install: only the chunk changes (a new file), the original is kept, twice = once, --undo restores it byte for byte", () => {
  const { project, pkg } = npmProject();
  const before = snapshot(pkg);
  const chunk = join(pkg, CHUNK);
  const ino = statSync(chunk).ino;
  assert.equal(swapKind(project), "local");
  assert.equal(swapKind(pkg), "local");

  assert.deepEqual(swap(pkg), [LOG_SWAPPED]);
  const after = snapshot(pkg);
  assert.deepEqual([...after.keys()].sort(), [...before.keys(), `${CHUNK}.orig`].sort());
  for (const [f, buf] of before) if (f !== CHUNK) assert.ok(after.get(f).equals(buf), `${f} unchanged`);
  assert.ok(after.get(`${CHUNK}.orig`).equals(before.get(CHUNK)), "the original is kept");
  assert.notEqual(statSync(chunk).ino, ino, "the chunk is a new file");
  assert.equal(statSync(`${chunk}.orig`).ino, ino, "the original file is kept as it is");
  const text = after.get(CHUNK).toString();
  assert.match(text, /^\/\/ durable-touch swap:/);
  assert.match(text, /^import \* as __durableTouchCompat from "durable-touch\/compat";$/m);
  assert.match(text, /^import \{ getSqliteAdapterRuntimeCounts, openSqliteDatabase \} from "durable-touch\/compat\/sqlite-adapter";$/m);
  assert.doesNotMatch(text, /require2\("(bun|node):sqlite"\)|class TouchProcessorManager|async function handleStateProtocolTouchRoute/);
  // Static imports and no top-level await (a `require()` of the package would refuse an async module).
  assert.ok(!tokenize(text).tokens.some((t) => t.depth === 0 && t.type === "id" && t.value === "await"), "no top-level await");

  // Swapping again, by the project's path or the package's, changes nothing.
  assert.deepEqual(swap(project), [LOG_ALREADY]);
  assert.deepEqual(swap(pkg), [LOG_ALREADY]);
  assertSameFiles(snapshot(pkg), after, "swapped twice");

  // The CLI, as `npx durable-touch swap` runs it (no bundling note: nothing is bundled here).
  let r = cli(project, "--undo");
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, `${CHUNK}: restored the original\n`);
  assertSameFiles(snapshot(pkg), before, "undone");
  assert.equal(statSync(chunk).ino, ino, "the original file itself is back");
  assert.deepEqual(swap(project, { undo: true }), [`${CHUNK}: not swapped, nothing to undo`]);
  r = cli(project);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, `${LOG_SWAPPED}\n`);
  assert.ok(!r.stdout.includes(BUNDLE_NOTE));
  assertSameFiles(snapshot(pkg), after, "the CLI's swap is the same");
  rmSync(project, { recursive: true, force: true });
}, { skip: !available });

test("swap refuses what it did not verify (another version, a chunk one byte off, durable-touch not resolvable) and writes nothing", () => {
  const cases = [
    ["version 0.1.12", (pkg) => writeFileSync(join(pkg, "package.json"), readFileSync(join(pkg, "package.json"), "utf8").replace('"version": "0.1.11"', '"version": "0.1.12"')),
      /found @prisma\/streams-local 0\.1\.12 at .*; this swap supports @prisma\/streams-local 0\.1\.11 \(chunk dist\/local\/index-cm8xztbg\.js, sha256 169f6ce53c80[0-9a-f]{52}\); nothing was changed$/],
    ["a byte of the chunk", (pkg) => {
      const buf = readFileSync(join(pkg, CHUNK));
      buf[buf.length >> 1] ^= 1;
      writeFileSync(join(pkg, CHUNK), buf);
    }, /found @prisma\/streams-local 0\.1\.11 at .* whose dist\/local\/index-cm8xztbg\.js has sha256 (?!169f6ce5)[0-9a-f]{64}; this swap supports .*; nothing was changed$/],
    ["no durable-touch", (_pkg, project) => rmSync(join(project, "node_modules", "durable-touch")),
      /durable-touch\/compat does not resolve from .*dist\/local: install durable-touch .*; nothing was changed$/],
  ];
  for (const [label, spoil, message] of cases) {
    const { project, pkg } = npmProject();
    spoil(pkg, project);
    const before = snapshot(pkg);
    assert.throws(() => swap(project), message, label);
    assertSameFiles(snapshot(pkg), before, label);
    const r = cli(project);
    assert.equal(r.status, 1, label);
    assert.match(r.stderr.trim(), new RegExp(`^durable-touch swap: ${message.source.replace(/^\^/, "")}`), label);
    assertSameFiles(snapshot(pkg), before, `${label} (CLI)`);
    rmSync(project, { recursive: true, force: true });
  }
}, { skip: !available });

test("the swap reads the chunk's declarations and names as TypeScript parses them, binds bun's renamed names, and refuses what it cannot replace", () => {
  const original = readFileSync(join(LOCAL_PACKAGE_DIR, CHUNK), "utf8");
  // The scan's top-level declarations are TypeScript's.
  const ts = createRequire(import.meta.url)("typescript");
  const source = ts.createSourceFile("chunk.js", original, ts.ScriptTarget.Latest, false, ts.ScriptKind.JS);
  const theirs = [];
  for (const st of source.statements) {
    if (ts.isVariableStatement(st)) for (const d of st.declarationList.declarations) theirs.push(d.name.getText(source));
    else if ((ts.isFunctionDeclaration(st) || ts.isClassDeclaration(st)) && st.name) theirs.push(st.name.text);
  }
  const { tokens, markers } = tokenize(original);
  const ours = topLevelStatements(tokens).flatMap((s) => s.names);
  assert.deepEqual(ours, theirs);
  assert.equal(markers.length, original.split("\n").filter((l) => /^\/\/ src\/\S+\.ts$/.test(l)).length);

  const { bindings } = swapChunk(original);
  assert.deepEqual(bindings, {
    getSqliteAdapterRuntimeCounts: "src/sqlite/adapter.ts:getSqliteAdapterRuntimeCounts",
    openSqliteDatabase: "src/sqlite/adapter.ts:openSqliteDatabase",
    TouchProcessorManager: "src/touch/manager.ts:TouchProcessorManager",
    handleStateProtocolTouchRoute: "src/profiles/stateProtocol/routes.ts:handleStateProtocolTouchRoute",
  });

  // A build where bun renamed the names (collisions elsewhere) is read by its own names.
  const rename = (text, pairs) => pairs.reduce((t, [a, b]) => t.replace(new RegExp(`\\b${a}\\b`, "g"), b), text);
  const renamed = rename(original, [
    ["openSqliteDatabase", "openSqliteDatabase3"],
    ["TouchProcessorManager", "TouchProcessorManager2"],
    ["LiveMetricsV2", "LiveMetricsV22"],
    ["getStateProtocolTouchConfig", "getStateProtocolTouchConfig4"],
    ["handleStateProtocolTouchRoute", "handleStateProtocolTouchRoute2"],
    ["cloneStreamProfileSpec", "cloneStreamProfileSpec5"],
  ]);
  const r = swapChunk(renamed);
  assert.match(r.text, /^import \{ getSqliteAdapterRuntimeCounts, openSqliteDatabase as openSqliteDatabase3 \} from "durable-touch\/compat\/sqlite-adapter";$/m);
  assert.match(r.text, /^const TouchProcessorManager2 = __durableTouchCompat\.createTouchProcessorManager\(\{ openSqliteDatabase: openSqliteDatabase3, LiveMetricsV2: LiveMetricsV22 \}\);$/m);
  assert.match(r.text, /^const handleStateProtocolTouchRoute2 = __durableTouchCompat\.createStateProtocolTouchRoute\(\{ getStateProtocolTouchConfig: getStateProtocolTouchConfig4 \}\);$/m);
  assert.match(r.text, /^function cloneStreamProfileSpec5\(profile\) \{\n {2}return __durableTouchCompat\.clonePlainData\(profile\);\n\}$/m);
  // The namespace name never shadows one of the chunk's.
  assert.match(swapChunk(original.replace("var STREAM_FLAG_DELETED", "var __durableTouchCompat = 0;\nvar STREAM_FLAG_DELETED")).text, /^import \* as __durableTouchCompat2 from "durable-touch\/compat";$/m);

  // The rest of the chunk using a name the swap does not replace; top-level code it does not
  // know in a replaced module; a patched function that is not the expected one.
  assert.throws(() => swapChunk(original.replace("// src/db/db.ts\n", "// src/db/db.ts\nvar adapterKind = BunDatabaseAdapter.name;\n")), /src\/sqlite\/adapter\.ts: the rest of the chunk uses BunDatabaseAdapter, which this swap does not replace/);
  assert.throws(() => swapChunk(original.replace("var EXACT_FINE_WAIT_MAX_KEYS = 16;", "var EXACT_FINE_WAIT_MAX_KEYS = 16;\nregisterRoute(EXACT_FINE_WAIT_MAX_KEYS);")), /src\/profiles\/stateProtocol\/routes\.ts: top-level code this swap does not know/);
  assert.throws(() => swapChunk(original.replace("  return structuredClone(profile);\n", "  return { ...profile };\n")), /src\/profiles\/profile\.ts: cloneStreamProfileSpec is not `return structuredClone\(profile\)`/);
  assert.throws(() => swapChunk(original.replace("class LiveMetricsV2 {", "class LiveMetrics {")), /src\/touch\/live_metrics\.ts: no declaration of LiveMetricsV2/);
}, { skip: !available });

// Over HTTP, as `prisma dev` uses it.

/** Runs support/local-driver.mjs from `project` under `runtime` ("bun", or a Node.js binary). */
function drive(project, runtime) {
  copyFileSync(join(ROOT, "__test__", "support", "local-driver.mjs"), join(project, "driver.mjs"));
  const data = fresh("data-");
  return new Promise((resolve, reject) => {
    const child = spawn(runtime === "bun" ? BUN : runtime, [join(project, "driver.mjs")], {
      cwd: project,
      env: { ...process.env, DS_LOCAL_DATA_ROOT: data },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const out = [];
    const err = [];
    child.stdout.on("data", (d) => out.push(d));
    child.stderr.on("data", (d) => err.push(d));
    child.on("error", reject);
    child.on("close", (code, signal) => {
      const stdout = Buffer.concat(out).toString();
      try {
        resolve(JSON.parse(stdout));
      } catch {
        reject(new Error(`the driver (${runtime}) exited ${code ?? signal} without JSON: ${stdout.slice(0, 500)} ${Buffer.concat(err).toString().slice(0, 2000)}`));
      }
    });
  });
}

/** What a user of the HTTP API sees of one run. */
function visible(run) {
  return run.steps.map((s) => {
    const b = s.body && typeof s.body === "object" && !Array.isArray(s.body) ? s.body : {};
    return {
      name: s.name,
      status: s.status,
      touched: b.touched,
      kind: b.effectiveWaitKind,
      error: b.error?.code,
      fields: Object.keys(b).sort().join(","),
      mode: b.mode,
      cursorShape: typeof b.cursor === "string" ? /^[0-9a-f]{16}:\d+$/.test(b.cursor) : undefined,
      activated: Array.isArray(b.activated) ? b.activated.map((t) => t.templateId) : undefined,
      denied: b.denied,
      records: Array.isArray(s.body) ? s.body.length : undefined,
    };
  });
}

function checkRun(run, label) {
  assert.equal(run.ok, true, `${label}: ${run.error}`);
  const step = (name) => {
    const s = run.steps.find((x) => x.name === name);
    assert.ok(s, `${label}: step ${name}`);
    return s;
  };
  assert.equal(step("create stream").status, 201, label);
  assert.equal(step("install profile").status, 200, label);
  assert.equal(step("touch/meta").body.mode, "memory", label);
  for (const [name, kind] of [["table-key wait", "tableKey"], ["watch-key wait", "fineKey"]]) {
    const s = step(name);
    assert.equal(s.status, 200, `${label}: ${name}`);
    assert.equal(s.body.touched, true, `${label}: ${name} woken`);
    assert.equal(s.body.effectiveWaitKind, kind, `${label}: ${name}`);
    assert.ok(s.elapsedMs >= 250 && s.wokenMs < 3000, `${label}: ${name} woken by the write (${s.wokenMs.toFixed(0)} ms after it)`);
  }
  for (const name of ["other table-key wait (control)", "other watch-key wait (control)"]) {
    const s = step(name);
    assert.equal(s.body.touched, false, `${label}: ${name} not woken`);
    assert.ok(s.elapsedMs >= 950, `${label}: ${name} timed out after ${s.elapsedMs.toFixed(0)} ms`);
  }
  assert.deepEqual(step("activate template").body.activated.map((t) => t.templateId), [run.templateId], label);
  assert.equal(step("read the stream back").body.length, 4, label);
}

/** The unswapped package's run under Bun, the answers every other run is compared with (one per file). */
let plainBunRun = null;
const plainBunOnce = () =>
  (plainBunRun ??= (async () => {
    const plain = npmProject();
    const run = await drive(plain.project, "bun");
    rmSync(plain.project, { recursive: true, force: true });
    checkRun(run, "unswapped, Bun");
    assert.equal(run.uses.nativeSqliteConnections, 0, "unswapped, Bun: no durable-touch connection");
    return run;
  })());

test("the swapped package, started by startLocalDurableStreamsServer, answers the touch flows as the unswapped one does (Bun), and runs on this Node too", async () => {
  const plain = npmProject();
  const swapped = npmProject();
  swap(swapped.project);
  const plainBun = await plainBunOnce();
  const swappedBun = await drive(swapped.project, "bun");
  const swappedNode = await drive(swapped.project, NODE);
  assert.equal(swappedNode.runtime, "node");
  checkRun(swappedBun, "swapped, Bun");
  checkRun(swappedNode, `swapped, Node ${NODE_VERSION}`);
  assert.deepEqual(visible(swappedBun), visible(plainBun));
  assert.deepEqual(visible(swappedNode), visible(plainBun));
  // The swapped server's connections are durable-touch's (its SQLite adapter); the unswapped one's are not.
  assert.ok(swappedBun.uses.nativeSqliteConnections > 0);
  assert.ok(swappedNode.uses.nativeSqliteConnections > 0);
  if (nodeMajor < 22) {
    // The unswapped package needs node:sqlite (Node 22); swapped, it needs none.
    const plainNode = await drive(plain.project, NODE);
    assert.equal(plainNode.ok, false);
    assert.match(plainNode.error, /No such built-in module: node:sqlite/);
  }
  rmSync(plain.project, { recursive: true, force: true });
  rmSync(swapped.project, { recursive: true, force: true });
}, { timeout: 60_000, skip: !available || !NODE });

test("under Node 22 (the npm registry's binary) the unswapped package runs on node:sqlite and the swapped one on durable-touch's SQLite, both answering as the unswapped one does under Bun", async () => {
  const plain = npmProject();
  const swapped = npmProject();
  swap(swapped.project);
  const expected = visible(await plainBunOnce());
  const plainNode22 = await drive(plain.project, NODE22.bin);
  const swappedNode22 = await drive(swapped.project, NODE22.bin);
  for (const [run, label] of [[plainNode22, "unswapped"], [swappedNode22, "swapped"]]) {
    assert.equal(run.runtime, "node", label);
    assert.equal(run.version, NODE22.version, label);
    checkRun(run, `${label}, Node ${NODE22.version}`);
    assert.deepEqual(visible(run), expected, `${label}, Node ${NODE22.version}`);
  }
  assert.equal(plainNode22.uses.nativeSqliteConnections, 0, "unswapped: node:sqlite's connections");
  assert.ok(swappedNode22.uses.nativeSqliteConnections > 0, "swapped: durable-touch's connections");
  rmSync(plain.project, { recursive: true, force: true });
  rmSync(swapped.project, { recursive: true, force: true });
}, { timeout: 60_000, skip: !available || !NODE22.bin });

test("a pnpm-like layout: the symlinked package is swapped where it lives, the store's file is not written, and the swapped server resolves durable-touch", async () => {
  const { project, pkg, real, store } = pnpmProject(fresh("pnpm-"));
  const storeBefore = readFileSync(join(store, CHUNK));
  const ino = statSync(join(store, CHUNK)).ino;
  assert.equal(statSync(join(real, CHUNK)).ino, ino, "hard-linked from the store");
  assert.deepEqual(swap(project), [LOG_SWAPPED]);
  assert.ok(readFileSync(join(store, CHUNK)).equals(storeBefore), "the store's file is untouched");
  assert.notEqual(statSync(join(real, CHUNK)).ino, ino);
  assert.ok(existsSync(join(real, `${CHUNK}.orig`)));
  assert.deepEqual(swap(pkg), [LOG_ALREADY]);
  const run = await drive(project, NODE);
  assert.equal(run.runtime, "node");
  checkRun(run, "swapped, pnpm layout");
  assert.deepEqual(swap(project, { undo: true }), [`${CHUNK}: restored the original`]);
  assert.equal(statSync(join(real, CHUNK)).ino, ino, "the store's file is linked again");
  assert.ok(!existsSync(join(real, `${CHUNK}.orig`)));
  rmSync(project, { recursive: true, force: true });
}, { timeout: 30_000, skip: !available || !NODE });

test("a global install (npm install -g --prefix): refused, writing nothing, until durable-touch and better-result resolve from the package; then the global bin swaps it, it serves the touch flows, and --undo restores it", async () => {
  // The tarballs a registry would serve: @prisma/streams-local as installed here, durable-touch
  // and its binary package as published. Their dependencies come from npm's cache (or the registry).
  const packs = fresh("packs-");
  run("npm", ["pack", "--ignore-scripts", "--silent", "--pack-destination", packs, LOCAL_PACKAGE_DIR], packs);
  const localTarball = join(packs, "prisma-streams-local-0.1.11.tgz");
  const dt = packDurableTouch(packs);
  const prefix = fresh("global-");
  const installGlobal = (...specs) => run("npm", ["install", "-g", "--prefix", prefix, "--ignore-scripts", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel", "error", ...specs], prefix);
  installGlobal(localTarball);
  const globalRoot = run("npm", ["root", "-g", "--prefix", prefix], prefix).trim();
  assert.equal(globalRoot, join(prefix, "lib", "node_modules"));
  const pkg = join(globalRoot, "@prisma", "streams-local");
  const before = snapshot(pkg);
  assert.ok(before.has(CHUNK) && !before.has(`${CHUNK}.orig`));

  // Only the package installed globally: durable-touch resolves from nowhere above it.
  let r = cli(pkg);
  assert.equal(r.status, 1, r.stdout);
  assert.equal(r.stdout, "");
  assert.match(r.stderr.trim(), /^durable-touch swap: durable-touch\/compat does not resolve from .*\/lib\/node_modules\/@prisma\/streams-local\/dist\/local: install durable-touch where it resolves .*; nothing was changed$/);
  assertSameFiles(snapshot(pkg), before, "refused: no durable-touch");

  // durable-touch installed globally beside it resolves, but its optional peer better-result
  // does not: npm installs the package's own copy under @prisma/streams-local/node_modules.
  installGlobal(dt.main, dt.binary);
  const bin = join(prefix, "bin", "durable-touch");
  const globalCli = (...args) => spawnSync(bin, ["swap", ...args], { encoding: "utf8" });
  r = globalCli(pkg);
  assert.equal(r.status, 1, r.stdout);
  assert.equal(r.stdout, "");
  assert.match(r.stderr.trim(), /^durable-touch swap: better-result does not resolve from durable-touch \(.*\/lib\/node_modules\/durable-touch\): install it next to durable-touch; nothing was changed$/);
  assertSameFiles(snapshot(pkg), before, "refused: no better-result beside durable-touch");

  // With better-result installed globally too (the version the package got), the global bin swaps it.
  const betterResult = JSON.parse(readFileSync(join(pkg, "node_modules", "better-result", "package.json"), "utf8")).version;
  installGlobal(`better-result@${betterResult}`);
  r = globalCli(pkg);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, `${LOG_SWAPPED}\n`);
  const swappedFiles = snapshot(pkg);
  assert.deepEqual([...swappedFiles.keys()].sort(), [...before.keys(), `${CHUNK}.orig`].sort());
  assert.ok(swappedFiles.get(`${CHUNK}.orig`).equals(before.get(CHUNK)), "the original is kept");

  // Started by a script in the global node_modules (as a globally installed tool imports it):
  // the package and durable-touch both resolve from the global root.
  const tool = join(globalRoot, "dt-global-tool");
  mkdirSync(tool);
  const expected = visible(await plainBunOnce());
  for (const [runtime, label] of [["bun", "swapped globally, Bun"], [NODE, `swapped globally, Node ${NODE_VERSION}`]]) {
    const served = await drive(tool, runtime);
    checkRun(served, label);
    assert.deepEqual(visible(served), expected, label);
    assert.ok(served.uses.nativeSqliteConnections > 0, `${label}: durable-touch's connections`);
  }

  r = globalCli(pkg, "--undo");
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, `${CHUNK}: restored the original\n`);
  assertSameFiles(snapshot(pkg), before, "undone");
}, { timeout: 90_000, skip: !available || !NODE });
