// The swap command on a copy of the reference server's src/, and the swapped server driven
// over HTTP like a user (under Bun; the reference is Bun-only), next to the unswapped copy:
// the same flows give the same visible answers, the swapped copy really runs the native
// SQLite binding, manager, routes and journal, and it delivers the invalidations the
// unswapped server loses.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { appendFileSync, existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, dirname, resolve } from "node:path";
import { test, tempDir } from "./harness.mjs";
import { ROOT, REFERENCE_SRC, runReference, referenceAvailable } from "./reference.mjs";
import { swap, exportedNames } from "../apps/swap/swap.mjs";
import { serverCopies } from "./support/server-copies.mjs";

const MODULES = ["sqlite/adapter.ts", "touch/touch_journal.ts", "touch/worker_pool.ts", "touch/manager.ts", "profiles/stateProtocol/routes.ts", "profiles/profile.ts"];
/** Modules the swap patches (one function) rather than replaces. */
const PATCHED = ["profiles/profile.ts"];
const swappedLog = (m) =>
  PATCHED.includes(m)
    ? `${m}: patched to use durable-touch/compat (original saved as ${m}.orig)`
    : `${m}: swapped to durable-touch/compat${m === "sqlite/adapter.ts" ? "/sqlite-adapter" : ""} (original saved as ${m}.orig)`;

const bytes = (src) => MODULES.map((m) => readFileSync(join(src, m)));

/** Every name the server's other modules import from the swapped modules. */
function importedNames(src) {
  const names = Object.fromEntries(MODULES.map((m) => [m, new Set()]));
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith(".ts")) {
        const text = readFileSync(p, "utf8");
        for (const m of text.matchAll(/import\s+(?:type\s+)?\{([^}]*)\}\s+from\s+"([^"]+)"/g)) {
          const target = resolve(dirname(p), m[2]).replace(/\.ts$/, "") + ".ts";
          const mod = MODULES.find((x) => target === join(src, x));
          if (mod) for (const part of m[1].split(",")) if (part.trim()) names[mod].add(part.trim().replace(/^type\s+/, "").split(/\s+as\s+/)[0]);
        }
      }
    }
  };
  walk(src);
  return names;
}

test("swap rewrites exactly its six modules, keeps their export names, is idempotent, and --undo restores them byte for byte", () => {
  const { a, b } = serverCopies("a", "b");
  const original = bytes(a);
  const before = readdirSync(join(a, "touch")).sort();

  const log = swap(a);
  assert.deepEqual(log, MODULES.map(swappedLog));
  assert.deepEqual(readdirSync(join(a, "touch")).sort(), [...before, "manager.ts.orig", "touch_journal.ts.orig", "worker_pool.ts.orig"].sort());
  MODULES.forEach((m, i) => assert.ok(readFileSync(join(a, `${m}.orig`)).equals(original[i]), `${m}.orig is the original`));
  // What the rest of the server imports from them, before the swap and after it (the swapped
  // manager and routes no longer import the journal or the pool; the shims import the adapter).
  const importedBefore = importedNames(b);
  const imported = importedNames(a);
  const sorted = (set) => [...set].sort();
  assert.deepEqual(sorted(importedBefore["touch/touch_journal.ts"]), ["TouchJournal", "TouchJournalIntervalStats", "TouchJournalMeta", "parseTouchCursor"]);
  assert.deepEqual(sorted(imported["touch/touch_journal.ts"]), ["TouchJournalIntervalStats", "TouchJournalMeta"]);
  assert.deepEqual(sorted(importedBefore["touch/worker_pool.ts"]), ["TouchProcessorWorkerPool"]);
  assert.deepEqual(sorted(imported["touch/worker_pool.ts"]), []);
  for (const names of [importedBefore, imported]) {
    assert.deepEqual(sorted(names["touch/manager.ts"]), ["TouchProcessorManager"]);
    assert.deepEqual(sorted(names["profiles/stateProtocol/routes.ts"]), ["handleStateProtocolTouchRoute"]);
  }
  assert.deepEqual(sorted(imported["sqlite/adapter.ts"]), sorted(importedBefore["sqlite/adapter.ts"]).concat().sort());
  assert.ok(imported["sqlite/adapter.ts"].has("openSqliteDatabase"));
  for (const m of PATCHED) {
    // The original with one function's body changed, and the import it needs.
    const text = readFileSync(join(a, m), "utf8");
    const orig = readFileSync(join(a, `${m}.orig`), "utf8");
    assert.match(text, /^\/\/ durable-touch swap:.*\n.*\nimport \{ clonePlainData \} from "durable-touch\/compat";\n/);
    assert.equal(text.split("\n").slice(3).join("\n").replace("return clonePlainData(profile);", "return structuredClone(profile);"), orig);
  }
  for (const m of MODULES.filter((m) => !PATCHED.includes(m))) {
    const text = readFileSync(join(a, m), "utf8");
    assert.match(text, /from "durable-touch\/compat(\/sqlite-adapter)?"/);
    assert.doesNotMatch(text.replace(/^\/\/.*$/gm, ""), /\bclass\b|\bfunction\b/, "only shims: re-exports and factory calls");
    const exported = exportedNames(text);
    for (const name of importedBefore[m]) assert.ok(exported.has(name), `${m} still exports ${name}`);
    // Every export of the original survives (values and types).
    assert.deepEqual([...exported].sort(), [...exportedNames(readFileSync(join(a, `${m}.orig`), "utf8"))].sort());
  }
  // Nothing else in the tree changed.
  const walk = (d) => readdirSync(d, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(d, e.name)) : [join(d, e.name)]));
  for (const f of walk(a).map((f) => f.slice(a.length + 1)).filter((f) => !MODULES.some((m) => f === m || f === `${m}.orig`))) {
    assert.ok(readFileSync(join(a, f)).equals(readFileSync(join(REFERENCE_SRC, f))), f);
  }

  const swapped = bytes(a);
  const already = MODULES.map((m) => `${m}: already swapped (original in ${m}.orig)`);
  assert.deepEqual(swap(a), already);
  bytes(a).forEach((buf, i) => assert.ok(buf.equals(swapped[i]), "swapping twice = swapping once"));
  assert.deepEqual(swap(join(a, "..")), already, "the package root works too");

  assert.deepEqual(swap(a, { undo: true }), MODULES.map((m) => `${m}: restored the original`));
  bytes(a).forEach((buf, i) => assert.ok(buf.equals(original[i]), `${MODULES[i]} restored byte for byte`));
  assert.deepEqual(readdirSync(join(a, "touch")).sort(), before);
  assert.deepEqual(swap(a, { undo: true }), MODULES.map((m) => `${m}: not swapped, nothing to undo`));

  // The CLI, as `npx durable-touch swap` runs it.
  const cli = (...args) => spawnSync(process.execPath, [join(ROOT, "bin", "durable-touch.mjs"), "swap", ...args], { encoding: "utf8" });
  let r = cli(b);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /touch\/worker_pool\.ts: swapped to durable-touch\/compat/);
  r = cli(b, "--undo");
  assert.equal(r.status, 0, r.stderr);
  bytes(b).forEach((buf, i) => assert.ok(buf.equals(original[i])));
  r = cli(join(b, "touch"));
  assert.equal(r.status, 1);
  assert.match(r.stderr, /is not the server's src directory/);

  // A module that is not what the swap expects: refused, and nothing is written.
  appendFileSync(join(b, "touch/worker_pool.ts"), "\nexport const extra = 1;\n");
  const changed = bytes(b);
  assert.throws(() => swap(b), /touch\/worker_pool\.ts: unexpected exports extra/);
  bytes(b).forEach((buf, i) => assert.ok(buf.equals(changed[i]), "nothing changed"));
  assert.ok(!existsSync(join(b, "touch/touch_journal.ts.orig")));
  // The same for a patched function that is not the one the swap knows.
  writeFileSync(join(b, "touch/worker_pool.ts"), original[MODULES.indexOf("touch/worker_pool.ts")]);
  const profile = join(b, "profiles/profile.ts");
  writeFileSync(profile, readFileSync(profile, "utf8").replace("return structuredClone(profile);", "return { ...profile };"));
  const changed2 = bytes(b);
  assert.throws(() => swap(b), /profiles\/profile\.ts: the code this swap patches is not there as expected/);
  bytes(b).forEach((buf, i) => assert.ok(buf.equals(changed2[i]), "nothing changed"));
});

/** What a user of the HTTP API sees of one run (timings are checked separately). */
function visible(run) {
  return {
    steps: run.steps.map((s) => {
      const b = s.body && typeof s.body === "object" && !Array.isArray(s.body) ? s.body : {};
      return {
        name: s.name,
        status: s.status,
        touched: b.touched,
        stale: b.stale,
        kind: b.effectiveWaitKind,
        error: b.error?.code,
        metaFields: "mode" in b ? Object.keys(b).sort().join(",") : undefined,
        mode: b.mode,
        cursorShape: typeof b.cursor === "string" ? /^[0-9a-f]{16}:\d+$/.test(b.cursor) : undefined,
      };
    }),
    activated: run.activated.activated.map((t) => t.templateId),
    denied: run.activated.denied,
    timeouts: { ...run.timeouts, minElapsedMs: undefined, maxElapsedMs: undefined, wallMs: undefined },
    stale: { ...run.restart.stale, cursor: undefined, epoch: undefined },
    records: run.records,
  };
}

function checkRun(run, label) {
  const step = (name) => {
    const s = run.steps.find((x) => x.name === name);
    assert.ok(s, `${label}: step ${name}`);
    return s;
  };
  assert.ok([200, 201].includes(step("create stream").status), label);
  assert.equal(step("install profile").status, 200, label);
  assert.equal(step("touch/meta").body.mode, "memory", label);
  for (const [name, kind, lo] of [
    ["table-key wait", "tableKey", 300],
    ["watch-key wait", "fineKey", 300],
    ["keyIds-only wait", "fineKey", 300],
    ["table-key wait after restart", "tableKey", 300],
  ]) {
    const s = step(name);
    assert.equal(s.body.touched, true, `${label}: ${name} woken`);
    assert.equal(s.body.effectiveWaitKind, kind, `${label}: ${name}`);
    assert.ok(s.elapsedMs >= lo && s.elapsedMs < 3500, `${label}: ${name} woken by the write after ${s.elapsedMs} ms`);
    assert.ok(BigInt(s.body.bucketMaxSourceOffsetSeq) >= 2n, `${label}: ${name} woken by a processed write`);
  }
  for (const name of ["other table-key wait (control)", "other watch-key wait (control)"]) {
    const s = step(name);
    assert.equal(s.body.touched, false, `${label}: ${name} not woken`);
    assert.ok(s.elapsedMs >= 1500, `${label}: ${name} timed out after ${s.elapsedMs} ms`);
  }
  const t = run.timeouts;
  assert.deepEqual([t.count, t.touched, t.stale, t.statuses], [200, 0, 0, [200]], label);
  assert.ok(t.minElapsedMs >= t.timeoutMs, `${label}: a wait answered after ${t.minElapsedMs} ms, before its ${t.timeoutMs} ms deadline`);
  assert.ok(t.maxElapsedMs <= t.timeoutMs + 2500, `${label}: a wait answered after ${t.maxElapsedMs} ms`);
  assert.equal(run.restart.stale.stale, true, label);
  assert.equal(run.restart.stale.error.code, "stale", label);
  assert.notEqual(run.restart.oldEpoch, run.restart.newEpoch, label);
  assert.equal(run.restart.stale.epoch, run.restart.newEpoch, label);
  assert.equal(run.records, 6, label);
}

test("the swapped reference server behaves like the unswapped one over HTTP (create, profile, append, meta, waits, 200 timeouts, stale after restart)", async () => {
  const { plain, swapped } = serverCopies("plain", "swapped");
  swap(swapped);
  const runPlain = await runReference("swap-app", {}, { env: { APP_SRC: plain }, retries: 2 });
  // With the reference's new epoch at every start (a restart keeps cursors by default; that is
  // compat-swap-restart.spec.mjs's), so the two runs answer alike.
  const runSwapped = await runReference("swap-app", {}, { env: { APP_SRC: swapped, DURABLE_TOUCH_KEEP_CURSORS: "0" }, retries: 2 });
  const uses = (v) => ({ nativeJournal: v, nativePool: v, parseTouchCursor: v, nativeManager: v, nativeRoutes: v, nativeSqlite: v });
  assert.deepEqual(runPlain.uses, uses(false));
  assert.deepEqual(runSwapped.uses, uses(true));
  checkRun(runPlain, "unswapped");
  checkRun(runSwapped, "swapped");
  assert.deepEqual(visible(runSwapped), visible(runPlain));
  writeFileSync(join(swapped, "..", "runs.json"), JSON.stringify({ runPlain, runSwapped }));
}, { timeout: 90_000, skip: !referenceAvailable() });

test("the swapped server delivers the invalidations the unswapped one loses (B1–B7 over HTTP)", async () => {
  const { plain, swapped } = serverCopies("plain", "swapped");
  swap(swapped);
  const lost = await runReference("swap-losses", {}, { env: { APP_SRC: plain }, retries: 2 });
  const kept = await runReference("swap-losses", {}, { env: { APP_SRC: swapped }, retries: 2 });
  // The reference: a budget of 3 keys per batch wakes a few of 40 waiters; the other
  // scenarios wake none of theirs.
  assert.ok(lost.B1.filter(Boolean).length <= 5, `unswapped B1: ${lost.B1.filter(Boolean).length} of 40 woken`);
  for (const b of ["B2", "B3", "B4", "B5", "B6", "B7"]) assert.ok(lost[b].every((t) => !t), `unswapped ${b}: ${JSON.stringify(lost[b])}`);
  for (const b of ["B1", "B2", "B3", "B4", "B5", "B6", "B7"]) assert.ok(kept[b].every(Boolean), `swapped ${b}: ${JSON.stringify(kept[b])}`);
}, { timeout: 90_000, skip: !referenceAvailable() });

test("a stream deleted and created again, or with touch turned off and on, is served from its own start (as unswapped)", async () => {
  const { plain, swapped } = serverCopies("plain", "swapped");
  swap(swapped);
  const expected = {
    recreate: { statuses: [200, 200, 200], coarse: [true, true, true], fine: true },
    recreateAfterPoll: { statuses: [200, 200, 200], coarse: [true, true, true], fine: true },
    toggle: { statuses: [200, 200, 200], coarse: [true, true] },
    offAppendOn: { statuses: [200, 200, 200], coarse: [true] },
  };
  assert.deepEqual(await runReference("swap-recreate", {}, { env: { APP_SRC: plain }, retries: 2 }), expected, "unswapped");
  assert.deepEqual(await runReference("swap-recreate", {}, { env: { APP_SRC: swapped }, retries: 2 }), expected, "swapped");
}, { timeout: 90_000, skip: !referenceAvailable() });
