// @ts-check
"use strict";
// `TouchEngine.prototype.wait` as a small JavaScript function over the native engine: it reads
// the request's fields here, in JIT-compiled code, and hands them to the native side as
// arguments (`_engineWait`), instead of the native method looking each one up through N-API
// (a property lookup and a key string per field, on every wait). Same checks, errors and
// replies as the native method; the field order is the native `WaitArgs::FIELDS` (a Rust test
// in src/engine/wait/request.rs holds the two together).

/**
 * Installs the method on `binding.TouchEngine.prototype` (once per environment).
 * @param {any} binding the native module
 */
function installEngineMethods(binding) {
  const proto = binding.TouchEngine.prototype;
  const waitNative = proto.wait;
  const waitFields = binding._engineWait;
  Object.defineProperty(proto, "wait", {
    configurable: true,
    writable: true,
    enumerable: true,
    value: /** @this {any} */ function wait(request) {
      if (typeof request !== "object" || request === null) return waitNative.call(this, request);
      return waitFields(
        this,
        request.stream,
        request.signal,
        request.keys,
        request.keyIds,
        request.exact,
        request.cursor,
        request.timeoutMs,
        request.templateIdsUsed,
        request.interestMode,
        request.declareTemplates,
        request.inactivityTtlMs,
      );
    },
  });
}

module.exports = { installEngineMethods };
