#!/usr/bin/env node
// Builds the npm package into pkg/: the wasm library (release, size-optimised with wasm-opt) and its JS glue.
import { spawnSync } from "node:child_process";
import { existsSync, statSync, readFileSync } from "node:fs";
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

run("cargo", ["build", "--lib", "--profile", "wasm-release", "--target", "wasm32-unknown-unknown"]);
run("wasm-bindgen", ["--target", "web", "--out-dir", "pkg", "--out-name", "loci",
  join("target", "wasm32-unknown-unknown", "wasm-release", "loci.wasm")]);
const wasm = join(root, "pkg", "loci_bg.wasm");
const wasmOpt = join(root, "node_modules", ".bin", "wasm-opt");
if (existsSync(wasmOpt)) {
  // The features rustc enables by default for wasm32; wasm-opt must be told it may keep them.
  run(wasmOpt, ["-Oz", "--enable-bulk-memory", "--enable-nontrapping-float-to-int", "--enable-sign-ext",
    "--enable-reference-types", "--enable-multivalue", "--enable-mutable-globals", "--enable-simd", wasm, "-o", wasm]);
} else {
  console.warn("[build] wasm-opt not found (npm install adds it): the wasm is not size-optimised");
}
const bytes = readFileSync(wasm);
console.log(`[build] pkg/loci_bg.wasm: ${(statSync(wasm).size / 1024).toFixed(0)} KB, ${(gzipSync(bytes, { level: 9 }).length / 1024).toFixed(0)} KB gzipped`);
