// `durable-touch swap <server-src> [--undo]`: swaps the native core into a copy of the Prisma
// Streams server (@prisma/streams-server 0.1.11, TypeScript) by rewriting five modules into
// small shims over durable-touch/compat with the same export names:
//
// - `sqlite/adapter.ts`: the server's SQLite binding becomes ours, so that every SQLite
//   connection in the process (the server's, its segmenter worker's, the engine's) is one
//   SQLite library (two libraries on one file break SQLite's POSIX lock bookkeeping);
// - `touch/manager.ts`: `TouchProcessorManager` on the native engine (event-driven processing,
//   the engine's policy and no-lost-wake fixes, touches never in JS);
// - `profiles/stateProtocol/routes.ts`: the touch routes answered by the engine (its atomic
//   wait), with the reference's statuses and bodies;
// - `touch/touch_journal.ts`, `touch/worker_pool.ts`: the native journal and pool, for
//   anything else that imports them;
//
// and patches one function of a sixth, `profiles/profile.ts`: `cloneStreamProfileSpec` copies
// the plain profile data itself instead of calling `structuredClone` (the server clones a
// profile about five times per touch request; that clone was the largest single cost of the
// request's JS time). A patched module keeps all of its code and exports.
//
// `target` may also be an install of @prisma/streams-local (the same server, bundled by bun, that
// `prisma dev` embeds): its package root or a project whose node_modules holds it. Its one code
// chunk is swapped instead (apps/swap/swap-local.mjs).
//
// The originals are kept next to them as `*.ts.orig`; `--undo` puts them back byte for byte.
// Swapping twice is swapping once; undoing an unswapped tree changes nothing; a tree whose
// modules export anything unexpected is refused untouched.
//
// Bundles (`bun build` of the server's `src/compute/` entry with its worker entries, as
// `compute/worker_module_url.ts` expects them) work when durable-touch stays external: its
// compat modules load the package's own files with `createRequire(import.meta.url)`, which
// a bundler leaves to run time, relative to the bundle. The swap leaves
// `touch/processor_worker.ts` (and every other worker entry) in place, so such a build's
// entry points are all still there. The CLI prints BUNDLE_NOTE after a swap;
// __test__/compat-swap-bundle.spec.mjs builds, starts and serves such a bundle.
import { createRequire } from "node:module";
import { chmodSync, copyFileSync, existsSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { findLocalPackage, swapLocal } from "./swap-local.mjs";

const MARKER = "// durable-touch swap:";
const FROM = "durable-touch/compat";

/** What a bundled deployment of the swapped server needs (printed by `durable-touch swap`). */
export const BUNDLE_NOTE =
  "note: to bundle the swapped server (bun build), keep durable-touch external (--external durable-touch) " +
  "and install durable-touch, with better-result, where the bundle runs (in a node_modules beside it): " +
  "its native module and its compat files are loaded from there at run time";

/**
 * The modules, with the names the server imports from them (values, then types), where the
 * shim imports them from, and for shims that hand the compat factory some of the server's own
 * helpers, the body that does it.
 */
const MODULES = [
  {
    path: "sqlite/adapter.ts",
    values: ["openSqliteDatabase", "getSqliteAdapterRuntimeCounts", "setSqliteRuntimeOverride"],
    types: ["SqliteDatabase", "SqliteStatement"],
    from: `${FROM}/sqlite-adapter`,
  },
  {
    path: "touch/touch_journal.ts",
    values: ["TouchJournal", "formatTouchCursor", "parseTouchCursor"],
    types: ["TouchJournalIntervalStats", "TouchJournalMeta", "TouchWaitResult"],
  },
  {
    path: "touch/worker_pool.ts",
    values: ["TouchProcessorWorkerPool"],
    types: ["WorkerPoolProcessError"],
  },
  {
    path: "touch/manager.ts",
    values: ["TouchProcessorManager"],
    types: ["TouchProcessorManagerMemoryStats", "TouchTopStreamEntry"],
    body: [
      `import { openSqliteDatabase } from "../sqlite/adapter";`,
      `import { LiveMetricsV2 } from "./live_metrics";`,
      `import { createTouchProcessorManager } from "${FROM}";`,
      `export const TouchProcessorManager = createTouchProcessorManager({ openSqliteDatabase, LiveMetricsV2 });`,
      `export type TouchProcessorManager = InstanceType<typeof TouchProcessorManager>;`,
    ],
  },
  {
    path: "profiles/stateProtocol/routes.ts",
    values: ["handleStateProtocolTouchRoute"],
    types: [],
    body: [
      `import { getStateProtocolTouchConfig } from "./validation";`,
      `import { createStateProtocolTouchRoute } from "${FROM}";`,
      `export const handleStateProtocolTouchRoute = createStateProtocolTouchRoute({ getStateProtocolTouchConfig });`,
    ],
  },
  {
    path: "profiles/profile.ts",
    patch: {
      find: "export function cloneStreamProfileSpec(profile: StreamProfileSpec): StreamProfileSpec {\n  return structuredClone(profile);\n}",
      replace: "export function cloneStreamProfileSpec(profile: StreamProfileSpec): StreamProfileSpec {\n  return clonePlainData(profile);\n}",
      imports: [`import { clonePlainData } from "${FROM}";`],
    },
  },
];

/** Names a TypeScript module exports (declarations and `export { … }` lists). */
export function exportedNames(source) {
  const names = new Set();
  const decl = /^\s*export\s+(?:declare\s+)?(?:default\s+)?(?:abstract\s+)?(?:async\s+)?(?:class|function\*?|const|let|var|type|interface|enum)\s+([A-Za-z_$][\w$]*)/gm;
  for (const m of source.matchAll(decl)) names.add(m[1]);
  for (const m of source.matchAll(/^\s*export\s+(?:type\s+)?\{([^}]*)\}/gm)) {
    for (const part of m[1].split(",")) {
      const name = part.trim().replace(/^type\s+/, "").split(/\s+as\s+/).pop()?.trim();
      if (name) names.add(name);
    }
  }
  return names;
}

function swappedSource(mod, types, original) {
  const file = mod.path.split("/").pop();
  if (mod.patch) {
    const header = [
      `${MARKER} one function of this module is patched to use the native core's helpers (${FROM}).`,
      `// The original is saved next to it as ${file}.orig; \`npx durable-touch swap <src> --undo\` restores it.`,
      ...mod.patch.imports,
    ];
    return header.join("\n") + "\n" + original.replace(mod.patch.find, () => mod.patch.replace);
  }
  const from = mod.from ?? FROM;
  const lines = [
    `${MARKER} this module ${mod.body ? "is built by" : "re-exports"} the native core (${from}).`,
    `// The original is saved next to it as ${file}.orig; \`npx durable-touch swap <src> --undo\` restores it.`,
    ...(mod.body ?? [`export { ${mod.values.join(", ")} } from "${from}";`]),
  ];
  if (types.length > 0) lines.push(`export type { ${types.join(", ")} } from "${from}";`);
  return lines.join("\n") + "\n";
}

/** The server's `src` directory: `target` itself, or `target/src` for a package root. */
function sourceDir(target) {
  const dir = resolve(target);
  for (const candidate of [dir, join(dir, "src")]) {
    if (MODULES.every((m) => existsSync(join(candidate, m.path)))) return candidate;
  }
  throw new Error(
    `${dir} is not the server's src directory (${MODULES.map((m) => m.path).join(" and ")} not found) ` +
      `nor an install of @prisma/streams-local (its package root, or a project whose node_modules holds it)`,
  );
}

/** What `target` is: "local" (an @prisma/streams-local install, apps/swap/swap-local.mjs) or "server" (sources). */
export function swapKind(target) {
  return findLocalPackage(target) === null ? "server" : "local";
}

const isSwapped = (text) => text.startsWith(MARKER);

/**
 * Swaps (or with `undo`, restores) the modules under `target`. Returns log lines; throws
 * before writing anything when a module is not what this swap expects.
 */
export function swap(target, { undo = false } = {}) {
  const local = findLocalPackage(target);
  if (local !== null) return swapLocal(local, { undo });
  const src = sourceDir(target);
  const plan = MODULES.map((mod) => {
    const file = join(src, mod.path);
    const orig = `${file}.orig`;
    const text = readFileSync(file, "utf8");
    return { mod, file, orig, text, swapped: isSwapped(text), hasOrig: existsSync(orig) && statSync(orig).isFile() };
  });
  for (const p of plan) {
    if (p.swapped && !p.hasOrig) throw new Error(`${p.mod.path} is swapped but ${p.mod.path}.orig is missing; reinstall the server's sources`);
  }
  return undo ? restore(plan) : apply(plan, src);
}

function apply(plan, src) {
  const log = [];
  // Check every original before touching any file.
  const types = new Map();
  const originals = new Map();
  for (const p of plan) {
    const original = p.swapped ? readFileSync(p.orig, "utf8") : p.text;
    originals.set(p, original);
    if (p.mod.patch) {
      if (original.split(p.mod.patch.find).length !== 2) {
        throw new Error(`${p.mod.path}: the code this swap patches is not there as expected — this swap is for @prisma/streams-server 0.1.11; nothing was changed`);
      }
      types.set(p, []);
      continue;
    }
    const names = exportedNames(original);
    const known = new Set([...p.mod.values, ...p.mod.types]);
    const unknown = [...names].filter((n) => !known.has(n));
    const missing = p.mod.values.filter((n) => !names.has(n));
    if (unknown.length > 0 || missing.length > 0) {
      const what = [unknown.length ? `unexpected exports ${unknown.join(", ")}` : "", missing.length ? `missing ${missing.join(", ")}` : ""].filter(Boolean).join("; ");
      throw new Error(`${p.mod.path}: ${what} — this swap is for @prisma/streams-server 0.1.11; nothing was changed`);
    }
    types.set(p, p.mod.types.filter((n) => names.has(n)));
  }
  for (const p of plan) {
    const next = swappedSource(p.mod, types.get(p), originals.get(p));
    if (p.swapped) {
      if (p.text !== next) writeAtomically(p.file, next);
      log.push(`${p.mod.path}: already swapped (original in ${p.mod.path}.orig)`);
      continue;
    }
    if (p.hasOrig) log.push(`${p.mod.path}: replacing a stale ${p.mod.path}.orig with the current original`);
    copyFileSync(p.file, p.orig); // bytes and mode, so --undo is exact
    writeAtomically(p.file, next);
    const how = p.mod.patch ? "patched to use" : "swapped to";
    log.push(`${p.mod.path}: ${how} ${p.mod.from ?? FROM} (original saved as ${p.mod.path}.orig)`);
  }
  if (!resolvable(src)) {
    log.push(`note: ${FROM} does not resolve from ${src}; install durable-touch in the server's project (npm install durable-touch)`);
  }
  return log;
}

function restore(plan) {
  const log = [];
  for (const p of plan) {
    if (!p.swapped) {
      log.push(`${p.mod.path}: not swapped, nothing to undo${p.hasOrig ? ` (${p.mod.path}.orig left as it is)` : ""}`);
      continue;
    }
    renameSync(p.orig, p.file);
    log.push(`${p.mod.path}: restored the original`);
  }
  return log;
}

function writeAtomically(file, text) {
  const tmp = `${file}.durable-touch-tmp`;
  writeFileSync(tmp, text);
  chmodSync(tmp, statSync(file).mode & 0o777);
  renameSync(tmp, file);
}

function resolvable(src) {
  try {
    createRequire(join(src, "touch", "index.js")).resolve(FROM);
    return true;
  } catch {
    return false;
  }
}
