// The installable package as a user gets it: `npm pack` of the package and of its linux-x64-gnu
// binary package (the main tarball holds no .node file; the binary package carries this
// checkout's release build), for the tests that install it (package-install.spec.mjs, the
// global layout in compat-swap-local.spec.mjs).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../reference.mjs";

const BIN = "durable-touch.linux-x64-gnu.node";

/** Runs `cmd` in `cwd` (npm without its fund and audit notices); throws with its output unless it exits 0. */
export function run(cmd, args, cwd) {
  const r = spawnSync(cmd, args, { cwd, encoding: "utf8", env: { ...process.env, npm_config_fund: "false", npm_config_audit: "false" } });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed (${r.status}): ${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

/**
 * Packs durable-touch and its binary package into `dest`; returns `{ main, binary }`, the two
 * tarballs' paths.
 */
export function packDurableTouch(dest) {
  assert.ok(existsSync(join(ROOT, BIN)), "the native module is built");
  copyFileSync(join(ROOT, BIN), join(ROOT, "npm", "linux-x64-gnu", BIN));
  run("npm", ["pack", "--ignore-scripts", "--silent", "--pack-destination", dest], ROOT);
  run("npm", ["pack", "--ignore-scripts", "--silent", "--pack-destination", dest], join(ROOT, "npm", "linux-x64-gnu"));
  const tarballs = readdirSync(dest).filter((f) => f.endsWith(".tgz") && f.startsWith("durable-touch-")).map((f) => join(dest, f));
  assert.equal(tarballs.length, 2, `two durable-touch tarballs in ${dest}: ${tarballs.join(", ")}`);
  return { main: tarballs.find((t) => !t.includes("linux-x64-gnu")), binary: tarballs.find((t) => t.includes("linux-x64-gnu")) };
}
