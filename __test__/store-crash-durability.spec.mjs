// Durability: a child appends concurrently and reports every acknowledged range; it is killed
// with SIGKILL at a random moment; reopening the file must find every acknowledged row intact,
// with the log contiguous from offset 0.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { test, dt, tempDir, sleep } from "./harness.mjs";

const { Store } = dt;
const child = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "append-child.mjs");

async function trial(path, killAfterMs) {
  const proc = spawn(process.execPath, [child, path, "8"], { stdio: ["ignore", "pipe", "inherit"] });
  let buf = "";
  const acks = [];
  let ready;
  const readyP = new Promise((r) => (ready = r));
  proc.stdout.on("data", (d) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line === "ready") ready();
      else if (line.startsWith("ack ")) {
        const [, c, first, last, n, pad] = line.split(" ");
        acks.push({ call: Number(c), first: BigInt(first), last: BigInt(last), n: Number(n), pad: Number(pad) });
      }
    }
  });
  const exited = new Promise((r) => proc.on("exit", (code, signal) => r(signal)));
  await readyP;
  await sleep(killAfterMs);
  proc.kill("SIGKILL");
  assert.equal(await exited, "SIGKILL");
  return acks;
}

test("every acknowledged append survives kill -9 (several trials)", async () => {
  const dir = tempDir();
  let total = 0;
  for (let t = 0; t < 4; t++) {
    const path = join(dir, `crash-${t}.sqlite`);
    const killAfter = 150 + Math.floor(Math.random() * 600);
    const acks = await trial(path, killAfter);
    assert.ok(acks.length > 0, "the child acknowledged some appends before it was killed");
    total += acks.length;

    const store = Store.open(path);
    const info = await store.getStream("crash");
    const rows = [];
    for (let from = 0n; ; ) {
      const batch = await store.read("crash", { from, limit: 50000 });
      if (batch.length === 0) break;
      rows.push(...batch);
      from = batch[batch.length - 1].offset + 1n;
    }
    // Contiguous from 0 to the tail, and the stream row agrees.
    rows.forEach((r, i) => assert.equal(r.offset, BigInt(i)));
    assert.equal(info.nextOffset, BigInt(rows.length));
    assert.equal(info.walRows, rows.length);
    // Every acknowledged row is there with the payload its call wrote.
    for (const a of acks) {
      assert.equal(a.last - a.first + 1n, BigInt(a.n));
      for (let k = 0; k < a.n; k++) {
        const row = rows[Number(a.first) + k];
        assert.ok(row, `acknowledged offset ${a.first + BigInt(k)} is missing after the crash`);
        assert.equal(row.payload.toString(), `{"call":${a.call},"k":${k},"pad":"${"x".repeat(a.pad)}"}`);
      }
    }
    // The reopened store appends after the tail.
    assert.equal((await store.append("crash", ["after"])).firstOffset, BigInt(rows.length));
    await store.close();
  }
  assert.ok(total > 20, `only ${total} acknowledgements across trials`);
  console.log(`crash trials: ${total} acknowledged appends checked`);
}, { timeout: 120_000 });
