// @ts-check
"use strict";
// `TouchEngine.prototype.wait` as a small JavaScript function over the native engine: it reads
// the request's fields here, in JIT-compiled code, and hands them to the native side as
// arguments (`_engineWait`), instead of the native method looking each one up through N-API
// (a property lookup and a key string per field, on every wait). Same checks, errors and
// replies as the native method; the field order is the native `WaitArgs::FIELDS` (a Rust test
// in src/engine/wait/request.rs holds the two together).
//
// A wait with a live AbortSignal listens to it here too: the native side registers the wait
// under a number (`cancelId`) and `_engineCancel` aborts it. Calling `addEventListener` and
// `removeEventListener` from JavaScript costs a fraction of doing it through N-API (a call
// into JavaScript each, plus the signal's checks), and every wait a server answers carries a
// signal. Anything that is not a live AbortSignal (absent, aborted, a look-alike, a proxy)
// goes to the native side as before, which checks and refuses it as it always did.

/**
 * Installs the method on `binding.TouchEngine.prototype` (once per environment).
 * @param {any} binding the native module
 */
function installEngineMethods(binding) {
  const proto = binding.TouchEngine.prototype;
  const waitNative = proto.wait;
  const waitFields = binding._engineWait;
  const cancel = binding._engineCancel;
  // The brand check of a real AbortSignal: its `aborted` getter, which throws for anything
  // else (a proxy included) and runs no user code.
  const abortedGetter =
    typeof AbortSignal === "function" ? Object.getOwnPropertyDescriptor(AbortSignal.prototype, "aborted")?.get : undefined;
  /** @returns {boolean | undefined} whether `signal` is an AbortSignal that has not aborted */
  function live(signal) {
    if (abortedGetter === undefined || typeof signal !== "object" || signal === null) return undefined;
    try {
      return abortedGetter.call(signal) === false;
    } catch {
      return undefined;
    }
  }
  let lastCancelId = 0;
  /**
   * Per signal, the engine waits listening to it: cancel id → engine. One listener per signal
   * serves them all; it is removed when the last of them settles, or when it fires.
   * @type {WeakMap<AbortSignal, Map<number, any>>}
   */
  const waitsOf = new WeakMap();
  /** @this {any} @param {any} event */
  function onAbort(event) {
    const signal = this ?? event?.target;
    const waits = waitsOf.get(signal);
    if (waits === undefined) return;
    waitsOf.delete(signal);
    signal.removeEventListener("abort", onAbort);
    for (const [id, engine] of waits) cancel(engine, id);
  }
  /** @param {AbortSignal} signal @param {number} id */
  function settled(signal, id) {
    const waits = waitsOf.get(signal);
    if (waits === undefined || !waits.delete(id) || waits.size !== 0) return;
    waitsOf.delete(signal);
    signal.removeEventListener("abort", onAbort);
  }
  Object.defineProperty(proto, "wait", {
    configurable: true,
    writable: true,
    enumerable: true,
    value: /** @this {any} */ function wait(request) {
      if (typeof request !== "object" || request === null) return waitNative.call(this, request);
      // The caller's getters and proxies run here; what they throw rejects the wait.
      let stream, signal, keys, keyIds, exact, cursor, timeoutMs, templateIdsUsed, interestMode, declareTemplates, inactivityTtlMs;
      try {
        stream = request.stream;
        signal = request.signal;
        keys = request.keys;
        keyIds = request.keyIds;
        exact = request.exact;
        cursor = request.cursor;
        timeoutMs = request.timeoutMs;
        templateIdsUsed = request.templateIdsUsed;
        interestMode = request.interestMode;
        declareTemplates = request.declareTemplates;
        inactivityTtlMs = request.inactivityTtlMs;
      } catch (e) {
        return Promise.reject(e);
      }
      const listen = live(signal) === true;
      const cancelId = listen ? (lastCancelId = lastCancelId === Number.MAX_SAFE_INTEGER ? 1 : lastCancelId + 1) : undefined;
      const reply = waitFields(
        this,
        stream,
        listen ? undefined : signal,
        keys,
        keyIds,
        exact,
        cursor,
        timeoutMs,
        templateIdsUsed,
        interestMode,
        declareTemplates,
        inactivityTtlMs,
        cancelId,
      );
      if (cancelId === undefined) return reply;
      let waits = waitsOf.get(signal);
      if (waits === undefined) {
        waits = new Map();
        waitsOf.set(signal, waits);
        signal.addEventListener("abort", onAbort);
      }
      waits.set(cancelId, this);
      return reply.then(
        (/** @type {any} */ value) => {
          settled(signal, cancelId);
          return value;
        },
        (/** @type {any} */ error) => {
          settled(signal, cancelId);
          throw error;
        },
      );
    },
  });
}

module.exports = { installEngineMethods };
