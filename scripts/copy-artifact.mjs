// Copies the local build (durable-touch.<platform>.node) into its per-platform package under
// npm/, ready for `npm pack` / `npm publish` of that package.
import { copyFileSync, existsSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const file = "durable-touch.linux-x64-gnu.node";
const from = join(root, file);
if (!existsSync(from)) {
  console.error(`${file} not found: run npm run build first`);
  process.exit(1);
}
copyFileSync(from, join(root, "npm", "linux-x64-gnu", file));
console.log(`copied ${file} to npm/linux-x64-gnu/`);
