// The fan-out over NATS JetStream as the server's options (and the CLI's flags) give it: checked
// before anything starts, each mistake named by its flag, and turned into a TouchEngine's
// `fanout` option for a writer or an edge. The bounds and defaults are the engine's own
// (`fanoutBounds`, `fanoutDefaults`): a flag is refused here by the rule the engine would apply.

import { createRequire } from "node:module";

const { fanoutBounds } = createRequire(import.meta.url)("../../index.js");

const given = (v) => v !== undefined && v !== null && v !== "";

/** `v` as an integer within `fanoutBounds[name]`, or a message naming `flag`. */
function bounded(v, flag, name) {
  const { min, max } = fanoutBounds[name];
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new Error(`${flag} must be an integer from ${min} to ${max}, got ${v}`);
  return n;
}

/** The fan-out options of a server (null without `nats`), checked before anything starts. */
export function fanoutOptions(opts) {
  const nats = opts.nats === undefined || opts.nats === null || opts.nats === "" ? null : String(opts.nats);
  const edge = opts.edge === true || opts.edge === "true";
  if (!nats && edge) throw new Error("an edge needs the writer's NATS server (--nats nats://host:port)");
  if (opts.writer && !edge) throw new Error("--writer is for an edge (--edge --nats …)");
  if (opts.publicUrl && (edge || !nats)) throw new Error("--public-url is for a writer (--nats without --edge)");
  const retention = (v, flag, name) => {
    if (!given(v)) return undefined;
    if (edge || !nats) throw new Error(`${flag} is for a writer (--nats without --edge): it sets the retention of the writer's JetStream stream`);
    return bounded(v, flag, name);
  };
  const maxAgeMs = retention(opts.natsMaxAgeMs, "--nats-max-age-ms", "maxAgeMs");
  const maxBytes = retention(opts.natsMaxBytes, "--nats-max-bytes", "maxBytes");
  let batchMs;
  if (given(opts.natsBatchMs)) {
    if (edge || !nats) throw new Error("--nats-batch-ms is for a writer (--nats without --edge)");
    batchMs = bounded(opts.natsBatchMs, "--nats-batch-ms", "batchMs");
  }
  if (!nats) return null;
  // No prefix given: the engine's default (`fanoutDefaults.prefix`).
  const prefix = given(opts.natsPrefix) ? String(opts.natsPrefix) : undefined;
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
    beatMs: given(opts.natsBeatMs) ? bounded(opts.natsBeatMs, "natsBeatMs", "beatMs") : undefined,
    maxAgeMs,
    maxBytes,
    batchMs,
  };
}

/** The engine's `fanout` option for `role` ("writer" or "edge") from checked options `fo`. */
export const engineFanout = (fo, role, writerUrl) => ({
  role,
  url: fo.url,
  ...(fo.prefix === undefined ? {} : { prefix: fo.prefix }),
  ...(fo.beatMs === undefined ? {} : { beatMs: fo.beatMs }),
  ...(fo.maxAgeMs === undefined ? {} : { maxAgeMs: fo.maxAgeMs }),
  ...(fo.maxBytes === undefined ? {} : { maxBytes: fo.maxBytes }),
  ...(fo.batchMs === undefined ? {} : { batchMs: fo.batchMs }),
  ...(writerUrl ? { writerUrl } : {}),
});
