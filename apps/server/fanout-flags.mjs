// The fan-out over NATS JetStream as the server's options (and the CLI's flags) give it: checked
// before anything starts, each mistake named by its flag, and turned into a TouchEngine's
// `fanout` option for a writer or an edge.

/** The fan-out options of a server (null without `nats`), checked before anything starts. */
export function fanoutOptions(opts) {
  const nats = opts.nats === undefined || opts.nats === null || opts.nats === "" ? null : String(opts.nats);
  const edge = opts.edge === true || opts.edge === "true";
  if (!nats && edge) throw new Error("an edge needs the writer's NATS server (--nats nats://host:port)");
  if (opts.writer && !edge) throw new Error("--writer is for an edge (--edge --nats …)");
  if (opts.publicUrl && (edge || !nats)) throw new Error("--public-url is for a writer (--nats without --edge)");
  const retention = (v, flag, min) => {
    if (v === undefined || v === null || v === "") return undefined;
    if (edge || !nats) throw new Error(`${flag} is for a writer (--nats without --edge): it sets the retention of the writer's JetStream stream`);
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n < min) throw new Error(`${flag} must be an integer >= ${min}, got ${v}`);
    return n;
  };
  const maxAgeMs = retention(opts.natsMaxAgeMs, "--nats-max-age-ms", 1_000);
  const maxBytes = retention(opts.natsMaxBytes, "--nats-max-bytes", 65_536);
  let batchMs;
  if (opts.natsBatchMs !== undefined && opts.natsBatchMs !== null && opts.natsBatchMs !== "") {
    if (edge || !nats) throw new Error("--nats-batch-ms is for a writer (--nats without --edge)");
    batchMs = Number(opts.natsBatchMs);
    if (!Number.isSafeInteger(batchMs) || batchMs < 0 || batchMs > 1_000) throw new Error(`--nats-batch-ms must be an integer from 0 to 1000, got ${opts.natsBatchMs}`);
  }
  if (!nats) return null;
  const prefix = opts.natsPrefix === undefined || opts.natsPrefix === "" ? "durable-touch" : String(opts.natsPrefix);
  const url = (v, what) => {
    if (v === undefined || v === null || v === "") return undefined;
    let u;
    try {
      u = new URL(String(v));
    } catch {
      throw new Error(`${what} must be an http(s) URL, got ${v}`);
    }
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error(`${what} must be an http(s) URL, got ${v}`);
    return String(v).replace(/\/+$/, "");
  };
  return {
    url: nats,
    prefix,
    edge,
    writer: edge ? url(opts.writer, "--writer") : undefined,
    publicUrl: edge ? undefined : url(opts.publicUrl, "--public-url"),
    beatMs: opts.natsBeatMs === undefined ? undefined : Number(opts.natsBeatMs),
    maxAgeMs,
    maxBytes,
    batchMs,
  };
}

/** The engine's `fanout` option for `role` ("writer" or "edge") from checked options `fo`. */
export const engineFanout = (fo, role, writerUrl) => ({
  role,
  url: fo.url,
  prefix: fo.prefix,
  ...(fo.beatMs === undefined ? {} : { beatMs: fo.beatMs }),
  ...(fo.maxAgeMs === undefined ? {} : { maxAgeMs: fo.maxAgeMs }),
  ...(fo.maxBytes === undefined ? {} : { maxBytes: fo.maxBytes }),
  ...(fo.batchMs === undefined ? {} : { batchMs: fo.batchMs }),
  ...(writerUrl ? { writerUrl } : {}),
});
