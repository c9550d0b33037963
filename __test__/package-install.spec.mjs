// The installable package: `npm pack` of the package and of its linux-x64-gnu binary package,
// installed into a fresh folder, used from ESM, CommonJS and type-checked TypeScript (strict,
// isolatedModules), under Node and Bun. The installed loader finds the binary in the platform
// package (the tarball of the main package holds no .node file).
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test, tempDir } from "./harness.mjs";
import { ROOT as root } from "./reference.mjs";
import { packDurableTouch, run } from "./support/pack.mjs";

const bun = join(root, "node_modules", ".bin", "bun");
const tsc = join(root, "node_modules", ".bin", "tsc");
const node = process.env.NODE_BINARY ?? "node";

test("npm pack installs into a fresh folder and works from .mjs, .cjs and .ts under Node and Bun", async () => {
  const packs = tempDir("dt-pack-");
  const { main, binary } = packDurableTouch(packs);
  const tarballs = [main, binary];
  const list = run("tar", ["tzf", main], packs);
  assert.ok(!list.includes(".node"), "the main tarball carries no binary");
  assert.ok(list.includes("package/index.d.ts") && list.includes("package/apps/server/server.mjs") && list.includes("package/bin/durable-touch.mjs"));

  const app = tempDir("dt-app-");
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
  run("npm", ["install", "--ignore-scripts", "--no-audit", "--no-fund", "--silent", ...tarballs], app);

  writeFileSync(
    join(app, "esm.mjs"),
    `import { Store, TouchEngine, keys } from "durable-touch";
import { startServer } from "durable-touch/server";
const store = Store.open(":memory:");
await store.createStream("s", { contentType: "application/json" });
const engine = new TouchEngine(store);
engine.setTouchConfig("s", { enabled: true });
const w = engine.wait({ stream: "s", cursor: "now", keyIds: [keys.tableKeyId("public.t")], interestMode: "coarse", timeoutMs: 5000 });
await store.append("s", [JSON.stringify({ type: "public.t", key: "1", value: { id: 1 }, headers: { operation: "insert" } })]);
const r = await w;
await engine.close();
await store.close();
console.log(JSON.stringify({ touched: r.touched, table: keys.tableKey("public.posts"), server: typeof startServer }));
`
  );
  writeFileSync(
    join(app, "cjs.cjs"),
    `const { Store, keys } = require("durable-touch");
(async () => {
  const store = Store.open(":memory:");
  await store.createStream("s");
  const ack = await store.append("s", ["a", "b"]);
  await store.close();
  console.log(JSON.stringify({ next: String(ack.nextOffset), id: keys.tableKeyId("public.posts") }));
})();
`
  );
  writeFileSync(
    join(app, "typed.ts"),
    `import { Store, TouchEngine, keys, type WaitResult, type StreamInfo, type TouchMeta } from "durable-touch";
import { startServer, type RunningServer } from "durable-touch/server";

export async function main(): Promise<number> {
  const store: Store = Store.open(":memory:");
  const info: StreamInfo = await store.createStream("s", { contentType: "application/json" });
  const engine = new TouchEngine(store, { workers: 1, checkIntervalMs: 100 });
  engine.setTouchConfig("s", { enabled: true });
  const meta: TouchMeta = await engine.meta("s");
  const r: WaitResult = await engine.wait({ stream: "s", cursor: meta.cursor, keyIds: [keys.tableKeyId("public.t")], timeoutMs: 10 });
  const next: bigint = info.nextOffset;
  const server: RunningServer | null = null;
  await engine.close();
  await store.close();
  return (r.touched ? 1 : 0) + Number(next) + (server === null ? 0 : 1) + (typeof startServer === "function" ? 0 : 1);
}
main().then((n) => console.log(JSON.stringify({ n })));
`
  );
  writeFileSync(
    join(app, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        strict: true,
        isolatedModules: true,
        noEmit: true,
        module: "nodenext",
        moduleResolution: "nodenext",
        target: "es2022",
        typeRoots: [join(root, "node_modules", "@types")],
        types: ["node"],
      },
      files: ["typed.ts"],
    })
  );

  const esm = (out) => assert.deepEqual(JSON.parse(out.trim().split("\n").pop()), { touched: true, table: "0266aa40b9d08dc8", server: "function" });
  const cjs = (out) => assert.deepEqual(JSON.parse(out.trim().split("\n").pop()), { next: "2", id: 3117452744 });
  esm(run(node, ["esm.mjs"], app));
  cjs(run(node, ["cjs.cjs"], app));
  run(tsc, ["-p", "tsconfig.json"], app);
  esm(run(bun, ["esm.mjs"], app));
  cjs(run(bun, ["cjs.cjs"], app));
  assert.deepEqual(JSON.parse(run(bun, ["typed.ts"], app).trim()), { n: 0 });
}, { timeout: 120_000 });
