// Shared by the reference scripts: input, output, and where the reference lives.
import { readFileSync } from "node:fs";

export const SRC = process.env.REFERENCE_SRC!;
export const TMP = process.env.REF_TMP!;

export function input<T = any>(): T {
  return JSON.parse(readFileSync(process.env.REF_INPUT!, "utf8"), (_, v) =>
    v && typeof v === "object" && typeof v.$bigint === "string" ? BigInt(v.$bigint) : v
  );
}

export function output(value: unknown): void {
  process.stdout.write(JSON.stringify(value, (_, v) => (typeof v === "bigint" ? { $bigint: v.toString() } : v)));
}
