// Evaluates key-derivation cases with the reference (live_keys.ts, touch_key_id.ts,
// touch_journal.ts cursor helpers). Input: { cases: [[op, ...args]] }; output: one result per
// case (errors become { $error: message }).
import { input, output, SRC } from "./common.ts";

const K = await import(`${SRC}/touch/live_keys.ts`);
const T = await import(`${SRC}/touch/touch_key_id.ts`);
const J = await import(`${SRC}/touch/touch_journal.ts`);

// Special values JSON cannot carry.
function revive(v: any): any {
  if (v && typeof v === "object" && !Array.isArray(v)) {
    if ("$special" in v) {
      return { undefined: undefined, "-0": -0, NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity }[v.$special as string];
    }
    const o: any = {};
    for (const k of Object.keys(v)) o[k] = revive(v[k]);
    return o;
  }
  if (Array.isArray(v)) return v.map(revive);
  return v;
}

const ops: Record<string, (...a: any[]) => unknown> = {
  tableKey: (e) => K.tableKeyFor(e),
  tableKeyId: (e) => K.tableKeyIdFor(e),
  templateId: (e, f) => K.templateIdFor(e, f),
  templateKey: (t) => K.templateKeyFor(t),
  templateKeyId: (t) => K.templateKeyIdFor(t),
  watchKey: (t, a) => K.watchKeyFor(t, a),
  watchKeyId: (t, a) => K.watchKeyIdFor(t, a),
  membershipKey: (t, a) => K.membershipKeyFor(t, a),
  membershipKeyId: (t, a) => K.membershipKeyIdFor(t, a),
  projectedFieldKey: (t, f, a) => K.projectedFieldKeyFor(t, f, a),
  projectedFieldKeyId: (t, f, a) => K.projectedFieldKeyIdFor(t, f, a),
  touchKeyIdFromRoutingKey: (k) => T.touchKeyIdFromRoutingKey(k),
  encodeTemplateArg: (v, e) => K.encodeTemplateArg(v, e),
  canonicalizeTemplateFields: (f) => K.canonicalizeTemplateFields(f),
  parseTouchCursor: (r) => J.parseTouchCursor(r),
  formatTouchCursor: (e, g) => J.formatTouchCursor(e, g),
};

const { cases } = input<{ cases: any[][] }>();
const results = cases.map(([op, ...args]) => {
  try {
    const r = ops[op](...args.map(revive));
    return r === undefined ? { $special: "undefined" } : r;
  } catch (e: any) {
    return { $error: String(e?.message ?? e) };
  }
});
output(results);
