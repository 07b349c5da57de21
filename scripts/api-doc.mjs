#!/usr/bin/env node
// Writes docs/API.md, the API reference, from the declarations the package ships: each subpath of package.json's
// "exports" with types (pkg/loci.d.ts, which wasm-bindgen makes from the doc comments in src/web*, and
// adapters/*.d.ts), read with the TypeScript compiler the repository pins. `--check` writes nothing and fails when
// the committed file differs, so that a changed API cannot ship with a stale reference. Needs `npm run build` first.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "docs", "API.md");

/** A doc comment as Markdown: paragraphs joined into lines; `@param` kept as a line, `@returns` left to the type. */
function docOf(node) {
  const parts = [];
  for (const doc of ts.getJSDocCommentsAndTags(node).filter(ts.isJSDoc)) {
    const text = ts.getTextOfJSDocComment(doc.comment);
    if (text) parts.push(text);
    for (const tag of doc.tags ?? []) {
      if (ts.isJSDocParameterTag(tag)) {
        parts.push(`Parameter \`${tag.name.getText()}\`: ${ts.getTextOfJSDocComment(tag.comment)?.replace(/^- /, "") ?? ""}`);
      }
    }
  }
  return parts.join("\n\n").split(/\n\s*\n/).map((p) => p.replace(/\s*\n\s*/g, " ").trim()).filter(Boolean).join("\n\n");
}

/** A declaration's own text, without its doc comment or `export declare`; one line unless it holds comments. */
function textOf(node, sf) {
  const text = node.getText(sf).replace(/^export\s+(declare\s+)?(default\s+)?/, "").replace(/;$/, "");
  if (text.includes("/*") || text.includes("//")) {
    // Comments inside (a callback's fields): keep the lines, re-indented from the declaration's own column.
    const indent = sf.getLineAndCharacterOfPosition(node.getStart(sf)).character;
    return { block: text.split("\n").map((l, i) => (i === 0 ? l : l.replace(new RegExp(`^ {0,${indent}}`), ""))).join("\n") };
  }
  return { line: text.replace(/\s+/g, " ").replace(/\(\s/g, "(").replace(/\s\)/g, ")").replace(/= \| /, "= ")
    // wasm-bindgen's default export is its `__wbg_init`; an app imports it as `init`.
    .replace(/^function __wbg_init\s*\(/, "function init(") };
}

const code = (t) => (t.line !== undefined ? `\`${t.line.replace(/`/g, "\\`")}\`` : null);
const block = (t) => `\`\`\`ts\n${t.block ?? t.line}\n\`\`\``;

/** One member of a class or interface: its signature, then its doc. */
function member(node, sf, signatureFrom = node) {
  const t = textOf(signatureFrom, sf);
  const doc = docOf(node);
  if (t.line !== undefined) return `- ${code(t)}${doc ? ` — ${doc.replace(/\n\n/g, " ")}` : ""}`;
  return `- ${doc || "(undocumented)"}\n\n${block(t).replace(/^/gm, "  ")}`;
}

const heritage = (node, sf) => (node.heritageClauses ?? []).map((h) => ` ${h.getText(sf)}`).join("");

// GitHub's heading anchors: lower case, punctuation dropped, a repeat numbered (`memoryPrompt`, `MemoryPrompt`;
// `loci/sync`'s `Memory` after `loci`'s): one count for the whole page.
const seen = new Map();

function moduleSections(file) {
  const sf = ts.createSourceFile(file, readFileSync(join(root, file), "utf8"), ts.ScriptTarget.Latest, true);
  const statements = sf.statements.filter((s) => !ts.isImportDeclaration(s));
  const name = (s) => (s.name ? s.name.text : "default");
  const classes = new Set(statements.filter(ts.isClassDeclaration).map(name));
  // An interface beside a class of its name merges into it (loci.d.ts: the options arguments that may be left out):
  // its members' signatures replace the class's, and it is not listed on its own.
  const merged = new Map();
  for (const s of statements) {
    if (ts.isInterfaceDeclaration(s) && classes.has(name(s))) {
      for (const m of s.members) if (m.name) merged.set(`${name(s)}.${m.name.getText(sf)}`, m);
    }
  }
  // The calls first (classes, functions), then the types they take and give, each group in the file's order.
  const calls = statements.filter((s) => ts.isClassDeclaration(s) || ts.isFunctionDeclaration(s));
  const types = statements.filter((s) => (ts.isInterfaceDeclaration(s) && !classes.has(name(s))) || ts.isTypeAliasDeclaration(s));
  const isDefault = (s) => s.modifiers?.some((m) => m.kind === ts.SyntaxKind.DefaultKeyword);
  const title = (s) => (isDefault(s) ? "init (default export)" : name(s));
  const sections = [];
  for (const s of [...calls, ...types]) {
    const lines = [`### ${title(s)}`, ""];
    const doc = docOf(s);
    if (ts.isClassDeclaration(s)) {
      lines.push(`\`class ${name(s)}${heritage(s, sf)}\``, "");
      if (doc) lines.push(doc, "");
      for (const m of s.members) {
        if (ts.getCombinedModifierFlags(m) & ts.ModifierFlags.Private) continue;
        lines.push(member(m, sf, (m.name && merged.get(`${name(s)}.${m.name.getText(sf)}`)) || m));
      }
    } else if (ts.isInterfaceDeclaration(s)) {
      lines.push(`\`interface ${name(s)}${heritage(s, sf)}\``, "");
      if (doc) lines.push(doc, "");
      if (name(s) === "InitOutput") {
        // The wasm module's raw exports: internal, and their names (hashed closures) change with every build.
        lines.push("What `init()` resolves to: the wasm module's raw exports, for loci's own glue code only.");
      } else {
        for (const m of s.members) lines.push(member(m, sf));
      }
    } else {
      if (doc) lines.push(doc, "");
      lines.push(block(textOf(s, sf)));
    }
    sections.push({ name: title(s), text: lines.join("\n").trimEnd() });
  }
  return sections;
}

/** A module's reference; with `base` (another module's sections), only what it adds: new declarations, and of one
 * that `base` has too (a class with more members, an interface merged with more fields), the lines it adds. */
function renderModule(specifier, file, base = null, intro = "") {
  let sections = moduleSections(file);
  if (base) {
    const known = new Map(base.map((s) => [s.name, s.text]));
    sections = sections.flatMap((s) => {
      if (!known.has(s.name)) return [s];
      const had = new Set(known.get(s.name).split("\n"));
      const lines = s.text.split("\n");
      const added = lines.slice(2).filter((l) => l.trim() && !had.has(l));
      return added.length ? [{ name: s.name, text: [...lines.slice(0, 2), `(more than in \`loci\`)`, "", ...added].join("\n") }] : [];
    });
    // Interfaces merged across declarations (OpenOptions) appear twice: one section each.
    const names = new Set();
    sections = sections.filter((s) => !names.has(s.text) && names.add(s.text));
  }
  const anchor = (n) => {
    const slug = n.toLowerCase().replace(/[^a-z0-9 _-]/g, "").replace(/ /g, "-");
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    return count ? `${slug}-${count}` : slug;
  };
  return [
    `## \`${specifier}\``, "",
    `From \`${file}\`: ${sections.map((s) => `[${s.name}](#${anchor(s.name)})`).join(" · ")}`, "",
    ...(intro ? [intro, ""] : []),
    ...sections.map((s) => `${s.text}\n`),
  ].join("\n");
}

export function render() {
  seen.clear();
  const exports = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).exports;
  const modules = Object.entries(exports).filter(([, e]) => typeof e === "object" && e.types)
    .map(([path, e]) => [path === "." ? "loci" : `loci/${path.slice(2)}`, e.types.replace(/^\.\//, "")]);
  return [
    "# API reference", "",
    "Generated by `npm run api-doc` (`scripts/api-doc.mjs`) from the TypeScript declarations the package ships: do not",
    "edit by hand; the doc comments live in `src/web*` (wasm-bindgen's) and `adapters/*.d.ts`. How the calls fit",
    "together: [Using loci](guides/api.md). Back to the [README](../README.md).", "",
    ...modules.map(([specifier, file]) => specifier === "loci/sync"
      ? renderModule(specifier, file, moduleSections(modules.find(([m]) => m === "loci")[1]),
        "Everything `loci` has (the same names), and sync (docs/SYNC.md): what follows is what it adds.")
      : renderModule(specifier, file)),
  ].join("\n").replace(/\n{3,}/g, "\n\n").trimEnd() + "\n";
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const text = render();
  if (process.argv.includes("--check")) {
    let committed = "";
    try { committed = readFileSync(out, "utf8"); } catch { /* missing: stale */ }
    if (committed !== text) {
      const a = committed.split("\n");
      const b = text.split("\n");
      let i = 0;
      while (i < a.length && a[i] === b[i]) i++;
      console.error(`docs/API.md is not what the declarations give (first difference at line ${i + 1}):\n` +
        `  committed: ${a[i] ?? "(end)"}\n  generated: ${b[i] ?? "(end)"}\nRun \`npm run build && npm run api-doc\`.`);
      process.exit(1);
    }
    console.log("docs/API.md is current");
  } else {
    writeFileSync(out, text);
    console.log(`wrote docs/API.md (${text.split("\n").length} lines)`);
  }
}
