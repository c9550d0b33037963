// Benchmark runner.
//
//   npm run bench -- append                 # ours only; one JSON line per benchmark
//   npm run bench:compare -- append         # ours and the reference in the same run, plus ratios
//   npm run bench -- all                    # every benchmark
//   npm run bench:compare -- journal --rounds 3   # both sides alternately, 3 times
//   npm run bench:compare -- swap --rounds 3      # B6 against the server unswapped and swapped
//   npm run bench:compare -- local --rounds 3     # @prisma/streams-local unswapped and swapped
//   npm run bench:scale -- --rounds 3             # waits at the writer vs at an edge over NATS
//
// Each benchmark `bench/<name>.mjs` is a standalone script (Node by default, `--runtime bun`
// to run it under Bun) that prints one JSON line per benchmark on stdout. With --compare the
// matching reference scripts in bench/reference/ run under Bun against the reference installed
// as a devDependency (node_modules/@prisma/streams-server), or $ANCHOR_REPO if set, and
// `compare.mjs` prints the ratios. Results are appended to bench/out/results.jsonl.
// With `--rounds R` the two sides run alternately R times and each ratio is the median of the
// R per-round ratios: each round pairs measurements taken a minute apart at most, so a machine
// whose speed drifts (these VMs do, by 20-30% over minutes) skews the ratio less.
//
// Speed is measured here, never asserted in tests.

import { spawnSync } from "node:child_process";
import { mkdirSync, appendFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { BENCHES, compare, medianRatios } from "./compare.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..");
const argv = process.argv.slice(2);
const doCompare = argv.includes("--compare");
const runtimeIdx = argv.indexOf("--runtime");
const runtime = runtimeIdx >= 0 ? argv[runtimeIdx + 1] : "node";
const roundsIdx = argv.indexOf("--rounds");
const rounds = roundsIdx >= 0 ? Math.max(1, Number(argv[roundsIdx + 1]) || 1) : 1;
// The runner's own flags (those that take a value, then the others); the rest, and their
// values, go to the benchmark scripts.
const OWN_VALUED = ["--runtime", "--rounds"];
const OWN_FLAGS = [...OWN_VALUED, "--compare"];
const ownValue = (i) => OWN_VALUED.includes(argv[i - 1]);
// A bare word is a benchmark name, unless it follows a flag passed through to the scripts
// (`--runs 3`, `--only b5`) and names no benchmark: then it is that flag's value.
const isName = (a) => a === "all" || Object.hasOwn(BENCHES, a);
const passedFlag = (a) => a.startsWith("--") && !OWN_FLAGS.includes(a);
const flagValue = (i) => i > 0 && passedFlag(argv[i - 1]) && !argv[i - 1].includes("=") && !isName(argv[i]);
const names = argv.filter((a, i) => !a.startsWith("--") && !ownValue(i) && !flagValue(i));
const passThrough = argv.filter((a, i) => passedFlag(a) || flagValue(i));
const selected = names.length === 0 || names.includes("all") ? Object.keys(BENCHES) : names;

const bun = join(root, "node_modules", ".bin", "bun");
const anchor = process.env.ANCHOR_REPO ?? join(root, "node_modules", "@prisma", "streams-server");
mkdirSync(join(here, "out"), { recursive: true });

function runScript(cmd, args, env = {}) {
  process.stderr.write(`$ ${cmd} ${args.join(" ")}\n`);
  const r = spawnSync(cmd, args, { cwd: root, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "inherit"], maxBuffer: 1 << 28 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} exited with ${r.status}`);
  const lines = r.stdout
    .toString()
    .split("\n")
    .filter((l) => l.trim().startsWith("{"))
    .map((l) => JSON.parse(l));
  return lines;
}

for (const name of selected) {
  const spec = BENCHES[name];
  if (!spec) {
    console.error(`unknown benchmark ${name}; known: ${Object.keys(BENCHES).join(", ")}`);
    process.exit(2);
  }
  const script = join(here, `${name}.mjs`);
  if (!existsSync(script)) {
    console.error(`bench/${name}.mjs is not written yet`);
    process.exit(2);
  }
  if (spec.selfCompared) {
    // The script compares both sides itself (alternating rounds in one process).
    for (const line of runScript(process.execPath, [script, "--rounds", String(rounds), ...passThrough])) console.log(JSON.stringify(line));
    continue;
  }
  const perRound = [];
  for (let round = 0; round < (doCompare ? rounds : 1); round++) {
    const ours = runScript(runtime === "bun" ? bun : process.execPath, [script, ...passThrough]);
    for (const line of ours) {
      console.log(JSON.stringify(line));
      appendFileSync(join(here, "out", "results.jsonl"), JSON.stringify({ side: "durable-touch", runtime, ...line }) + "\n");
    }
    if (!doCompare) break;
    if (!existsSync(join(anchor, "src", "touch"))) throw new Error(`reference not found at ${anchor} (npm install, or set ANCHOR_REPO)`);
    const refs = [];
    for (const ref of spec.reference) {
      for (const line of runScript(bun, [join(here, "reference", ref.script), ...(ref.args ?? [])], { ANCHOR_REPO: anchor })) {
        refs.push(line);
        console.log(JSON.stringify(line));
        appendFileSync(join(here, "out", "results.jsonl"), JSON.stringify({ side: "reference", ...line }) + "\n");
      }
    }
    perRound.push(compare(name, ours, refs));
  }
  if (!doCompare) continue;
  const ratios = perRound.length === 1 ? perRound[0] : medianRatios(perRound);
  const line = { bench: `${name}-compare`, date: new Date().toISOString(), rounds: perRound.length, ratios };
  if (perRound.length > 1) line.perRound = perRound.map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, v.ratio])));
  console.log(JSON.stringify(line));
  appendFileSync(join(here, "out", "results.jsonl"), JSON.stringify({ side: "compare", name, rounds: perRound.length, ratios }) + "\n");
}
