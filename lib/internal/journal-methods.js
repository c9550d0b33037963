// @ts-check
"use strict";
// `TouchJournal.prototype.waitForAny` and `touch` as small JavaScript functions over the native
// journal (see src/bindings/journal_fast.rs for why): they read the arguments here, in
// JIT-compiled code, and call plain native functions with a handle made once per journal.
// Same checks, same errors, same results as the native methods they replace.
// `__test__/journal-js-methods.spec.mjs` pins that.

/**
 * Installs the methods on `binding.TouchJournal.prototype` (once per environment).
 * @param {any} binding the native module
 */
function installJournalMethods(binding) {
  const proto = binding.TouchJournal.prototype;
  const handleOf = binding._journalHandle;
  const waitFast = binding._waitForAny;
  const touchFast = binding._touch;
  const argsBufferOf = binding._waitArgsBuffer;
  const { waitArgs, maxKeys, f64At } = binding._journalFastPath();
  const slot = Symbol("durable-touch.journalHandle");
  // Per journal: the native handle and, where the runtime allows, typed arrays over the
  // handle's argument buffer (key ids, then n and has-after; afterGeneration and timeoutMs),
  // which `waitArgs` reads.
  function handleFor(journal) {
    let r = journal === null || journal === undefined ? undefined : journal[slot];
    if (r === undefined) {
      const h = handleOf(journal);
      const buf = argsBufferOf(h);
      r = buf === undefined
        ? { h, u32: null, f64: null, calls: 0 }
        : { h, u32: new Uint32Array(buf, 0, maxKeys + 2), f64: new Float64Array(buf, f64At, 2), calls: 0 };
      try {
        Object.defineProperty(journal, slot, { value: r });
      } catch {}
    }
    return r;
  }
  const method = (value) => ({ configurable: true, writable: true, enumerable: true, value });
  Object.defineProperty(proto, "waitForAny", method(/** @this {any} */ function waitForAny(args) {
    const r = handleFor(this);
    if (typeof args !== "object" || args === null) return waitFast(r.h, args);
    const keys = args.keys, exactKeys = args.exactKeys;
    const afterGeneration = args.afterGeneration, timeoutMs = args.timeoutMs, signal = args.signal;
    const s = r.u32;
    // Plain arrays of u32 ids with number fields (the common wait) are written to the buffer
    // here; anything else, and every error, takes the general path. So does a copy during which
    // another call used the buffer (an element getter that waits on the same journal), or into
    // a buffer someone detached. The native side checks the numbers as the general path does.
    if (s !== null && (exactKeys === undefined || exactKeys === null) && Array.isArray(keys) && keys.length <= maxKeys && typeof timeoutMs === "number") {
      const noAfter = afterGeneration === undefined || afterGeneration === null;
      if (noAfter || typeof afterGeneration === "number") {
        const n = keys.length;
        const mark = (r.calls = (r.calls + 1) | 0);
        let i = 0;
        for (; i < n; i++) {
          const k = keys[i];
          if (k >>> 0 !== k) break;
          s[i] = k;
        }
        if (i === n && r.calls === mark && s.length === maxKeys + 2) {
          const f = r.f64;
          s[maxKeys] = n;
          s[maxKeys + 1] = noAfter ? 0 : 1;
          f[0] = noAfter ? 0 : afterGeneration;
          f[1] = timeoutMs;
          return waitArgs(r.h, signal);
        }
      }
    }
    return waitFast(r.h, args, keys, exactKeys, afterGeneration, timeoutMs, signal);
  }));
  Object.defineProperty(proto, "touch", method(/** @this {any} */ function touch(keyId, sourceOffsetSeq, routingKey) {
    touchFast(handleFor(this).h, keyId, sourceOffsetSeq, routingKey);
  }));
}

module.exports = { installJournalMethods };
