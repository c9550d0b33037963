// Helpers for packed batch results (`processRows` / `TouchEngine.processBatch` with
// `output: "packed"`): the touches come as typed arrays in emitted order, with no object per
// touch. `unpackTouches` rebuilds the `TouchRow` objects the default output carries, property
// for property (table touches keep `routingKey` / `templateId` as undefined own properties).

const HEX = "0123456789abcdef";

/** The 16 lowercase hex digits of a 64-bit routing key (a bigint). */
export function routingKeyHex(key) {
  let hi = Number(key >> 32n);
  let lo = Number(key & 0xffffffffn);
  let s = "";
  for (let i = 0; i < 8; i++, lo >>>= 4) s = HEX[lo & 15] + s;
  for (let i = 0; i < 8; i++, hi >>>= 4) s = HEX[hi & 15] + s;
  return s;
}

/** The touches of a packed result as `TouchRow` objects, in the same order. */
export function unpackTouches(packed) {
  const { count, keyIds, watermarks, routingKeys, hasRoutingKey, kinds, entities, entityIndex, templateIds, templateIndex } = packed;
  const out = new Array(count);
  for (let i = 0; i < count; i++) {
    const t = templateIndex[i];
    out[i] = {
      keyId: keyIds[i],
      routingKey: hasRoutingKey[i] !== 0 ? routingKeyHex(routingKeys[i]) : undefined,
      watermark: String(watermarks[i]),
      entity: entities[entityIndex[i]],
      kind: kinds[i] === 1 ? "template" : "table",
      templateId: t === 0xffffffff ? undefined : templateIds[t],
    };
  }
  return out;
}
