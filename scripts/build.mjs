#!/usr/bin/env node
// Builds the npm package into pkg/ (the default entry) and pkg-sync/ (`loci/sync`, with the feature `sync`): the wasm
// library (release, size-optimised with wasm-opt) and its JS glue.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const run = (cmd, args) => {
  const r = spawnSync(cmd, args, { stdio: "inherit", cwd: root });
  if (r.status !== 0) {
    console.error(`[build] ${cmd} ${args.join(" ")} failed`);
    process.exit(1);
  }
};

/** Builds the wasm library with `features` into `out` (a folder of the repository): release, wasm-bindgen, wasm-opt. */
function build(out, features = []) {
  run("cargo", ["build", "--lib", "--profile", "wasm-release", "--target", "wasm32-unknown-unknown", ...features]);
  run("wasm-bindgen", ["--target", "web", "--out-dir", out, "--out-name", "loci",
    join("target", "wasm32-unknown-unknown", "wasm-release", "loci.wasm")]);
  // wasm-bindgen writes a package.json of its own (dependencies only, no "type"). Shipped, it would make Node and
  // TypeScript (node16/nodenext) read loci.js as CommonJS and hide the root's "type" and "sideEffects".
  rmSync(join(root, out, "package.json"), { force: true });
  // The generated types declare `[Symbol.dispose]()`, which TypeScript knows only from its `esnext.disposable` lib (or
  // from @types/node): say so in the file, or a browser app compiling with `lib: ["es2022", "dom"]` fails on loci's types.
  const dts = join(root, out, "loci.d.ts");
  const reference = '/// <reference lib="esnext.disposable" />\n';
  const types = readFileSync(dts, "utf8");
  if (!types.startsWith(reference)) writeFileSync(dts, reference + types);
  const wasm = join(root, out, "loci_bg.wasm");
  const wasmOpt = join(root, "node_modules", ".bin", "wasm-opt");
  if (existsSync(wasmOpt)) {
    // The features rustc enables by default for wasm32; wasm-opt must be told it may keep them.
    run(wasmOpt, ["-Oz", "--enable-bulk-memory", "--enable-nontrapping-float-to-int", "--enable-sign-ext",
      "--enable-reference-types", "--enable-multivalue", "--enable-mutable-globals", "--enable-simd", wasm, "-o", wasm]);
  } else {
    console.warn("[build] wasm-opt not found (npm install adds it): the wasm is not size-optimised");
  }
  const bytes = readFileSync(wasm);
  console.log(`[build] ${out}/loci_bg.wasm: ${(statSync(wasm).size / 1024).toFixed(0)} KB, ${(gzipSync(bytes, { level: 9 }).length / 1024).toFixed(0)} KB gzipped`);
}

// The package's default entry: everything but sync, under 600,000 gzipped bytes (`npm run bench` holds the line).
build("pkg");
// `loci/sync`: the same library with sync (docs/SYNC.md), for apps that sync; the demo uses it.
build("pkg-sync", ["--features", "sync"]);
