// Running the reference (Prisma Streams server 0.1.11, TypeScript) under Bun from a test.
//
// A reference script is a .ts file in __test__/reference/ that reads its JSON input from the
// file named by $REF_INPUT, imports the reference from $REFERENCE_SRC, and prints one JSON
// document on stdout. Works the same whether the calling test runs under Node or Bun.
import { spawn } from "node:child_process";
import { writeFileSync, existsSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { tempDir } from "./harness.mjs";

const here = dirname(fileURLToPath(import.meta.url));
export const ROOT = join(here, "..");
export const BUN = join(ROOT, "node_modules", ".bin", "bun");
export const REFERENCE_SRC = join(ROOT, "node_modules", "@prisma", "streams-server", "src");

export function referenceAvailable() {
  return existsSync(BUN) && existsSync(join(REFERENCE_SRC, "touch", "live_keys.ts"));
}

/**
 * Runs __test__/reference/<name>.ts with `input`; resolves its parsed JSON output. With
 * `retries`, a child that crashed (killed by a signal: Bun 1.3.6 occasionally segfaults while
 * tearing down worker threads) is run again, up to that many times.
 */
export async function runReference(name, input = {}, { env = {}, retries = 0 } = {}) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await runReferenceOnce(name, input, { env });
    } catch (e) {
      if (attempt >= retries || !e.crashed) throw e;
      // The crashes come in bursts (three in a row in one CI-like run): let the machine settle.
      await new Promise((r) => setTimeout(r, 250 * (attempt + 1)));
    }
  }
}

function runReferenceOnce(name, input, { env }) {
  const dir = tempDir("dt-ref-");
  const inputPath = join(dir, "input.json");
  writeFileSync(inputPath, JSON.stringify(input, (_, v) => (typeof v === "bigint" ? { $bigint: v.toString() } : v)));
  const script = join(here, "reference", `${name}.ts`);
  return new Promise((resolve, reject) => {
    const child = spawn(BUN, ["--no-install", script], {
      env: { ...process.env, REF_INPUT: inputPath, REFERENCE_SRC, REF_TMP: dir, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const out = [];
    const err = [];
    child.stdout.on("data", (d) => out.push(d));
    child.stderr.on("data", (d) => err.push(d));
    child.on("error", reject);
    child.on("close", (code, signal) => {
      const stdout = Buffer.concat(out).toString();
      if (code !== 0) {
        const e = new Error(`reference script ${name} exited ${code ?? signal}: ${Buffer.concat(err).toString()}`);
        e.crashed = code === null || /Bun has crashed/.test(e.message);
        return reject(e);
      }
      try {
        resolve(JSON.parse(stdout, (_, v) => (v && typeof v === "object" && typeof v.$bigint === "string" ? BigInt(v.$bigint) : v)));
      } catch (e) {
        reject(new Error(`reference script ${name} printed no JSON: ${stdout.slice(0, 500)} ${Buffer.concat(err).toString()}`));
      }
    });
  });
}
