// Projects holding a copy of the installed @prisma/streams-local, for the local swap tests.
import { cpSync, linkSync, mkdirSync, readdirSync, realpathSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../harness.mjs";
import { ROOT } from "../reference.mjs";

export const LOCAL_PACKAGE_DIR = join(ROOT, "node_modules", "@prisma", "streams-local");

/** Symlinks every package of our node_modules (but @prisma) into `modules`. */
function linkOurModules(modules) {
  const ours = join(ROOT, "node_modules");
  for (const entry of readdirSync(ours)) {
    if (entry === "@prisma" || entry === ".bin" || entry.startsWith(".")) continue;
    symlinkSync(realpathSync(join(ours, entry)), join(modules, entry));
  }
}

/**
 * npm's layout: `<project>/node_modules/@prisma/streams-local` (a copy of the installed
 * package), its dependencies and `durable-touch` (→ this checkout) beside it in the same
 * node_modules. Returns `{ project, pkg }`.
 */
export function npmProject(dir = tempDir("dt-local-")) {
  const modules = join(dir, "node_modules");
  mkdirSync(join(modules, "@prisma"), { recursive: true });
  linkOurModules(modules);
  symlinkSync(ROOT, join(modules, "durable-touch"));
  const pkg = join(modules, "@prisma", "streams-local");
  cpSync(LOCAL_PACKAGE_DIR, pkg, { recursive: true });
  return { project: dir, pkg };
}

/**
 * A pnpm-like layout: the package's files hard-linked from a "store" into
 * `node_modules/.pnpm/@prisma+streams-local@0.1.11/node_modules/@prisma/streams-local`, its
 * dependencies symlinked beside it there, and `node_modules/@prisma/streams-local` and
 * `node_modules/durable-touch` symlinks in the project. Returns `{ project, pkg, real, store }`
 * (`pkg` the project's symlink, `real` the package's directory, `store` the store's copy).
 */
export function pnpmProject(dir = tempDir("dt-local-pnpm-")) {
  const store = join(dir, "store", "streams-local");
  cpSync(LOCAL_PACKAGE_DIR, store, { recursive: true });
  const virtual = join(dir, "node_modules", ".pnpm", "@prisma+streams-local@0.1.11", "node_modules");
  const real = join(virtual, "@prisma", "streams-local");
  const hardLink = (from, to) => {
    mkdirSync(to, { recursive: true });
    for (const e of readdirSync(from, { withFileTypes: true })) {
      if (e.isDirectory()) hardLink(join(from, e.name), join(to, e.name));
      else linkSync(join(from, e.name), join(to, e.name));
    }
  };
  hardLink(store, real);
  linkOurModules(virtual); // its dependencies (and more) beside it, as pnpm links them
  const modules = join(dir, "node_modules");
  mkdirSync(join(modules, "@prisma"), { recursive: true });
  symlinkSync(real, join(modules, "@prisma", "streams-local"));
  symlinkSync(ROOT, join(modules, "durable-touch"));
  return { project: dir, pkg: join(modules, "@prisma", "streams-local"), real, store };
}
