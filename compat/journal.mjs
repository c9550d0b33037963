// `TouchJournal`, `parseTouchCursor`, `formatTouchCursor` for the reference server
// (`touch/touch_journal.ts`): the native journal, which already has the reference's
// constructor options and methods. Two gaps in `waitForAny` are bridged here: the generation
// is taken through `>>> 0` as the reference does (so an omitted one is 0, where the native
// default is the current generation), and the native journal takes at most 1024 keys (and
// 1024 exact keys) per wait, the reference any number, so a larger wait becomes several native
// waits on the same generation, settled by the first hit.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const native = require("../index.js");

export const { parseTouchCursor, formatTouchCursor } = native;

/** The native journal's limit per wait (keys, and exact keys). */
const MAX_WAIT_KEYS = require("../lib/internal/native.js")._maxWaitKeys();

const chunks = (list) => {
  const out = [];
  for (let i = 0; i < list.length; i += MAX_WAIT_KEYS) out.push(list.slice(i, i + MAX_WAIT_KEYS));
  return out;
};

/**
 * `waitForAny` with the reference journal's contract over a native one (`wait`, bound to its
 * journal): the generation taken through `>>> 0`, and any number of keys and exact keys.
 */
export function bridgeWaitForAny(wait) {
  return function waitForAny(args) {
    if (args === null || typeof args !== "object") return wait(args);
    args = { ...args, afterGeneration: args.afterGeneration >>> 0 };
    const exact = args.exactKeys;
    const big = (args.keys?.length ?? 0) > MAX_WAIT_KEYS || (Array.isArray(exact) && exact.length > MAX_WAIT_KEYS);
    if (!big) return wait(args);
    return waitInParts(wait, args);
  };
}

async function waitInParts(wait, args) {
  // The reference's normalisation of the key lists (dedupe; exact keys trimmed, lowercased,
  // 16 hex), so the parts are as few as possible.
  const keys = [...new Set(Array.from(args.keys, (k) => k >>> 0))];
  const exact = Array.isArray(args.exactKeys)
    ? [...new Set(args.exactKeys.map((k) => String(k).trim().toLowerCase()).filter((k) => /^[0-9a-f]{16}$/.test(k)))]
    : [];
  if (keys.length <= MAX_WAIT_KEYS && exact.length <= MAX_WAIT_KEYS) {
    return wait({ ...args, keys, exactKeys: exact.length > 0 ? exact : null });
  }
  if (args.signal?.aborted) return null;
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  args.signal?.addEventListener("abort", onAbort, { once: true });
  const afterGeneration = args.afterGeneration;
  const parts = [
    ...chunks(keys).map((k) => ({ keys: k, exactKeys: null })),
    ...chunks(exact).map((e) => ({ keys: [], exactKeys: e })),
  ];
  try {
    return await new Promise((resolve, reject) => {
      let open = parts.length;
      for (const part of parts) {
        wait({ ...part, afterGeneration, timeoutMs: args.timeoutMs, signal: stop.signal }).then((hit) => {
          if (hit) {
            stop.abort();
            resolve(hit);
          } else if (--open === 0) resolve(null);
        }, reject);
      }
    });
  } finally {
    stop.abort();
    args.signal?.removeEventListener("abort", onAbort);
  }
}

export class TouchJournal extends native.TouchJournal {
  #wait = bridgeWaitForAny((args) => super.waitForAny(args));

  waitForAny(args) {
    return this.#wait(args);
  }
}
