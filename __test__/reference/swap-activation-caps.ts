// Template activation caps and the activation rate limit through `touch/templates/activate`
// of one copy of the reference server (its src/ at $APP_SRC, swapped or not). Each scenario is
// a stream whose profile sets small `templates.maxActiveTemplatesPerStream` /
// `maxActiveTemplatesPerEntity` / `activationRateLimitPerMinute`, then a sequence of
// activation calls (a few ms apart, so least-recently-used order is by call). Once a stream's
// tokens are spent, activating each template alone shows which are active (`activated`: no
// token needed) and which are not (`rate_limited`), without changing which are active.
// Output: { [scenario]: [{ call, status, activated: ids, denied, limits } | { meta }] }.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { output } from "./common.ts";
import { K, exit, ok, sleep, startServer, touchStream } from "./swap-server.ts";

const root = mkdtempSync(join(tmpdir(), "dt-swap-caps-"));
const srv = await startServer(root);

type Decl = { entity: string; fields: Array<{ name: string; encoding: string }> };
const t = (entity: string, field: string): Decl => ({ entity, fields: [{ name: field, encoding: "string" }] });
const id = (d: Decl) => K.templateIdFor(d.entity, d.fields.map((f) => f.name));

async function activate(stream: string, call: string, templates: Decl[]) {
  await sleep(5); // a distinct last-seen millisecond per call
  const r = await srv.call(`/v1/stream/${stream}/touch/templates/activate`, "POST", { templates });
  const b = r.body ?? {};
  return {
    call,
    status: r.status,
    activated: Array.isArray(b.activated) ? b.activated.map((a: any) => a.templateId) : b,
    denied: b.denied,
    limits: b.limits,
  };
}
const activeTemplates = async (stream: string) => ({ call: "meta", activeTemplates: ok(await srv.call(`/v1/stream/${stream}/touch/meta`), "meta").body.activeTemplates });
/** Activates each template alone (the stream's tokens must be spent): which are active. */
async function probe(stream: string, all: Decl[]) {
  const out: Record<string, string> = {};
  for (const d of all) {
    const r = await activate(stream, "probe", [d]);
    out[id(d)] = r.activated.includes?.(id(d)) ? "active" : (r.denied?.[0]?.reason ?? `status ${r.status}`);
  }
  return { call: "probe", states: out };
}

const result: Record<string, unknown[]> = {};

// Per-entity cap 2, per-stream cap 3, 6 activations a minute.
{
  const s = "caps";
  await touchStream(srv, s, { templates: { maxActiveTemplatesPerEntity: 2, maxActiveTemplatesPerStream: 3, activationRateLimitPerMinute: 6 } });
  const [a1, a2, a3] = ["a", "b", "c"].map((f) => t("public.e1", f));
  const [b1, b2, b3] = ["x", "y", "z"].map((f) => t("public.e2", f));
  const steps = [];
  steps.push(await activate(s, "a1", [a1]));
  steps.push(await activate(s, "a2", [a2]));
  steps.push(await activate(s, "a3 (over the entity cap: evicts a1)", [a3]));
  steps.push(await activeTemplates(s));
  // Three of one entity in one call: the entity cap evicts one of them (B11), the stream cap
  // then evicts the least recently used other template.
  steps.push(await activate(s, "b1, b2, b3 in one call", [b1, b2, b3]));
  steps.push(await activeTemplates(s));
  steps.push(await activate(s, "a1 again (tokens spent)", [a1]));
  steps.push(await activate(s, "a3 again (active: no token)", [a3]));
  steps.push(await probe(s, [a1, a2, a3, b1, b2, b3]));
  steps.push(await activeTemplates(s));
  result[s] = steps;
}

// Only a per-stream cap of 2, no rate limit (0): three new templates in one call, then one
// more in a later call.
{
  const s = "stream-cap";
  await touchStream(srv, s, { templates: { maxActiveTemplatesPerStream: 2, activationRateLimitPerMinute: 0 } });
  const ds = ["p", "q", "r", "s"].map((f, i) => t(`public.e${i}`, f));
  const steps = [];
  steps.push(await activate(s, "p, q, r in one call", ds.slice(0, 3)));
  steps.push(await activeTemplates(s));
  steps.push(await activate(s, "s", [ds[3]]));
  steps.push(await activeTemplates(s));
  steps.push(await activate(s, "p again", [ds[0]]));
  steps.push(await activeTemplates(s));
  result[s] = steps;
}

// The rate limit alone: 3 a minute, 2 then 3 new templates, then an active one again.
{
  const s = "rate";
  await touchStream(srv, s, { templates: { activationRateLimitPerMinute: 3 } });
  const ds = ["f1", "f2", "f3", "f4", "f5"].map((f) => t("public.r", f));
  const steps = [];
  steps.push(await activate(s, "f1, f2", ds.slice(0, 2)));
  steps.push(await activate(s, "f3, f4, f5 (one token left)", ds.slice(2)));
  steps.push(await activate(s, "f1 again (active: no token)", [ds[0]]));
  steps.push(await activate(s, "an invalid encoding, f4 (still limited)", [{ entity: "public.r", fields: [{ name: "g", encoding: "float" }] }, ds[3]]));
  steps.push(await activeTemplates(s));
  result[s] = steps;
}

// A fractional entity cap (1.5, as the profile accepts it): two templates of one entity.
{
  const s = "fractional";
  await touchStream(srv, s, { templates: { maxActiveTemplatesPerEntity: 1.5, activationRateLimitPerMinute: 0 } });
  const [u, v] = ["u", "v"].map((f) => t("public.f", f));
  const steps = [];
  steps.push(await activate(s, "u", [u]));
  steps.push(await activate(s, "v", [v]));
  steps.push(await activeTemplates(s));
  result[s] = steps;
}

await srv.close();
rmSync(root, { recursive: true, force: true });
output(result);
exit();
