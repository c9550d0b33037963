import type { PackedTouches, TouchRow } from "../index.js";

/** The 16 lowercase hex digits of a 64-bit routing key. */
export function routingKeyHex(key: bigint): string;

/** The touches of a packed result as `TouchRow` objects, in the same order (what the default
 * `output: "objects"` would have resolved). */
export function unpackTouches(packed: PackedTouches): TouchRow[];
