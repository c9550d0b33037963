// Sizes before elements: an array argument can be huge or sparse at no cost to its caller
// (`a = []; a.length = 2 ** 31`), so every entry point that reads a JS array checks its length
// against the core's cap before it reads an element, and refuses with the code that cap gives;
// where the core has no cap, an element it refuses stops the reading there.
//
// The arrays below are real arrays of length 2^31 with no element of their own: their
// prototype is a Proxy over Array.prototype that counts every element read and answers it
// (`undefined`, as a hole reads, or a valid element). A Proxy around an array would not do:
// N-API's `napi_is_array` says no to it, under both runtimes. Past `READ_LIMIT` reads the
// prototype throws, so code that reads every element fails fast instead of running for hours.
import assert from "node:assert/strict";
import { test, dt, rejectsWithCode } from "./harness.mjs";

const { TouchJournal, Store, TouchEngine, keys } = dt;

const HUGE = 2 ** 31;
const READ_LIMIT = 10_000;
const INDEX = /^(0|[1-9][0-9]*)$/;

/** A length-2^31 array whose every element is `element(i)`, and the count of its reads. */
function huge(element = () => undefined, length = HUGE) {
  const counter = { reads: 0 };
  const proto = new Proxy(Array.prototype, {
    get(target, key, receiver) {
      if (typeof key === "string" && INDEX.test(key)) {
        counter.reads++;
        if (counter.reads > READ_LIMIT) throw new Error(`read more than ${READ_LIMIT} elements`);
        return element(Number(key));
      }
      return Reflect.get(target, key, receiver);
    },
  });
  const array = [];
  array.length = length;
  Object.setPrototypeOf(array, proto);
  return { array, counter };
}

const throwsCode = (fn, code) =>
  assert.throws(fn, (e) => {
    assert.ok(e instanceof Error);
    assert.equal(e.code, code, e.message);
    return true;
  });

test("waitForAny refuses more than 1024 keys or exact keys by length, reading none", async () => {
  const j = new TouchJournal();
  try {
    for (const element of [() => undefined, (i) => i]) {
      const k = huge(element);
      const e = await rejectsWithCode(j.waitForAny({ keys: k.array, timeoutMs: 10 }), "ERR_INVALID_ARGUMENT");
      assert.equal(e.message, "keys: at most 1024 keys per wait");
      assert.equal(k.counter.reads, 0, "keys elements read");
    }
    for (const element of [() => undefined, () => "0123456789abcdef"]) {
      const x = huge(element);
      const e = await rejectsWithCode(j.waitForAny({ keys: [1], exactKeys: x.array, timeoutMs: 10 }), "ERR_INVALID_ARGUMENT");
      assert.equal(e.message, "exactKeys: at most 1024 keys per wait");
      assert.equal(x.counter.reads, 0, "exactKeys elements read");
    }
    // Just over the cap, through the native method too (the JS method hands such lists to it).
    const over = huge((i) => i, 1025);
    await rejectsWithCode(j.waitForAny({ keys: over.array, timeoutMs: 10 }), "ERR_INVALID_ARGUMENT");
    assert.equal(over.counter.reads, 0);
    assert.equal(j.getActiveWaiters(), 0);
  } finally {
    j.stop();
  }
});

test("touchMany refuses offset and routing-key lists whose length is not keyIds' before reading them", () => {
  const j = new TouchJournal();
  try {
    for (const element of [() => undefined, (i) => BigInt(i)]) {
      const seqs = huge(element);
      throwsCode(() => j.touchMany([1, 2], seqs.array), "ERR_INVALID_ARGUMENT");
      assert.equal(seqs.counter.reads, 0, "sourceOffsetSeqs elements read");
    }
    for (const element of [() => undefined, () => "0123456789abcdef"]) {
      const rks = huge(element);
      throwsCode(() => j.touchMany([1, 2], null, rks.array), "ERR_INVALID_ARGUMENT");
      assert.equal(rks.counter.reads, 0, "routingKeys elements read");
    }
    assert.equal(j.getMeta().pendingKeys, 0, "nothing was applied");
  } finally {
    j.stop();
  }
});

test("the keys helpers stop at the first element they refuse", () => {
  // The helper's arrays are arrays; a Proxy around an array is not one to N-API: refused unread.
  const probe = huge((i) => i);
  assert.ok(Array.isArray(probe.array));
  assert.equal(probe.array.length, HUGE);
  assert.equal(probe.array[7], 7);
  assert.equal(probe.counter.reads, 1);
  let reads = 0;
  const proxy = new Proxy(["a"], { get: (t, k, r) => (typeof k === "string" && INDEX.test(k) && reads++, Reflect.get(t, k, r)) });
  throwsCode(() => keys.watchKey("0123456789abcdef", proxy), "ERR_INVALID_ARGUMENT");
  assert.equal(reads, 0);

  const id = keys.templateId("public.posts", ["authorId"]);
  const calls = [
    (a) => keys.templateId("public.posts", a),
    (a) => keys.watchKey(id, a),
    (a) => keys.watchKeyId(id, a),
    (a) => keys.membershipKey(id, a),
    (a) => keys.membershipKeyId(id, a),
    (a) => keys.projectedFieldKey(id, "title", a),
    (a) => keys.projectedFieldKeyId(id, "title", a),
    (a) => keys.canonicalizeTemplateFields(a),
  ];
  for (const call of calls) {
    const { array, counter } = huge();
    throwsCode(() => call(array), "ERR_INVALID_ARGUMENT");
    assert.equal(counter.reads, 1, String(call));
  }
  // A refused element after valid ones: read up to it, no further.
  const { array, counter } = huge((i) => (i < 3 ? "a" : undefined));
  throwsCode(() => keys.watchKey(id, array), "ERR_INVALID_ARGUMENT");
  assert.equal(counter.reads, 4);
});

test("reloadProfiles stops at the first stream name it refuses", async () => {
  const store = Store.open(":memory:");
  const engine = new TouchEngine(store, { autoProcess: false });
  try {
    const { array, counter } = huge();
    throwsCode(() => engine.reloadProfiles(array), "ERR_INVALID_ARGUMENT");
    assert.equal(counter.reads, 1);
  } finally {
    await engine.close();
    await store.close();
  }
});

test("processRows reads at most 4 fields and encodings of a template (more than 3 skip it, P3)", async () => {
  const PROFILE = { kind: "state-protocol", touch: { enabled: true } };
  const templateId = keys.templateId("public.e0", ["tenantId"]);
  const payload = Buffer.from(JSON.stringify({ type: "public.e0", key: "1", value: { tenantId: "t1" }, headers: { operation: "insert" } }));
  const request = { stream: "s", fromOffset: 0n, toOffset: 0n, profile: PROFILE, maxRows: 10, maxBytes: 1 << 20 };
  const rows = [{ offset: 0n, tsMs: 1000, payload }];
  const template = { templateId, entity: "public.e0", fields: ["tenantId"], encodings: ["string"], activeFromSourceOffset: 0n };
  const good = await dt.processRows(rows, request, [template]);
  assert.ok(good.touches.some((t) => t.kind === "template"), "the template is used");
  for (const key of ["fields", "encodings"]) {
    for (const element of [() => undefined, () => (key === "fields" ? "tenantId" : "string")]) {
      const list = huge(element);
      const r = await dt.processRows(rows, request, [{ ...template, [key]: list.array }]);
      assert.deepEqual(r.touches.map((t) => t.kind), ["table"], `${key}: the template is skipped`);
      assert.ok(list.counter.reads <= 4, `${key}: ${list.counter.reads} elements read`);
    }
  }
});
