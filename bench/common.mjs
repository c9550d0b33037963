// What the benchmark scripts share: reading their flags, the statistics they report (median,
// nearest-rank percentile), a measured run in a fresh child process, the machine a result line
// was measured on, and what /proc says of a process (CPU time, the descriptor limit).
// Workloads and helper binaries that the tests use too are in testkit/.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";

const argv = process.argv.slice(2);
const isBun = typeof globalThis.Bun !== "undefined";

/** The value of `--name value` or `--name=value` on the command line (a string), else `def`. */
export function arg(name, def) {
  const i = argv.indexOf(`--${name}`);
  if (i >= 0 && argv[i + 1] !== undefined) return argv[i + 1];
  const eq = argv.find((a) => a.startsWith(`--${name}=`));
  return eq ? eq.slice(name.length + 3) : def;
}

/** `arg` as a number (NaN when the value is none), else `def` as it is. */
export function numArg(name, def) {
  const v = arg(name, undefined);
  return v === undefined ? def : Number(v);
}

/** `arg` as a comma-separated list, empty items dropped. */
export const listArg = (name, def) => String(arg(name, def)).split(",").filter(Boolean);

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A progress line on stderr, stamped with the time. */
export const log = (m) => process.stderr.write(`[${new Date().toISOString()}] ${m}\n`);

/** The median of the finite numbers in `xs` (the mean of the middle two for an even count), or null. */
export function median(xs) {
  const s = Array.from(xs).filter((x) => typeof x === "number" && Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return null;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Nearest-rank percentile `p` (0-100) of an ascending array (as the reference's pctSorted), or null when empty. */
export const percentile = (sorted, p) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] : null);

/** The machine and runtime a result was measured on, as the result lines carry them. */
export function machine() {
  const c = cpus();
  return {
    date: new Date().toISOString(),
    runtime: isBun ? `bun ${Bun.version}` : `node ${process.version}`,
    platform: `${process.platform}-${process.arch}`,
    cpus: c.length,
    cpuModel: c[0]?.model ?? "unknown",
    loadavgAtEnd: loadavg().map((x) => Math.round(x * 100) / 100),
  };
}

/**
 * One measured run of `script` in a fresh process of this runtime, as `--child <child> --run
 * <run>` plus this process's other flags (stderr passed through), so that no run inherits
 * another's heap or JIT state. Returns the JSON of the last line the child printed.
 */
export function runChild(script, child, run, { runtimeFlags = [], timeout } = {}) {
  const rest = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--child" || argv[i] === "--run") {
      i++;
      continue;
    }
    rest.push(argv[i]);
  }
  const p = spawnSync(process.execPath, [...runtimeFlags, script, "--child", child, "--run", String(run), ...rest], {
    stdio: ["ignore", "pipe", "inherit"],
    maxBuffer: 1 << 28,
    timeout,
  });
  if (p.error) throw new Error(`child ${child} run ${run}: ${p.error.message}`);
  if (p.status !== 0) throw new Error(`child ${child} run ${run} failed with exit code ${p.status}${p.signal ? ` (${p.signal})` : ""}`);
  const lines = p.stdout.toString().trim().split("\n");
  return JSON.parse(lines[lines.length - 1]);
}

let clockTicks = 0;

/** CPU seconds a process has used so far (user + system, all its threads), from /proc. */
export function processCpuSeconds(pid) {
  clockTicks ||= Number(spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).stdout?.trim()) || 100;
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) / clockTicks;
}

/** `processCpuSeconds` in ms, or null once the process is gone. */
export function processCpuMs(pid) {
  try {
    return processCpuSeconds(pid) * 1000;
  } catch {
    return null;
  }
}

/** This process's limit on open descriptors (/proc/self/limits); Infinity when unlimited or unknown. */
export function descriptorLimit() {
  try {
    const m = readFileSync("/proc/self/limits", "utf8").match(/Max open files\s+(\d+|unlimited)/);
    return m && m[1] !== "unlimited" ? Number(m[1]) : Infinity;
  } catch {
    return Infinity;
  }
}
