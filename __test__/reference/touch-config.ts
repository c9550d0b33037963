// Validates touch configs and state-protocol profiles with the reference (touch/spec.ts,
// profiles/stateProtocol/validation.ts). Input: { cases: [{ kind: "touch"|"profile", raw, path }] }.
import { input, output, SRC } from "./common.ts";

const S = await import(`${SRC}/touch/spec.ts`);
const P = await import(`${SRC}/profiles/stateProtocol/validation.ts`);

function revive(v: any): any {
  if (v && typeof v === "object" && !Array.isArray(v)) {
    if ("$special" in v) return { undefined: undefined, "-0": -0, NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity }[v.$special as string];
    const o: any = {};
    for (const k of Object.keys(v)) o[k] = revive(v[k]);
    return o;
  }
  if (Array.isArray(v)) return v.map(revive);
  return v;
}

const { cases } = input<{ cases: Array<{ kind: string; raw: unknown; path: string }> }>();
output(
  cases.map((c) => {
    const raw = revive(c.raw);
    const res = c.kind === "touch" ? S.validateTouchConfigResult(raw, c.path) : P.validateStateProtocolProfileResult(raw, c.path);
    return res.status === "ok" ? { ok: res.value } : { error: res.error.message };
  })
);
