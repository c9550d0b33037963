// Reads a Valgrind memcheck log and splits its errors into ours (a frame in durable-touch's
// .node file) and the runtime's. Exits 1 when any error is ours. Used by scripts/memcheck.sh.
import { readFileSync } from "node:fs";

const log = readFileSync(process.argv[2], "utf8");
const OURS = /durable-touch\.[a-z0-9-]+\.node/;
// An error record starts at a line "==pid== <Kind>" after a blank "==pid== " line and runs
// until the next blank one.
const records = log.split(/\n==\d+== \n/).map((r) => r.replace(/^==\d+== ?/gm, "").trim()).filter(Boolean);
const kinds = [
  ["invalid read", /^Invalid read/],
  ["invalid write", /^Invalid write/],
  ["invalid free", /^Invalid free|^Mismatched free/],
  ["uninitialised", /^(Conditional jump|Use of uninitialised|Syscall param .* uninitialised)/],
  ["definitely lost", /definitely lost in loss record/],
];
const count = { ours: {}, theirs: {} };
const examples = [];
for (const r of records) {
  const kind = kinds.find(([, re]) => re.test(r))?.[0];
  if (!kind) continue;
  const side = OURS.test(r) ? "ours" : "theirs";
  count[side][kind] = (count[side][kind] ?? 0) + 1;
  if (side === "ours" && examples.length < 5) examples.push(r.split("\n").slice(0, 25).join("\n"));
}
const summary = log.match(/ERROR SUMMARY: .*/g)?.pop() ?? "(no summary)";
const leaks = log.match(/definitely lost: .*/g)?.pop() ?? "definitely lost: (no leak summary)";
console.log(`memcheck: ${summary}`);
console.log(`memcheck: ${leaks} (all libraries)`);
console.log(`memcheck: ours   ${JSON.stringify(count.ours)}`);
console.log(`memcheck: theirs ${JSON.stringify(count.theirs)}`);
for (const e of examples) console.log(`\n--- ours ---\n${e}`);
process.exit(Object.keys(count.ours).length > 0 ? 1 : 0);
