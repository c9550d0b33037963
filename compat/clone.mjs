// A deep copy of plain data (objects, arrays, primitives), for the Prisma Streams server's
// `cloneStreamProfileSpec` (`profiles/profile.ts`), which the swap patches to use it: the server
// clones a stream's profile about five times per request (its profile cache hands out copies),
// and `structuredClone` made that the largest single cost of a touch request's JS time
// (docs/perf-notes.md). Anything that is not a plain object or an array (a Date, a Map, a class
// instance) is still copied by `structuredClone`, so the result is what it would give.
export function clonePlainData(value) {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) {
    const out = new Array(value.length);
    for (let i = 0; i < value.length; i++) out[i] = clonePlainData(value[i]);
    return out;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return structuredClone(value);
  const out = {};
  for (const key of Object.keys(value)) out[key] = clonePlainData(value[key]);
  return out;
}
