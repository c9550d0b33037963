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
  /** Touches staged per journal before one `touchMany` (see `touch` below). */
  const STAGE_TOUCHES = 4096;
  // Per journal: the native handle and, where the runtime allows, typed arrays over the
  // handle's argument buffer (key ids, then n and has-after; afterGeneration and timeoutMs),
  // which `waitArgs` reads.
  function handleFor(journal) {
    let r = journal === null || journal === undefined ? undefined : journal[slot];
    if (r === undefined) {
      const h = handleOf(journal);
      const buf = argsBufferOf(h);
      r = buf === undefined
        ? { h, u32: null, f64: null, calls: 0, stage: null, staged: false }
        : { h, u32: new Uint32Array(buf, 0, maxKeys + 2), f64: new Float64Array(buf, f64At, 2), calls: 0, stage: null, staged: false };
      try {
        Object.defineProperty(journal, slot, { value: r });
        // Staging needs the record to outlive the call.
        r.staged = journal[slot] === r;
      } catch {}
    }
    return r;
  }
  const method = (value) => ({ configurable: true, writable: true, enumerable: true, value });
  Object.defineProperty(proto, "waitForAny", method(/** @this {any} */ function waitForAny(args) {
    const r = handleFor(this);
    if (r.stage !== null && r.stage.n !== 0) drain(this, r.stage);
    if (typeof args !== "object" || args === null) return waitFast(r.h, args);
    let keys, exactKeys, afterGeneration, timeoutMs, signal;
    const s = r.u32;
    let n = -1;
    // The caller's getters and proxies run here; what they throw rejects the wait (a
    // promise-returning method reports every failure through its promise).
    try {
      keys = args.keys;
      exactKeys = args.exactKeys;
      afterGeneration = args.afterGeneration;
      timeoutMs = args.timeoutMs;
      signal = args.signal;
      // Plain arrays of u32 ids with number fields (the common wait) are written to the buffer
      // here; anything else, and every error, takes the general path. So does a copy during
      // which another call used the buffer (an element getter that waits on the same journal),
      // or into a buffer someone detached. The native side checks the numbers as the general
      // path does.
      if (s !== null && (exactKeys === undefined || exactKeys === null) && Array.isArray(keys) && keys.length <= maxKeys && typeof timeoutMs === "number") {
        if (afterGeneration === undefined || afterGeneration === null || typeof afterGeneration === "number") {
          const len = keys.length;
          const mark = (r.calls = (r.calls + 1) | 0);
          let i = 0;
          for (; i < len; i++) {
            const k = keys[i];
            if (k >>> 0 !== k) break;
            s[i] = k;
          }
          if (i === len && r.calls === mark && s.length === maxKeys + 2) n = len;
        }
      }
    } catch (e) {
      return Promise.reject(e);
    }
    if (n >= 0) {
      const noAfter = afterGeneration === undefined || afterGeneration === null;
      const f = r.f64;
      s[maxKeys] = n;
      s[maxKeys + 1] = noAfter ? 0 : 1;
      f[0] = noAfter ? 0 : afterGeneration;
      f[1] = timeoutMs;
      return waitArgs(r.h, signal);
    }
    return waitFast(r.h, args, keys, exactKeys, afterGeneration, timeoutMs, signal);
  }));
  // touch(): one N-API call per key costs far more than the journal's work for the key, so
  // touches are staged in typed arrays here and handed over as one touchMany call: when the
  // stage is full, before any other method of the journal runs (so nothing ever observes a
  // staged touch missing), and at the latest when the current JavaScript job ends (a
  // microtask), so the bucket's flush timer starts as it did. Only touches the native method
  // would take as they are go to the stage (a u32 key id; an offset that is a bigint in i64
  // range, or absent; a routing key of 16 hex digits, or absent); anything else empties the
  // stage first and takes the native method, with its checks and errors.
  const touchMany = proto.touchMany;
  const littleEndian = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
  const HEX16 = /^[0-9a-fA-F]{16}$/;
  const I64_MIN = -(2n ** 63n);
  const I64_MAX = 2n ** 63n - 1n;
  /** No offset: below every offset, so the bucket's highest offset is left as it is. */
  const NO_OFFSET = I64_MIN;
  function newStage() {
    const rks = new BigUint64Array(STAGE_TOUCHES);
    return {
      n: 0,
      offsets: false,
      routing: false,
      queued: false,
      keys: new Uint32Array(STAGE_TOUCHES),
      seqs: new BigInt64Array(STAGE_TOUCHES),
      rks,
      rkWords: new Uint32Array(rks.buffer),
      has: new Uint8Array(STAGE_TOUCHES),
    };
  }
  // The journal whose stage holds touches, and that stage: the next touch() on it goes
  // straight to the stage. Cleared by every drain, so it never keeps a journal alive.
  /** @type {any} */
  let stagingJournal = null;
  /** @type {any} */
  let stagingStage = null;
  /** The staging stage's keys while it holds plain key ids only, else null. */
  /** @type {Uint32Array | null} */
  let plainKeys = null;
  function drain(journal, st) {
    if (journal === stagingJournal) stagingJournal = stagingStage = plainKeys = null;
    const n = st.n;
    if (n === 0) return;
    st.n = 0;
    const { offsets, routing } = st;
    st.offsets = st.routing = false;
    if (!offsets && !routing) {
      touchMany.call(journal, st.keys.subarray(0, n));
    } else if (!routing) {
      touchMany.call(journal, st.keys.subarray(0, n), st.seqs.subarray(0, n));
    } else {
      const seqs = offsets ? st.seqs.subarray(0, n) : null;
      touchMany.call(journal, st.keys.subarray(0, n), seqs, st.rks.subarray(0, n), st.has.subarray(0, n));
    }
  }
  /** Empties the stage of `journal` (if it has one) before another method reads the journal. */
  function drained(journal) {
    const r = journal === null || journal === undefined ? undefined : journal[slot];
    if (r !== undefined && r.stage !== null && r.stage.n !== 0) drain(journal, r.stage);
  }
  /** Drains the stage at the end of the current job (a function of its own, so that `touch`
   * captures nothing and allocates no context per call). */
  function drainLater(journal, st) {
    st.queued = true;
    queueMicrotask(() => {
      st.queued = false;
      drain(journal, st);
    });
  }
  Object.defineProperty(proto, "touch", method(/** @this {any} */ function touch(keyId, sourceOffsetSeq, routingKey) {
    // The common case, small enough for V8 to inline into the caller's loop: a plain key id
    // on the journal already staging plain ones, with room left in its stage.
    if (this === stagingJournal && plainKeys !== null && sourceOffsetSeq === undefined && routingKey === undefined && typeof keyId === "number" && keyId >>> 0 === keyId) {
      const st = stagingStage;
      const i = st.n;
      if (i < STAGE_TOUCHES - 1) {
        plainKeys[i] = keyId;
        st.n = i + 1;
        return;
      }
    }
    touchSlow(this, keyId, sourceOffsetSeq, routingKey);
  }));
  /** `touch` in general: a new stage, offsets and routing keys, a full stage, or no staging. */
  function touchSlow(journal, keyId, sourceOffsetSeq, routingKey) {
    let st = stagingStage;
    if (journal !== stagingJournal || st === null) {
      const r = handleFor(journal);
      st = r.stage;
      if (st === null || st === undefined) {
        if (!r.staged) {
          touchFast(r.h, keyId, sourceOffsetSeq, routingKey);
          return;
        }
        st = r.stage = newStage();
      }
    }
    const noSeq = sourceOffsetSeq === undefined || sourceOffsetSeq === null;
    const noRk = routingKey === undefined || routingKey === null;
    if (
      typeof keyId === "number" && keyId >>> 0 === keyId &&
      (noSeq || (typeof sourceOffsetSeq === "bigint" && sourceOffsetSeq >= I64_MIN && sourceOffsetSeq <= I64_MAX)) &&
      (noRk || (littleEndian && typeof routingKey === "string" && HEX16.test(routingKey)))
    ) {
      const i = st.n;
      st.keys[i] = keyId;
      // Offsets and routing-key flags are written only once some staged touch has one (the
      // touches staged before it are then filled in as having none).
      if (!noSeq) {
        if (!st.offsets) {
          st.seqs.fill(NO_OFFSET, 0, i);
          st.offsets = true;
        }
        st.seqs[i] = sourceOffsetSeq;
      } else if (st.offsets) {
        st.seqs[i] = NO_OFFSET;
      }
      if (!noRk) {
        if (!st.routing) {
          st.has.fill(0, 0, i);
          st.routing = true;
        }
        st.has[i] = 1;
        st.rkWords[2 * i] = parseInt(routingKey.slice(8), 16);
        st.rkWords[2 * i + 1] = parseInt(routingKey.slice(0, 8), 16);
      } else if (st.routing) {
        st.has[i] = 0;
      }
      st.n = i + 1;
      if (st.n === STAGE_TOUCHES) {
        drain(journal, st);
      } else {
        if (journal !== stagingJournal) {
          stagingJournal = journal;
          stagingStage = st;
        }
        plainKeys = st.offsets || st.routing ? null : st.keys;
        if (!st.queued) drainLater(journal, st);
      }
      return;
    }
    drain(journal, st);
    touchFast(handleFor(journal).h, keyId, sourceOffsetSeq, routingKey);
  }
  // Every other method sees the staged touches first.
  for (const name of Object.getOwnPropertyNames(proto)) {
    const d = Object.getOwnPropertyDescriptor(proto, name);
    if (name === "constructor" || name === "touch" || name === "waitForAny" || d === undefined || typeof d.value !== "function") continue;
    const inner = d.value;
    const wrapped = {
      [name](/** @type {any[]} */ ...args) {
        drained(this);
        return inner.apply(this, args);
      },
    }[name];
    Object.defineProperty(proto, name, { ...d, value: wrapped });
  }
}

module.exports = { installJournalMethods };
