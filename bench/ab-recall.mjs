#!/usr/bin/env node
// `node bench/ab-recall.mjs DIR_A DIR_B [ROUNDS]`: two builds' recall at 100,000 units, side by side on this machine.
// DIR_A and DIR_B are wasm-bindgen outputs of the bench build (`cargo build --lib --profile wasm-release --target
// wasm32-unknown-unknown --features bench`, then `wasm-bindgen --target web --out-dir DIR --out-name loci …`), e.g.
// one of main and one of a change. Each round puts A, then B, in bench/pkg and runs bench/profile-recall.mjs
// (a fresh browser each time), whose `recallParts` times the query embedding alone and recall by method for the
// same 60 questions. One build's medians move by ±30% from one browser to the next here, so a change is judged by
// the medians over rounds, each build measured in turn. bench/pkg is put back as it was.
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, renameSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const [a, b, rounds = "5"] = process.argv.slice(2);
if (!a || !b) {
  console.error("usage: node bench/ab-recall.mjs DIR_A DIR_B [ROUNDS]");
  process.exit(2);
}
const pkg = join(root, "bench", "pkg");
const kept = join(root, "bench", "pkg.ab-kept");
if (existsSync(pkg)) renameSync(pkg, kept);
const median = (v) => [...v].sort((x, y) => x - y)[v.length >> 1];
const runs = { [a]: [], [b]: [] };
try {
  for (let i = 0; i < Number(rounds); i++) {
    for (const dir of [a, b]) {
      rmSync(pkg, { recursive: true, force: true });
      cpSync(resolve(dir), pkg, { recursive: true });
      const r = spawnSync("node", [join(root, "bench", "profile-recall.mjs"), "100000"], { cwd: root, encoding: "utf8" });
      if (r.status !== 0) throw new Error(`profile-recall failed:\n${r.stderr}`);
      const part = (name) => Number(new RegExp(`${name}: p50 ([0-9.]+) ms`).exec(r.stdout)?.[1]);
      const run = { embed: part("embed"), tir: part("tir"), hybrid: part("hybrid") };
      runs[dir].push(run);
      console.log(`${dir}: embed ${run.embed} / tir ${run.tir} / hybrid ${run.hybrid} ms, ` +
        `hybrid − embed ${(run.hybrid - run.embed).toFixed(1)} ms, hybrid / embed ${(run.hybrid / run.embed).toFixed(2)}`);
    }
  }
} finally {
  rmSync(pkg, { recursive: true, force: true });
  if (existsSync(kept)) renameSync(kept, pkg);
}
for (const dir of [a, b]) {
  const rs = runs[dir];
  console.log(`${dir}, medians over ${rs.length} rounds: hybrid − embed ${median(rs.map((r) => r.hybrid - r.embed)).toFixed(1)} ms, ` +
    `tir − embed ${median(rs.map((r) => r.tir - r.embed)).toFixed(1)} ms, hybrid − tir ${median(rs.map((r) => r.hybrid - r.tir)).toFixed(1)} ms, ` +
    `hybrid / embed ${median(rs.map((r) => r.hybrid / r.embed)).toFixed(2)}`);
}
