// Copies of the reference server's src/ for the swap tests.
import { cpSync, mkdirSync, readdirSync, realpathSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../harness.mjs";
import { ROOT, REFERENCE_SRC } from "../reference.mjs";

/**
 * A temp folder holding copies of the reference's src/ (one per name) and a node_modules of
 * symlinks to ours plus `durable-touch` → this checkout, so the copies resolve their imports.
 * Resolves `{ [name]: <copy>/src }`.
 */
export function serverCopies(...names) {
  const dir = tempDir("dt-swap-");
  const modules = join(dir, "node_modules");
  mkdirSync(modules);
  const ours = join(ROOT, "node_modules");
  for (const entry of readdirSync(ours)) symlinkSync(realpathSync(join(ours, entry)), join(modules, entry));
  symlinkSync(ROOT, join(modules, "durable-touch"));
  const pkg = join(REFERENCE_SRC, "..", "package.json");
  return Object.fromEntries(
    names.map((name) => {
      mkdirSync(join(dir, name));
      cpSync(REFERENCE_SRC, join(dir, name, "src"), { recursive: true });
      cpSync(pkg, join(dir, name, "package.json"));
      return [name, join(dir, name, "src")];
    })
  );
}
