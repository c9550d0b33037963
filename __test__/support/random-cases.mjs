// Deterministic random inputs for the differential tests (mulberry32, no dependencies).

export function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const r = {
    next,
    int: (n) => Math.floor(next() * n),
    pick: (xs) => xs[Math.floor(next() * xs.length)],
    chance: (p) => next() < p,
    /** An integer in [lo, hi]. */
    range: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
  };
  return r;
}

// Characters that exercise UTF-8 widths, UTF-16 order (BMP above surrogates vs astral),
// JS whitespace, NUL and lone surrogates.
const ALPHABET = [
  ..."abcxyzABCXYZ019_-.: ",
  "é", "ß", "ø", "Ж", "中", "文", "！", "ｚ", "\uFF01", "\uE000", "\uFFFD", "😀", "𝄞", "🙂",
  "\u00A0", "\u2028", "\u3000", "\uFEFF", "\u202F", "\u000B", "\t", "\n", "\u0000", "\ud800", "\udfff", "İ", "Σ",
];

export function randomString(r, maxLen = 8, alphabet = ALPHABET) {
  const n = r.int(maxLen + 1);
  let s = "";
  for (let i = 0; i < n; i++) s += r.pick(alphabet);
  return s;
}

export function randomName(r) {
  const plain = ["id", "tenantId", "status", "userId", "title", "a", "b", "B", "_x", "0", "1", "10", "__proto__", "constructor"];
  return r.chance(0.5) ? r.pick(plain) : randomString(r, 6) || "z";
}

export function randomEntity(r) {
  const plain = ["public.posts", "public.users", "User", "public.e0", "schema.Ωmega", " padded ", "public.\u4e2d"];
  return r.chance(0.4) ? r.pick(plain) : randomString(r, 12);
}

function randomDouble(r) {
  const buf = new DataView(new ArrayBuffer(8));
  buf.setUint32(0, (r.next() * 2 ** 32) >>> 0);
  buf.setUint32(4, (r.next() * 2 ** 32) >>> 0);
  return buf.getFloat64(0);
}

export function randomNumber(r) {
  switch (r.int(10)) {
    case 0: return r.int(1000) - 500;
    case 1: return r.pick([0, -0, 1e21, 1e20, 1e-7, 1e-6, 123e-20, 2 ** 53, 2 ** 53 + 2, -(2 ** 63), 5e-324, 1.7976931348623157e308, 0.1 + 0.2, Infinity, -Infinity, NaN]);
    case 2: return (r.next() - 0.5) * 10 ** (r.int(40) - 20);
    case 3: return Math.round((r.next() - 0.5) * 10 ** r.int(25));
    case 4: return Number((r.next() * 1000).toFixed(r.int(6)));
    default: {
      const d = randomDouble(r);
      return d;
    }
  }
}

const MONTHS = ["Jan", "feb", "MARCH", "apr", "May", "june", "Jul", "aug", "Sept", "oct", "Nov", "december", "junk"];
const DAYS = ["Mon", "tue", "Wednesday", "thu", "Fri", "sat", "Sun"];
const ZONES = ["Z", "z", "UTC", "GMT", "UT", "EST", "edt", "CST", "mdt", "PST", "GMT+0100", "GMT-8", "+01:00", "-0530", "+1", "-12:00", "+14", "(CET)", "(Central (European) Time)", "PDT"];

function pad(n, w) {
  return String(n).padStart(w, "0");
}

export function randomDateString(r) {
  const y = r.pick([1970, 2000, 2024, 1999, 49, 50, 0, 99, 100, 275760, 10000, 1]) + (r.chance(0.3) ? r.int(50) : 0);
  const mo = r.int(14);
  const d = r.int(33);
  const h = r.int(26);
  const mi = r.int(61);
  const s = r.int(61);
  const frac = "0123456789".slice(0, 1 + r.int(10));
  switch (r.int(12)) {
    case 0: return `${pad(y, 4)}-${pad(mo, 2)}-${pad(d, 2)}`;
    case 1: return `${pad(y, 4)}-${pad(mo, 2)}-${pad(d, 2)}T${pad(h, 2)}:${pad(mi, 2)}${r.chance(0.7) ? `:${pad(s, 2)}` : ""}${r.chance(0.5) ? `.${frac}` : ""}${r.chance(0.6) ? r.pick(["Z", "+01:00", "-05:30", "+0100", "+24:00", "-00:00", "+1", "z"]) : ""}`;
    case 2: return `${r.pick(["+", "-"])}${pad(y, 6)}-${pad(mo, 2)}-${pad(d, 2)}T${pad(h, 2)}:${pad(mi, 2)}:${pad(s, 2)}Z`;
    case 3: return `${r.pick(MONTHS)} ${d} ${y}${r.chance(0.5) ? ` ${h}:${pad(mi, 2)}${r.chance(0.5) ? `:${pad(s, 2)}` : ""}` : ""}${r.chance(0.4) ? ` ${r.pick(["am", "PM", "a.m."])}` : ""}${r.chance(0.4) ? ` ${r.pick(ZONES)}` : ""}`;
    case 4: return `${r.pick(DAYS)}, ${pad(d, 2)} ${r.pick(MONTHS)} ${y} ${pad(h, 2)}:${pad(mi, 2)}:${pad(s, 2)} ${r.pick(ZONES)}`;
    case 5: return `${mo}/${d}/${y}${r.chance(0.5) ? ` ${h}:${pad(mi, 2)}` : ""}`;
    case 6: return `${y}/${mo}/${d}`;
    case 7: return String(r.int(r.chance(0.5) ? 100 : 100000));
    case 8: return `${pad(y, 4)}-${pad(mo, 2)}-${pad(d, 2)} ${pad(h, 2)}:${pad(mi, 2)}:${pad(s, 2)}${r.chance(0.5) ? `.${frac}` : ""}`;
    case 9: {
      // Token soup.
      const parts = ["2024", "-", "01", ":", "T", " ", "12", ".", "5", "Jan", "pm", "Z", "+", "0800", "(", ")", "GMT", ",", "/", "x", "1", "99", "\u00A0", "\u2028", "\u202F", "\u000B", "\u000C", "am", "EST", "Sept", "(x)", "T", "::", "24"];
      let out = "";
      const n = 1 + r.int(8);
      for (let i = 0; i < n; i++) out += r.pick(parts);
      return out;
    }
    case 10: return `${r.chance(0.5) ? "  " : ""}${d} ${r.pick(MONTHS)}${r.chance(0.5) ? "," : ""} ${y}${r.chance(0.5) ? " " : ""}`;
    default: return `${pad(y, 4)}-${pad(mo, 2)}-${pad(d, 2)}T${pad(h, 2)}:${pad(mi, 2)}:${pad(s, 2)}.${frac}${r.pick(["", "Z", "+05:45"])}`;
  }
}

/** Values of every JSON type (and a few JS ones: undefined, -0, NaN, bigint) as JSON-safe encodings. */
export function randomArgValue(r) {
  switch (r.int(11)) {
    case 0: return null;
    case 1: return { $special: "undefined" };
    case 2: return r.chance(0.5);
    case 3: {
      const n = randomNumber(r);
      if (Object.is(n, -0)) return { $special: "-0" };
      if (Number.isNaN(n)) return { $special: "NaN" };
      if (!Number.isFinite(n)) return { $special: n > 0 ? "Infinity" : "-Infinity" };
      return n;
    }
    case 4: return randomString(r, 10);
    case 5: return r.pick([" -12 ", "007", "0", "-0", "12", "1e3", "+5", " 42", "9223372036854775808", "-", "", "0x10", "1.0", "\u00A012\u2028", "true", "false"]);
    case 6: return randomDateString(r);
    case 7: return r.chance(0.5) ? [1, "a"] : { a: 1 };
    case 8: return BigInt(r.int(1e9)) * (r.chance(0.5) ? 10n ** 12n : -1n);
    case 9: return String(randomNumber(r));
    default: return randomDateString(r);
  }
}
