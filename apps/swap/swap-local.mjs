// `durable-touch swap <path>` on an install of @prisma/streams-local (the local runtime that
// `prisma dev` embeds: a `bun build` of the Prisma Streams server, for Node and Bun). The
// package's code is one ESM chunk, `dist/local/index-<hash>.js`, which both of its entries
// (`dist/local/index.js`, `dist/local/daemon.js`) import; bun marks each source module in it
// with a `// src/<path>.ts` comment line. The swap rewrites that chunk:
//
// - the regions of `sqlite/adapter.ts`, `touch/manager.ts` and
//   `profiles/stateProtocol/routes.ts` lose their code (their imports stay: module-local
//   bindings of node built-ins and better-result), and the names the rest of the chunk uses
//   from them are bound to durable-touch/compat: the adapter's as imports of
//   `durable-touch/compat/sqlite-adapter` (an import binding is initialised before any of the
//   chunk runs, as the hoisted function declarations it replaces were), the manager and the
//   routes built by the compat factories, in place of their declarations, from the chunk's own
//   `LiveMetricsV2` and `getStateProtocolTouchConfig`;
// - `profiles/profile.ts`'s `cloneStreamProfileSpec` calls `clonePlainData` instead of
//   `structuredClone`, as the server swap does (apps/swap/swap.mjs).
//
// Bun renames identifiers that collide (`Result6`, `existsSync3`), so no name is assumed: the
// names are read from the regions' top-level declarations (apps/swap/js-regions.mjs), each must be
// one of the names this swap replaces, possibly with bun's numeric suffix, and every name a
// replaced region declares that the rest of the chunk references must be one of them.
//
// The imports are static `import` declarations at the top of the chunk, not a top-level
// `await import()`: the chunk has no top-level await, and adding one would make the package an
// async module that `require()` (Node 22's require(esm), Bun) refuses; a static import also
// fails at link time, before any of the chunk runs, when durable-touch does not resolve.
//
// Only what was verified is swapped: the package version and the sha256 of the original chunk
// (SUPPORTED). Anything else is refused, naming what was found, and nothing is written. The
// chunk is written as a new file renamed into place (a new inode: a pnpm store's hard-linked
// original is not written through), the original kept beside it as `<chunk>.orig` (a hard link
// to it, or a copy where links fail); `--undo` renames it back (byte for byte; the original
// inode when it was linked). `dist/touch/processor_worker.js` is left
// as it is: only the reference's worker pool starts it, and the swapped manager has none.
import { createHash } from "node:crypto";
import { createRequire } from "node:module";
import { chmodSync, copyFileSync, existsSync, linkSync, readFileSync, realpathSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { tokenize, regionsOf, topLevelStatements, referencedNames } from "./js-regions.mjs";

export const LOCAL_PACKAGE = "@prisma/streams-local";

/** What was verified: the package version and the sha256 of its original chunk. */
export const SUPPORTED = Object.freeze([
  Object.freeze({ version: "0.1.11", chunk: "dist/local/index-cm8xztbg.js", sha256: "169f6ce53c801499e16c4e230e708fc302e0bcdc6e2bd4bc225d82be8d631dda" }),
]);

const MARKER = "// durable-touch swap:";
const FROM = "durable-touch/compat";
const FROM_SQLITE = "durable-touch/compat/sqlite-adapter";
/** The entries that import the chunk (package.json's exports). */
const ENTRIES = ["dist/local/index.js", "dist/local/daemon.js"];

/**
 * The modules whose regions are replaced: the names the rest of the chunk may use from them
 * (by their names in the sources; in the chunk, possibly with bun's numeric suffix) and how
 * each is bound. `needs` are the chunk's own declarations a binding takes, by module.
 */
const REPLACED = [
  {
    path: "src/sqlite/adapter.ts",
    names: { openSqliteDatabase: "import", getSqliteAdapterRuntimeCounts: "import", setSqliteRuntimeOverride: "import" },
    // The manager shim takes the adapter's opener, so it is bound even if nothing else uses it.
    required: ["openSqliteDatabase"],
  },
  {
    path: "src/touch/manager.ts",
    names: { TouchProcessorManager: "factory" },
    required: ["TouchProcessorManager"],
    factory: "createTouchProcessorManager",
    needs: { openSqliteDatabase: "src/sqlite/adapter.ts", LiveMetricsV2: "src/touch/live_metrics.ts" },
  },
  {
    path: "src/profiles/stateProtocol/routes.ts",
    names: { handleStateProtocolTouchRoute: "factory" },
    required: ["handleStateProtocolTouchRoute"],
    factory: "createStateProtocolTouchRoute",
    needs: { getStateProtocolTouchConfig: "src/profiles/stateProtocol/validation.ts" },
  },
];
/** The function patched in place: its body must be exactly `return structuredClone(<param>);`. */
const PATCHED = { path: "src/profiles/profile.ts", name: "cloneStreamProfileSpec", callee: "structuredClone", replacement: "clonePlainData" };

const sha256 = (buf) => createHash("sha256").update(buf).digest("hex");
/** `name` as bun may have renamed it: the name, or the name and a number. */
const isRenamed = (declared, name) => declared === name || (declared.startsWith(name) && /^\d+$/.test(declared.slice(name.length)));
const supportedText = () => SUPPORTED.map((s) => `${LOCAL_PACKAGE} ${s.version} (chunk ${s.chunk}, sha256 ${s.sha256})`).join(" or ");

/**
 * The root of the @prisma/streams-local install `target` names (its package root, or a project
 * whose node_modules holds it), through symlinks (pnpm), or null.
 */
export function findLocalPackage(target) {
  const dir = resolve(target);
  for (const candidate of [dir, join(dir, "node_modules", "@prisma", "streams-local")]) {
    const pkg = join(candidate, "package.json");
    if (!existsSync(pkg)) continue;
    let name;
    try {
      name = JSON.parse(readFileSync(pkg, "utf8")).name;
    } catch {
      continue;
    }
    if (name === LOCAL_PACKAGE) return realpathSync(candidate);
  }
  return null;
}

/** @param {string} message @returns {never} */
function refuse(message) {
  throw new Error(`${message}; nothing was changed`);
}

/** The install's chunk and what this swap knows of it; refuses what was not verified. */
function inspect(root) {
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  const version = String(pkg.version);
  const found = `found ${LOCAL_PACKAGE} ${version} at ${root}`;
  const known = SUPPORTED.find((s) => s.version === version);
  if (!known) refuse(`${found}; this swap supports ${supportedText()}`);
  const file = join(root, known.chunk);
  if (!existsSync(file)) refuse(`${found} without its chunk ${known.chunk}; this swap supports ${supportedText()}`);
  for (const entry of ENTRIES) {
    const p = join(root, entry);
    const text = existsSync(p) ? readFileSync(p, "utf8") : "";
    if (!text.includes(`from "./${basename(known.chunk)}"`)) {
      refuse(`${found} whose ${entry} does not import ${known.chunk}; this swap supports ${supportedText()}`);
    }
  }
  const text = readFileSync(file, "utf8");
  const swapped = text.startsWith(MARKER);
  const orig = `${file}.orig`;
  const hasOrig = existsSync(orig) && statSync(orig).isFile();
  if (swapped && !hasOrig) throw new Error(`${known.chunk} is swapped but ${known.chunk}.orig is missing; reinstall ${LOCAL_PACKAGE}`);
  const original = swapped ? readFileSync(orig) : readFileSync(file);
  const hash = sha256(original);
  if (hash !== known.sha256) {
    const which = swapped ? `${known.chunk}.orig` : known.chunk;
    refuse(`${found} whose ${which} has sha256 ${hash}; this swap supports ${supportedText()}`);
  }
  return { known, file, orig, text, swapped, hasOrig, original: original.toString("utf8") };
}

/**
 * The swapped chunk of `original` (the chunk as published): throws, naming the module and the
 * name, when anything is not as this swap expects.
 */
export function swapChunk(original, { chunkName = "the chunk" } = {}) {
  const { tokens, markers } = tokenize(original);
  const regions = regionsOf(original, markers);
  const statements = topLevelStatements(tokens);
  const regionOf = (pos) => regions.find((r) => pos >= r.start && pos < r.end)?.path ?? null;
  for (const s of statements) s.region = regionOf(s.start);
  const declIn = (path) => statements.filter((s) => s.region === path);
  const replaced = new Set(REPLACED.map((m) => m.path));

  // Every name referenced outside the replaced regions.
  const outside = new Set();
  {
    let from = 0;
    const inReplaced = regions.filter((r) => replaced.has(r.path));
    let k = 0;
    for (const r of inReplaced) {
      while (k < tokens.length && tokens[k].start < r.start) k++;
      referencedNames(tokens, from, k, outside);
      while (k < tokens.length && tokens[k].start < r.end) k++;
      from = k;
    }
    referencedNames(tokens, from, tokens.length, outside);
  }
  const taken = new Set();
  for (const t of tokens) if (t.type === "id") taken.add(t.value);
  const fresh = (base) => {
    let name = base;
    for (let n = 2; taken.has(name); n++) name = `${base}${n}`;
    taken.add(name);
    return name;
  };

  /** The chunk's name for `name` declared at top level in `path`'s regions (exactly one). */
  const declared = (path, name) => {
    const hits = declIn(path).flatMap((s) => s.names.filter((d) => isRenamed(d, name)).map((d) => ({ d, s })));
    if (hits.length !== 1) throw new Error(`${path}: ${hits.length === 0 ? "no declaration" : "more than one declaration"} of ${name} in ${chunkName}`);
    return hits[0];
  };

  const bindings = new Map(); // chunk name -> { module, name, how, stmt }
  for (const mod of REPLACED) {
    const stmts = declIn(mod.path);
    if (stmts.length === 0) throw new Error(`${mod.path}: no such module in ${chunkName}`);
    for (const s of stmts) {
      if (s.kind === "other" || s.kind === "export" || s.pattern) {
        throw new Error(`${mod.path}: top-level code this swap does not know (${JSON.stringify(original.slice(s.start, s.start + 60))}) in ${chunkName}`);
      }
      if (s.kind === "import") continue;
      for (const d of s.names) {
        const name = Object.keys(mod.names).find((n) => isRenamed(d, n));
        if (name === undefined) {
          if (outside.has(d)) throw new Error(`${mod.path}: the rest of ${chunkName} uses ${d}, which this swap does not replace`);
          continue;
        }
        if (outside.has(d) || mod.required.includes(name)) bindings.set(d, { module: mod, name, how: mod.names[name], stmt: s });
      }
    }
    for (const name of mod.required) declared(mod.path, name);
  }

  const ns = fresh("__durableTouchCompat");
  const header = [
    `${MARKER} @prisma/streams-local on the native core (${FROM}): the code of sqlite/adapter.ts, touch/manager.ts and`,
    `// profiles/stateProtocol/routes.ts is replaced, and profiles/profile.ts's cloneStreamProfileSpec uses clonePlainData.`,
    `// The original is saved next to this file as ${chunkName}.orig; \`npx durable-touch swap <path> --undo\` restores it.`,
    `import * as ${ns} from "${FROM}";`,
  ];
  const imports = [...bindings].filter(([, b]) => b.how === "import").map(([d, b]) => (d === b.name ? d : `${b.name} as ${d}`));
  if (imports.length > 0) header.push(`import { ${imports.join(", ")} } from "${FROM_SQLITE}";`);

  // Edits, as [start, end, text] on the original.
  const edits = [];
  for (const mod of REPLACED) {
    for (const s of declIn(mod.path)) {
      if (s.kind === "import") continue;
      const factories = [...bindings].filter(([, b]) => b.stmt === s && b.how === "factory");
      let text = "";
      for (const [d] of factories) {
        const args = Object.entries(mod.needs ?? {}).map(([need, path]) => {
          const { d: local, s: decl } = declared(path, need);
          // A class or a variable is usable only once its declaration ran: it must come first.
          if (decl.kind !== "function" && decl.start > s.start) throw new Error(`${path}: ${need} is declared after ${mod.path} in ${chunkName}`);
          return `${need}: ${local}`;
        });
        text += `const ${d} = ${ns}.${mod.factory}({ ${args.join(", ")} });\n`;
      }
      // Through the blank lines after it; one is kept before the next module's marker.
      const region = regions.find((r) => s.start >= r.start && s.start < r.end);
      const end = afterWhitespace(original, s.end);
      edits.push([s.start, end, end >= region.end && end < original.length ? `${text}\n` : text]);
    }
  }
  // Each replaced region says so after its marker line.
  for (const r of regions.filter((r) => replaced.has(r.path))) {
    const eol = original.indexOf("\n", r.start) + 1;
    edits.push([eol, eol, `${MARKER} this module's code is ${FROM}'s\n`]);
  }
  // The patched function.
  {
    const { d, s } = declared(PATCHED.path, PATCHED.name);
    if (s.kind !== "function") throw new Error(`${PATCHED.path}: ${d} is not a function in ${chunkName}`);
    const body = tokens.slice(s.first, s.stop).map((t) => (t.type === "id" || t.type === "punc" ? t.value : `<${t.type}>`));
    const param = body[3];
    const expected = ["function", d, "(", param, ")", "{", "return", PATCHED.callee, "(", param, ")", ";", "}"];
    if (body.length !== expected.length || body.some((v, k) => v !== expected[k])) {
      throw new Error(`${PATCHED.path}: ${d} is not \`return ${PATCHED.callee}(profile)\` as this swap expects in ${chunkName}`);
    }
    const callee = tokens[s.first + 7];
    edits.push([callee.start, callee.end, `${ns}.${PATCHED.replacement}`]);
  }
  edits.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let out = header.join("\n") + "\n";
  let at = 0;
  for (const [start, end, text] of edits) {
    if (start < at) throw new Error(`overlapping edits in ${chunkName}`);
    out += original.slice(at, start) + text;
    at = end;
  }
  out += original.slice(at);
  tokenize(out); // the result still reads as balanced code
  return { text: out, bindings: Object.fromEntries([...bindings].map(([d, b]) => [d, `${b.module.path}:${b.name}`])), namespace: ns };
}

/** The first position at or after `pos` that is not whitespace. */
function afterWhitespace(text, pos) {
  while (pos < text.length && /\s/.test(text[pos])) pos++;
  return pos;
}

/**
 * Swaps (or with `undo`, restores) the chunk of the @prisma/streams-local install at `root`
 * (findLocalPackage). Returns log lines; throws before writing anything when the install is
 * not what this swap verified or durable-touch does not resolve from it.
 */
export function swapLocal(root, { undo = false } = {}) {
  if (undo) return restore(root);
  const p = inspect(root);
  const rel = p.known.chunk;
  const next = swapChunk(p.original, { chunkName: basename(rel) }).text;
  const problem = unresolvable(p.file);
  if (problem) refuse(problem);
  if (p.swapped) {
    if (p.text === next) return [`${rel}: already swapped (original in ${rel}.orig)`];
    writeAtomically(p.file, next);
    return [`${rel}: swap updated (original in ${rel}.orig)`];
  }
  const log = [];
  if (p.hasOrig) {
    log.push(`${rel}: replacing a stale ${rel}.orig with the current original`);
    rmSync(p.orig);
  }
  keepOriginal(p.file, p.orig);
  writeAtomically(p.file, next);
  log.push(`${rel}: swapped to ${FROM} (${LOCAL_PACKAGE} ${p.known.version}; original saved as ${rel}.orig)`);
  return log;
}

function restore(root) {
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  const known = SUPPORTED.find((s) => s.version === String(pkg.version));
  const rel = known?.chunk;
  const file = rel ? join(root, rel) : null;
  if (!file || !existsSync(file) || !readFileSync(file, "utf8").startsWith(MARKER)) {
    return [`${rel ?? `${LOCAL_PACKAGE} ${pkg.version}`}: not swapped, nothing to undo`];
  }
  const orig = `${file}.orig`;
  if (!existsSync(orig)) throw new Error(`${rel} is swapped but ${rel}.orig is missing; reinstall ${LOCAL_PACKAGE}`);
  renameSync(orig, file);
  return [`${rel}: restored the original`];
}

/**
 * Keeps the original chunk as `orig`: the same file (a hard link, so `--undo` puts back the
 * very inode, still shared with a pnpm store), or a copy where hard links are not supported.
 */
function keepOriginal(file, orig) {
  try {
    linkSync(file, orig);
  } catch {
    const tmp = `${orig}.durable-touch-tmp`;
    copyFileSync(file, tmp); // bytes and mode, so --undo is exact
    renameSync(tmp, orig);
  }
}

function writeAtomically(file, text) {
  const tmp = `${file}.durable-touch-tmp`;
  try {
    writeFileSync(tmp, text);
    chmodSync(tmp, statSync(file).mode & 0o777);
    renameSync(tmp, file);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
}

/** Why the swapped chunk's imports would not resolve from `file`, or null. */
function unresolvable(file) {
  const where = `from ${dirname(file)}`;
  let compat;
  try {
    const req = createRequire(file);
    compat = req.resolve(FROM);
    req.resolve(FROM_SQLITE);
  } catch {
    return `${FROM} does not resolve ${where}: install durable-touch where it resolves for ${LOCAL_PACKAGE} (in the node_modules that holds it, or above it: npm install durable-touch)`;
  }
  try {
    createRequire(compat).resolve("better-result");
  } catch {
    return `better-result does not resolve from durable-touch (${dirname(dirname(compat))}): install it next to durable-touch`;
  }
  return null;
}
