// Runs a sequence of journal operations on the reference TouchJournal and prints what it
// answered. Input: { opts, ops, slotCases }. Flushes call the private flushBucket() directly, as
// the reference benchmarks do. See __test__/journal-reference.spec.mjs.
import { input, output, SRC } from "./common.ts";

const { TouchJournal } = await import(`${SRC}/touch/touch_journal.ts`);
const { opts, ops, slotCases } = input<any>();

function flush(j: any): void {
  if (j.flushTimer) clearTimeout(j.flushTimer);
  j.flushTimer = null;
  j.flushBucket();
}

const j = new TouchJournal(opts);
const answers: unknown[] = [];
const hits: Record<string, unknown> = {};
for (const op of ops) {
  switch (op[0]) {
    case "touch":
      j.touch(op[1], op[2] ?? undefined, op[3] ?? undefined);
      break;
    case "flush":
      flush(j);
      break;
    case "coalesce":
      j.setCoalesceMs(op[1]);
      break;
    case "maybe":
      answers.push(j.maybeTouchedSince(op[1], op[2]));
      break;
    case "maybeAny":
      answers.push(j.maybeTouchedSinceAny(op[1], op[2]));
      break;
    case "exact":
      answers.push(j.exactTouchedSinceAny(op[1], op[2]));
      break;
    case "wait": {
      const id = op[1];
      j.waitForAny({ keys: op[2], exactKeys: op[3], afterGeneration: op[4], timeoutMs: 60_000 }).then((hit: any) => {
        hits[id] = hit && { generation: hit.generation, keyId: hit.keyId, bucketMaxSourceOffsetSeq: hit.bucketMaxSourceOffsetSeq };
      });
      break;
    }
    case "meta": {
      const m = j.getMeta();
      answers.push({
        generation: m.generation,
        pendingKeys: m.pendingKeys,
        overflowBuckets: m.overflowBuckets,
        activeWaiters: m.activeWaiters,
        bucketMaxSourceOffsetSeq: m.bucketMaxSourceOffsetSeq,
        filterSize: m.filterSize,
        k: m.k,
        bucketMs: m.bucketMs,
        coalesceMs: m.coalesceMs,
        cursorGeneration: Number(j.getCursor().split(":")[1]),
      });
      break;
    }
    default:
      throw new Error(`unknown op ${op[0]}`);
  }
  // Let resolved waits record their hit before the next operation.
  await Promise.resolve();
}
await new Promise((r) => setTimeout(r, 20));
j.stop();

// Slot positions: the slots one key sets in a fresh journal's filter.
const slots: number[][] = [];
for (const { key, filterPow2, k } of slotCases) {
  const s = new TouchJournal({ bucketMs: 100, filterPow2, k, pendingMaxKeys: 10, keyIndexMaxKeys: 32 });
  s.touch(key);
  flush(s);
  const set: number[] = [];
  const last: Uint32Array = (s as any).lastSet;
  for (let i = 0; i < last.length; i++) if (last[i] !== 0) set.push(i);
  slots.push(set);
  s.stop();
}
output({ answers, hits, slots });
