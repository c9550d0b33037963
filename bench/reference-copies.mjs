// Copies of the reference server (@prisma/streams-server) for the benches that run it
// unswapped and swapped side by side (bench/swap.mjs, bench/restart.mjs).
import { cpSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { swap } from "../apps/swap/swap.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
/** The installed reference package. */
export const REFERENCE = join(root, "node_modules", "@prisma", "streams-server");

/**
 * A temp folder (named from `prefix`) with `unswapped/` and `swapped/` copies of the
 * reference's src/ and package.json, the second swapped, and a node_modules of symlinks to
 * ours plus `durable-touch` → this checkout, so both resolve their imports.
 * Resolves `{ dir, unswapped, swapped }`, the last two the copies' folders.
 */
export function referenceCopies(prefix) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  mkdirSync(join(dir, "node_modules"));
  for (const e of readdirSync(join(root, "node_modules"))) {
    if (e === "@prisma" || e === ".bin") continue;
    symlinkSync(realpathSync(join(root, "node_modules", e)), join(dir, "node_modules", e));
  }
  symlinkSync(root, join(dir, "node_modules", "durable-touch"));
  for (const side of ["unswapped", "swapped"]) {
    mkdirSync(join(dir, side));
    cpSync(join(REFERENCE, "src"), join(dir, side, "src"), { recursive: true });
    cpSync(join(REFERENCE, "package.json"), join(dir, side, "package.json"));
  }
  swap(join(dir, "swapped"));
  return { dir, unswapped: join(dir, "unswapped"), swapped: join(dir, "swapped") };
}
