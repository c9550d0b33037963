// Reading a `bun build` output chunk (ESM) for `durable-touch swap` on @prisma/streams-local:
// a tokenizer (strings, template literals, comments and regular expressions are skipped as
// such, so nothing inside them is taken for code), the chunk's module regions (bun marks each
// by a `// src/<path>.ts` line comment at column 0 and top level; one module can be split over
// several regions), the top-level statements of each region with the names they declare, and
// the identifiers the rest of the chunk references.
//
// This is not a JavaScript parser. It reads what bun prints: one top-level statement per
// line group, starting at column 0, with nested code indented. Anything it cannot classify is
// reported as such ("other" statements), and the swap refuses a module that has any; the
// chunk it is used on is pinned by its hash, and the tests hold the scan to that chunk.

/** Keywords after which a `/` starts a regular expression, not a division. */
const REGEX_AFTER_WORD = new Set(["return", "typeof", "instanceof", "in", "of", "new", "delete", "void", "throw", "case", "do", "else", "yield", "await"]);
const ID = /[A-Za-z_$\u0080-\uffff][\w$\u0080-\uffff]*/y;
const NUM = /(?:0[xXbBoO][0-9a-fA-F_]+n?|(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][+-]?\d+)?n?)/y;
const MARKER = /^\/\/ (src\/[^\s]+\.ts)$/;

/**
 * Tokens of `text`: `{ type, value, start, end, depth, col0 }`, where `type` is "id", "num",
 * "str", "tpl" (a template literal's text parts), "regex", "priv" (`#name`) or "punc", `depth`
 * is how many brackets ((, [, {, `${`) are open before the token and `col0` says it starts a
 * line. Also the line comments at column 0 and depth 0 that mark a module (`markers`). Throws
 * on text it cannot read (an unterminated string, comment, template or regular expression, or
 * unbalanced brackets).
 */
export function tokenize(text) {
  const tokens = [];
  const markers = [];
  const stack = [];
  let i = 0;
  let prev = null;
  const n = text.length;
  const fail = (what) => {
    const line = text.slice(0, i).split("\n").length;
    throw new Error(`cannot read the chunk: ${what} at line ${line}`);
  };
  const push = (type, value, start, end) => {
    const t = { type, value, start, end, depth: stack.length, col0: start === 0 || text.charCodeAt(start - 1) === 10 };
    tokens.push(t);
    prev = t;
    return t;
  };
  const regexAllowed = () => {
    if (prev === null) return true;
    if (prev.type === "id") return REGEX_AFTER_WORD.has(prev.value);
    if (prev.type === "punc") return prev.value !== ")" && prev.value !== "]" && prev.value !== "}" && prev.value !== "++" && prev.value !== "--";
    if (prev.type === "tpl") return text.slice(prev.end - 2, prev.end) === "${"; // an expression starts
    return false;
  };
  /** Scans template text from `i` (just after ` or }) to its end or to `${`. */
  const templatePart = (start) => {
    while (i < n) {
      const c = text.charCodeAt(i);
      if (c === 92) i += 2; // backslash
      else if (c === 96) {
        i++;
        push("tpl", null, start, i);
        return;
      } else if (c === 36 && text.charCodeAt(i + 1) === 123) {
        i += 2;
        push("tpl", null, start, i);
        stack.push("${");
        return;
      } else i++;
    }
    fail("an unterminated template literal");
  };
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === 32 || c === 9 || c === 10 || c === 13) {
      i++;
      continue;
    }
    const start = i;
    if (c === 47 && text.charCodeAt(i + 1) === 47) {
      const eol = text.indexOf("\n", i);
      i = eol < 0 ? n : eol;
      if (stack.length === 0 && (start === 0 || text.charCodeAt(start - 1) === 10)) {
        const m = MARKER.exec(text.slice(start, i).trimEnd());
        if (m) markers.push({ path: m[1], start, end: i });
      }
      continue;
    }
    if (c === 47 && text.charCodeAt(i + 1) === 42) {
      const close = text.indexOf("*/", i + 2);
      if (close < 0) fail("an unterminated comment");
      i = close + 2;
      continue;
    }
    if (c === 39 || c === 34) {
      i++;
      while (i < n && text.charCodeAt(i) !== c) {
        const d = text.charCodeAt(i);
        if (d === 92) i += 2;
        else if (d === 10) fail("an unterminated string");
        else i++;
      }
      if (i >= n) fail("an unterminated string");
      i++;
      push("str", null, start, i);
      continue;
    }
    if (c === 96) {
      i++;
      templatePart(start);
      continue;
    }
    ID.lastIndex = i;
    let m = ID.exec(text);
    if (m) {
      i += m[0].length;
      push("id", m[0], start, i);
      continue;
    }
    if (c === 35) {
      ID.lastIndex = i + 1;
      m = ID.exec(text);
      if (m) {
        i += 1 + m[0].length;
        push("priv", m[0], start, i);
        continue;
      }
    }
    NUM.lastIndex = i;
    m = c === 46 && !(text.charCodeAt(i + 1) >= 48 && text.charCodeAt(i + 1) <= 57) ? null : NUM.exec(text);
    if (m && m[0].length > 0) {
      i += m[0].length;
      push("num", null, start, i);
      continue;
    }
    if (c === 47 && regexAllowed()) {
      i++;
      let inClass = false;
      for (;;) {
        if (i >= n) fail("an unterminated regular expression");
        const d = text.charCodeAt(i);
        if (d === 10) fail("an unterminated regular expression");
        if (d === 92) i += 2;
        else if (d === 91) (inClass = true), i++;
        else if (d === 93) (inClass = false), i++;
        else if (d === 47 && !inClass) {
          i++;
          break;
        } else i++;
      }
      ID.lastIndex = i;
      const flags = ID.exec(text);
      if (flags) i += flags[0].length;
      push("regex", null, start, i);
      continue;
    }
    // Punctuators: the few multi-character ones the scan looks at, else one character.
    const three = text.slice(i, i + 3);
    const two = text.slice(i, i + 2);
    if (three === "...") {
      i += 3;
      push("punc", "...", start, i);
      continue;
    }
    if ((two === "?." && !(text.charCodeAt(i + 2) >= 48 && text.charCodeAt(i + 2) <= 57)) || two === "=>" || two === "++" || two === "--") {
      i += 2;
      push("punc", two, start, i);
      continue;
    }
    const ch = text[i];
    if (ch === "(" || ch === "[" || ch === "{") {
      i++;
      push("punc", ch, start, i);
      stack.push(ch);
      continue;
    }
    if (ch === ")" || ch === "]" || ch === "}") {
      const open = stack.pop();
      if (open === "${" && ch === "}") {
        i++;
        templatePart(start);
        continue;
      }
      if (open !== { ")": "(", "]": "[", "}": "{" }[ch]) fail(`an unbalanced ${ch}`);
      i++;
      const t = push("punc", ch, start, i);
      t.depth = stack.length; // a closing bracket sits at the depth it returns to
      continue;
    }
    i++;
    push("punc", ch, start, i);
  }
  if (stack.length > 0) fail(`${stack.length} unclosed bracket(s)`);
  return { tokens, markers };
}

/**
 * The chunk's regions: `{ path, start, end }` from each marker to the next (the last to the
 * end of the text), in order. Text before the first marker is no module's.
 */
export function regionsOf(text, markers) {
  return markers.map((m, k) => ({ path: m.path, start: m.start, end: k + 1 < markers.length ? markers[k + 1].start : text.length }));
}

/**
 * The top-level statements of the chunk: `{ kind, names, pattern, start, end, first, stop }`
 * where `kind` is "import", "export", "var" (also let/const), "function", "class" or "other",
 * `names` the bindings it declares (an import's are left out: `names` is empty for it),
 * `pattern` says a declaration destructures (its names are not read), `start`/`end` its text
 * range and `first`/`stop` its tokens' range. A statement starts at a token at depth 0 and
 * column 0 that is not a closing bracket (bun prints top-level statements so) and runs to the
 * next one; a `var` statement's declarators are split at the commas at depth 0.
 */
export function topLevelStatements(tokens) {
  const starts = [];
  for (let k = 0; k < tokens.length; k++) {
    const t = tokens[k];
    if (t.depth === 0 && t.col0 && !(t.type === "punc" && (t.value === ")" || t.value === "]" || t.value === "}"))) starts.push(k);
  }
  const statements = [];
  for (let s = 0; s < starts.length; s++) {
    const first = starts[s];
    const stop = s + 1 < starts.length ? starts[s + 1] : tokens.length; // exclusive
    const last = tokens[stop - 1];
    const stmt = { kind: "other", names: /** @type {string[]} */ ([]), start: tokens[first].start, end: last.end, first, stop, pattern: false };
    const t = tokens[first];
    const word = t.type === "id" ? t.value : null;
    if (word === "import") stmt.kind = tokens[first + 1]?.type === "punc" && tokens[first + 1].value === "(" ? "other" : "import";
    else if (word === "export") stmt.kind = "export";
    else if (word === "var" || word === "let" || word === "const") {
      stmt.kind = "var";
      // Declarators: a name, then its initializer up to a `,` or `;` at depth 0.
      let k = first + 1;
      for (;;) {
        const name = tokens[k];
        if (!name || k >= stop) break;
        if (name.type !== "id") {
          stmt.pattern = true; // a destructuring pattern: its names are not read
          break;
        }
        stmt.names.push(name.value);
        k++;
        while (k < stop && !(tokens[k].depth === 0 && tokens[k].type === "punc" && (tokens[k].value === "," || tokens[k].value === ";"))) k++;
        if (k >= stop || tokens[k].value === ";") break;
        k++;
      }
    } else if (word === "function" || word === "class" || (word === "async" && tokens[first + 1]?.value === "function")) {
      let k = word === "async" ? first + 2 : first + 1;
      if (tokens[k]?.type === "punc" && tokens[k].value === "*") k++;
      if (tokens[k]?.type === "id") {
        stmt.kind = word === "class" ? "class" : "function";
        stmt.names.push(tokens[k].value);
      }
    }
    statements.push(stmt);
  }
  return statements;
}

/** Identifiers of tokens in [from, to) that are read as names (not after `.` or `?.`). */
export function referencedNames(tokens, from = 0, to = tokens.length, into = new Set()) {
  for (let k = from; k < to; k++) {
    const t = tokens[k];
    if (t.type !== "id") continue;
    const p = tokens[k - 1];
    if (p && p.type === "punc" && (p.value === "." || p.value === "?.")) continue;
    into.add(t.value);
  }
  return into;
}

/** Index of the first token starting at or after `pos` (binary search). */
export function tokenAt(tokens, pos) {
  let lo = 0;
  let hi = tokens.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (tokens[mid].start < pos) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
