#!/usr/bin/env node
// `npm run bench:distill [-- --json PATH]`: LLM calls per ingested message when distilling LoCoMo conv-26 against the
// scripted test server (the native test starts the server itself), printed, and written as JSON with --json.
import { spawnSync } from "node:child_process";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const at = args.indexOf("--json");
const env = { ...process.env };
if (at >= 0) {
  if (!args[at + 1]) {
    console.error("--json needs a path");
    process.exit(2);
  }
  env.LOCI_BENCH_JSON = resolve(process.cwd(), args[at + 1]);
}
const r = spawnSync("cargo", ["test", "--test", "distill_native", "--", "--nocapture"], { cwd: root, env, stdio: "inherit" });
process.exit(r.status ?? 1);
