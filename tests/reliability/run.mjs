#!/usr/bin/env node
// `npm run test:reliability [-- --json PATH]`: the crash, storage-fault and multi-tab tests in headless Chromium, and
// the model-based fuzzing of the memory against an oracle (native), one after the other; writes the counts each saw.
// `npm test` runs it with smaller counts (LOCI_MULTITAB_EXCHANGES) to stay near its time budget.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const argv = process.argv.slice(2);
const jsonPath = argv.includes("--json") ? resolve(process.cwd(), argv[argv.indexOf("--json") + 1]) : null;
const dir = mkdtempSync(join(tmpdir(), "loci-reliability-"));
const counts = {};
let failed = false;
const run = (title, cmd, args, out, env = {}) => {
  console.log(`\n--- ${title}`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: "inherit", env: { ...process.env, ...env } });
  if (r.status !== 0) failed = true;
  if (existsSync(out)) Object.assign(counts, JSON.parse(readFileSync(out, "utf8")));
};
run("crashes (renderer crash and browser kill, mid-ingest and mid-distillation)", "node",
  ["tests/reliability/crash.test.mjs", "--json", join(dir, "crash.json")], join(dir, "crash.json"));
run("injected storage faults", "node", ["tests/reliability/faults.test.mjs", "--json", join(dir, "faults.json")],
  join(dir, "faults.json"));
run("several tabs on one memory (interleaved adds from 2 and 3 tabs; the leader closed mid-job)", "node",
  ["tests/reliability/multitab.test.mjs", "--json", join(dir, "multitab.json")], join(dir, "multitab.json"));
run("model-based fuzzing against an oracle", "cargo", ["test", "--test", "fuzz_native", "--", "--ignored", "--nocapture"],
  join(dir, "fuzz.json"), { LOCI_FUZZ_JSON: join(dir, "fuzz.json") });
console.log(`\nreliability: ${JSON.stringify(counts)}`);
if (jsonPath) writeFileSync(jsonPath, JSON.stringify(counts, null, 2) + "\n");
rmSync(dir, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
