// Preloaded by bench/density.mjs into every server it measures (`node --import` / `bun --preload`):
// a line "mem" on the process's stdin collects garbage (Node with --expose-gc, Bun.gc(true)) and
// prints one line `DENSITY-MEM {process.memoryUsage()}` on its stdout. Nothing else.
let pending = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (d) => {
  pending += d;
  let nl;
  while ((nl = pending.indexOf("\n")) >= 0) {
    const line = pending.slice(0, nl).trim();
    pending = pending.slice(nl + 1);
    if (line !== "mem") continue;
    if (typeof globalThis.Bun !== "undefined") globalThis.Bun.gc(true);
    else if (typeof globalThis.gc === "function") globalThis.gc();
    process.stdout.write(`DENSITY-MEM ${JSON.stringify(process.memoryUsage())}\n`);
  }
});
process.stdin.unref?.(); // the server keeps the process alive, not this
