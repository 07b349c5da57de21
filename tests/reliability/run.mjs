#!/usr/bin/env node
// `npm run test:reliability [-- --json PATH]`: the crash, storage-fault and multi-tab tests in headless Chromium, and
// the model-based fuzzing of the memory against an oracle (native), and the sync soak (native, three devices through
// a real WebDAV server), one after the other; writes the counts each saw.
// `npm test` runs it with smaller counts (LOCI_MULTITAB_EXCHANGES) to stay near its time budget.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { testBinaries } from "../../scripts/cargo-tests.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const argv = process.argv.slice(2);
const jsonPath = argv.includes("--json") ? resolve(process.cwd(), argv[argv.indexOf("--json") + 1]) : null;
const dir = mkdtempSync(join(tmpdir(), "loci-reliability-"));
const counts = {};
let failed = false;
/** The model-based fuzzing: its seeds split over one process per core (`LOCI_FUZZ_SHARD`; the embedder runs on one
 * thread), each the test binary that cargo built, its counts summed. */
async function fuzz() {
  console.log("\n--- model-based fuzzing against an oracle");
  const executable = testBinaries(["--test", "fuzz_native"])?.find((b) => b.name === "fuzz_native")?.executable;
  if (!executable) {
    console.error("fuzz: the test binary did not build");
    failed = true;
    return;
  }
  const shards = Math.max(1, Math.min(4, availableParallelism()));
  const outs = Array.from({ length: shards }, (_, i) => join(dir, `fuzz-${i}.json`));
  const codes = await Promise.all(outs.map((out, i) => new Promise((ok) => {
    const child = spawn(executable, ["--ignored", "--nocapture", "the_memory_agrees_with_an_oracle"], {
      cwd: root, stdio: "inherit", env: { ...process.env, LOCI_FUZZ_SHARD: `${i}/${shards}`, LOCI_FUZZ_JSON: out },
    });
    child.on("exit", (code, signal) => ok(signal ? 1 : code));
    child.on("error", () => ok(1));
  })));
  if (codes.some((c) => c !== 0)) failed = true;
  for (const out of outs.filter(existsSync)) {
    for (const [key, value] of Object.entries(JSON.parse(readFileSync(out, "utf8")))) {
      counts[key] = (counts[key] ?? 0) + value;
    }
  }
}

/** Three devices syncing through a real WebDAV server with crashes and cut connections, against an oracle: the
 * native test binary (its memory code is the browser's; only the store and the transport differ). */
async function syncSoak() {
  console.log("\n--- sync: three devices through rclone's WebDAV, crashes and cut connections, against an oracle");
  const executable = testBinaries(["--test", "sync_memory_native"])?.find((b) => b.name === "sync_memory_native")?.executable;
  if (!executable) {
    console.error("sync soak: the test binary did not build");
    failed = true;
    return;
  }
  const out = join(dir, "sync.json");
  const r = spawnSync(executable, ["--ignored", "--nocapture", "sync_soak_against_an_oracle"],
    { cwd: root, stdio: "inherit", env: { ...process.env, LOCI_SYNC_SOAK_JSON: out } });
  if (r.status !== 0) failed = true;
  if (existsSync(out)) Object.assign(counts, JSON.parse(readFileSync(out, "utf8")));
}

const run = (title, cmd, args, out, env = {}) => {
  console.log(`\n--- ${title}`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: "inherit", env: { ...process.env, ...env } });
  if (r.status !== 0) failed = true;
  if (existsSync(out)) Object.assign(counts, JSON.parse(readFileSync(out, "utf8")));
};
run("crashes (renderer crash and browser kill: ingest, open, upgrade, import, encryption, re-keying, embedding, forget, " +
  "hand-over, distillation)", "node",
  ["tests/reliability/crash.test.mjs", "--json", join(dir, "crash.json")], join(dir, "crash.json"));
run("injected storage faults", "node", ["tests/reliability/faults.test.mjs", "--json", join(dir, "faults.json")],
  join(dir, "faults.json"));
run("several tabs on one memory (interleaved adds from 2 and 3 tabs; the leader closed mid-job)", "node",
  ["tests/reliability/multitab.test.mjs", "--json", join(dir, "multitab.json")], join(dir, "multitab.json"));
await fuzz();
await syncSoak();
run("sync: two browser contexts through a real WebDAV server (concurrent writes, forgets, a crash mid-sync)", "node",
  ["tests/sync/two-devices.test.mjs", "--json", join(dir, "two-devices.json")], join(dir, "two-devices.json"));
console.log(`\nreliability: ${JSON.stringify(counts)}`);
if (jsonPath) writeFileSync(jsonPath, JSON.stringify(counts, null, 2) + "\n");
rmSync(dir, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
