// What the shipped wasm is made of: its code by crate and its largest functions, read from a build that kept the
// function names (`wasm-opt -Oz -g`: the same code as the package, whose names `-Oz` alone strips), and its data.
// `npm run bench` prints it under the gzipped size; `node bench/wasm-size.mjs FILE.wasm` prints it for any build.
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";

/** Sections, function bodies with their names, and data segments of a wasm binary. */
function parse(bytes) {
  let p = 8;
  const leb = () => {
    let result = 0, shift = 0, byte;
    do {
      byte = bytes[p++];
      result += (byte & 0x7f) * 2 ** shift;
      shift += 7;
    } while (byte & 0x80);
    return result;
  };
  const name = () => {
    const n = leb();
    const s = bytes.subarray(p, p + n).toString("utf8");
    p += n;
    return s;
  };
  let imported = 0;
  const bodies = [];
  const names = new Map();
  let dataBytes = 0;
  while (p < bytes.length) {
    const id = bytes[p++];
    const size = leb();
    const end = p + size;
    if (id === 2) { // imports: functions among them take the first indices
      for (let i = leb(); i > 0; i--) {
        name();
        name();
        const kind = bytes[p++];
        if (kind === 0) { leb(); imported++; }
        else if (kind === 1) { p++; const flags = leb(); leb(); if (flags & 1) leb(); }
        else if (kind === 2) { const flags = leb(); leb(); if (flags & 1) leb(); }
        else if (kind === 3) { p += 2; }
        else if (kind === 4) { p++; leb(); }
      }
    } else if (id === 10) {
      for (let i = leb(), index = imported; i > 0; i--, index++) {
        const n = leb();
        bodies.push({ index, start: p, size: n });
        p += n;
      }
    } else if (id === 11) {
      dataBytes += size;
    } else if (id === 0 && name() === "name") {
      while (p < end) {
        const sub = bytes[p++];
        const length = leb();
        const subEnd = p + length;
        if (sub === 1) for (let i = leb(); i > 0; i--) { const index = leb(); names.set(index, name()); }
        p = subEnd;
      }
    }
    p = end;
  }
  return { bodies: bodies.map((b) => ({ ...b, name: names.get(b.index) ?? `func[${b.index}]` })), dataBytes };
}

/** The crate a (demangled) function belongs to: of `<T as Trait>::f`, T's; closures and generics by their path. */
export function crateOf(fn) {
  const path = fn.replace(/^<+/, "").replace(/^(&(mut )?|dyn |\*(const|mut) )+/, "");
  const m = /^([A-Za-z_][A-Za-z0-9_]*)(\[[0-9a-f]+\])?::/.exec(path);
  return m ? m[1] : "(other)";
}

/** Code bytes by crate and the largest functions of a wasm build with names. */
export function wasmContributors(path, { crates = 12, functions = 12 } = {}) {
  const bytes = readFileSync(path);
  const { bodies, dataBytes } = parse(bytes);
  const code = bodies.reduce((n, b) => n + b.size, 0);
  const byCrate = new Map();
  for (const b of bodies) {
    const c = crateOf(b.name);
    const entry = byCrate.get(c) ?? { crate: c, bytes: 0, functions: 0, parts: [] };
    entry.bytes += b.size;
    entry.functions++;
    entry.parts.push(bytes.subarray(b.start, b.start + b.size));
    byCrate.set(c, entry);
  }
  const top = [...byCrate.values()].sort((a, b) => b.bytes - a.bytes).slice(0, crates).map(({ parts, ...e }) => ({
    ...e,
    // Each crate's code compressed on its own: an upper bound of what it adds to the gzipped wasm.
    gzip_bytes: gzipSync(Buffer.concat(parts), { level: 9 }).length,
    share: Math.round((e.bytes / code) * 1000) / 10,
  }));
  const largest = [...bodies].sort((a, b) => b.size - a.size).slice(0, functions)
    .map((b) => ({ name: b.name.replace(/::h[0-9a-f]{16}$/, ""), bytes: b.size }));
  return { code_bytes: code, data_bytes: dataBytes, functions: bodies.length, crates: top, largest };
}

/** The contributors as lines for a report. */
export function contributorLines(c) {
  const lines = [`code ${c.code_bytes} B in ${c.functions} functions, data ${c.data_bytes} B (raw, before gzip)`,
    "code by crate (raw B, share of code, gzipped alone):"];
  for (const e of c.crates) lines.push(`  ${e.crate.padEnd(22)} ${String(e.bytes).padStart(8)}  ${String(e.share).padStart(5)}%  ${String(e.gzip_bytes).padStart(7)}`);
  lines.push("largest functions (raw B):");
  for (const f of c.largest) lines.push(`  ${String(f.bytes).padStart(8)}  ${f.name.slice(0, 110)}`);
  return lines;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  if (!process.argv[2]) {
    console.error("usage: node bench/wasm-size.mjs FILE.wasm   (a build with its name section, e.g. wasm-opt -Oz -g)");
    process.exit(2);
  }
  console.log(contributorLines(wasmContributors(process.argv[2])).join("\n"));
}
