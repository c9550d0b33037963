// Stream offsets with the reference (offset.ts). Input: { decode: [text], encode: [[epoch,
// seq, inBlock]] }; output: { decode: [{ epoch, seq } | { start: true } | { error }],
// encode: [text | { error }] }.
import { input, output, SRC } from "./common.ts";

const O = await import(`${SRC}/offset.ts`);

const { decode, encode } = input<{ decode: string[]; encode: Array<[number, bigint, number]> }>();
output({
  decode: decode.map((text) => {
    const r = O.parseOffsetResult(text);
    if (r.status !== "ok") return { error: r.error.message };
    return r.value.kind === "start" ? { start: true } : { epoch: r.value.epoch, seq: r.value.seq };
  }),
  encode: encode.map(([epoch, seq, inBlock]) => {
    const r = O.encodeOffsetResult(epoch, seq, inBlock);
    return r.status === "ok" ? r.value : { error: r.error.message };
  }),
});
