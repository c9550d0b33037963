// Opens a SQLite file with the reference's SqliteDurableStore and either dumps what it sees
// ("dump") or writes streams and rows itself ("write"), then dumps.
import { input, output, SRC } from "./common.ts";

const { path, mode, writes } = input<{ path: string; mode: "dump" | "write"; writes?: any[] }>();
const { SqliteDurableStore } = await import(`${SRC}/db/db.ts`);
const { Result } = await import("better-result");
const db = new SqliteDurableStore(path);

if (mode === "write") {
  for (const w of writes ?? []) {
    db.ensureStream(w.stream, { contentType: w.contentType });
    const st = db.getStream(w.stream);
    const res = db.appendWalRows({
      stream: w.stream,
      startOffset: st.next_offset,
      baseAppendMs: BigInt(w.appendMs),
      rows: w.payloads.map((p: string, i: number) => ({
        routingKey: w.routingKeys?.[i] == null ? null : new TextEncoder().encode(w.routingKeys[i]),
        contentType: w.contentType,
        payload: new TextEncoder().encode(p),
        appendMs: BigInt(w.appendMs),
      })),
    });
    if (Result.isError(res)) throw new Error(JSON.stringify(res.error));
  }
}

const streams = db.listStreams(1000, 0).map((s: any) => ({
  name: s.stream,
  contentType: s.content_type,
  profile: s.profile,
  nextOffset: s.next_offset,
  walRows: s.wal_rows,
  walBytes: s.wal_bytes,
  pendingRows: s.pending_rows,
  lastAppendMs: s.last_append_ms,
  rows: [...db.iterWalRange(s.stream, 0n, s.next_offset)].map((r: any) => ({
    offset: BigInt(r.offset),
    tsMs: Number(r.ts_ms),
    payload: new TextDecoder().decode(r.payload),
    routingKey: r.routing_key == null ? null : new TextDecoder().decode(r.routing_key),
    contentType: r.content_type,
  })),
}));
const version = db.db.query("SELECT version FROM schema_version").get().version;
db.close();
output({ version, streams });
