// One test API for both runtimes: `bun test` and `node --test` run the same files.
// Import from here, not from "node:test" or "bun:test".
import { createRequire } from "node:module";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const isBun = typeof globalThis.Bun !== "undefined";
export const runtime = isBun ? "bun" : "node";

const impl = isBun ? await import("bun:test") : await import("node:test");

/** test(name, fn, { timeout?: ms, skip?: boolean }) */
export function test(name, fn, opts = {}) {
  const timeout = opts.timeout ?? 60_000;
  if (opts.skip) return isBun ? impl.test.skip(name, fn) : impl.test(name, { skip: true }, fn);
  return isBun ? impl.test(name, fn, timeout) : impl.test(name, { timeout }, fn);
}

export const describe = impl.describe;

const require = createRequire(import.meta.url);
/** The package under test (the local build). */
export const dt = require("../index.js");

/** The temp directories of this process, removed at its exit (one listener for all). */
const tempDirs = new Set();
process.once("exit", () => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

/** A fresh temp directory, removed at process exit. */
export function tempDir(prefix = "dt-test-") {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.add(dir);
  return dir;
}

/** Asserts that `promise` rejects with an Error carrying `code`; returns the error. */
export async function rejectsWithCode(promise, code) {
  let err;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  if (!err) throw new Error(`expected a rejection with ${code}, got a resolution`);
  if (!(err instanceof Error)) throw new Error(`expected an Error, got ${typeof err}: ${err}`);
  if (err.code !== code) throw new Error(`expected code ${code}, got ${err.code}: ${err.message}`);
  if (!Object.values(dt.ErrorCode).includes(code)) throw new Error(`${code} is not one of ErrorCode's codes`);
  return err;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * A bound for `Promise.race`: resolves after `ms` without holding the process open, so a
 * race the other side won does not keep the test file running until the bound.
 */
export const bound = (ms) =>
  new Promise((r) => {
    const t = setTimeout(r, ms);
    t.unref?.();
  });
