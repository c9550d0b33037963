// Runs __test__/support/sqlite-script.mjs through the reference's own adapter
// (sqlite/adapter.ts → bun:sqlite) and prints the encoded results.
import { output, SRC, TMP } from "./common.ts";
import { runScript } from "../support/sqlite-script.mjs";

const { openSqliteDatabase } = await import(`${SRC}/sqlite/adapter.ts`);
output(runScript(openSqliteDatabase, TMP));
