// A worker for journal-js-methods.spec.mjs: each thread loads the addon (its own install of the
// JS methods, its own journal handles and key buffers) and runs the same waits.
import { parentPort, isMainThread } from "node:worker_threads";
import { createRequire } from "node:module";

const dt = createRequire(import.meta.url)("../../index.js");

/** 1,000 waits on three keys each; every other one is touched. Returns what went wrong, or "". */
export async function waitScenario() {
  const j = new dt.TouchJournal();
  const waits = [];
  for (let i = 0; i < 1000; i++) waits.push(j.waitForAny({ keys: [i, i + 1, 5000 + i], afterGeneration: 0, timeoutMs: 5000 }));
  for (let i = 0; i < 1000; i += 2) j.touch(5000 + i);
  j.flush();
  await new Promise((r) => setTimeout(r, 10));
  j.stop();
  const hits = await Promise.all(waits);
  const bad = hits.findIndex((h, i) => (i % 2 === 0 ? h?.keyId !== 5000 + i : h !== null));
  return bad < 0 ? "" : `wait ${bad} resolved with ${JSON.stringify(hits[bad], (_, v) => (typeof v === "bigint" ? String(v) : v))}`;
}

if (!isMainThread) parentPort.postMessage(await waitScenario());
