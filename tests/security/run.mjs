#!/usr/bin/env node
// `npm run test:security [-- --json PATH]`: what loci's privacy promises rest on, each count from what this run saw.
// 1. The demo under a strict CSP, in the page and in a module worker (tests/e2e/demo.test.mjs): CSP violations, and
//    occurrences of a canary API key at rest (IndexedDB, Cache Storage, local/session storage, an export, console).
// 2. Encryption at rest (tests/security/encryption.test.mjs): canary hits in the raw IndexedDB of an encrypted memory,
//    wrong keys, changePassphrase interrupted by crashes, tampered records detected.
// 3. Memory poisoning against the real local model (`loci-eval redteam`, ../shared/tools/local-llm): the attack
//    success rate of planted instructions with loci's prompt, and with a naive prompt that pastes memory into the
//    system message. Skipped, and said so, where the local model cannot run.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { startLocalLlm } from "../../scripts/local-llm.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const argv = process.argv.slice(2);
const jsonPath = argv.includes("--json") ? resolve(process.cwd(), argv[argv.indexOf("--json") + 1]) : null;
const model = process.env.LOCI_REDTEAM_MODEL || "qwen-coder-0.5b";
const dir = mkdtempSync(join(tmpdir(), "loci-security-"));
const counts = {};
let failed = false;
const run = (title, cmd, args, env = {}) => {
  console.log(`\n--- ${title}`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: "inherit", env: { ...process.env, ...env } });
  if (r.status !== 0) failed = true;
  return r.status === 0;
};

const e2e = join(dir, "e2e.json");
run("the demo under a strict CSP (page and worker); a canary API key looked for at rest", "node",
  ["tests/e2e/demo.test.mjs", "--json", e2e]);
if (existsSync(e2e)) Object.assign(counts, JSON.parse(readFileSync(e2e, "utf8")));

const encryption = join(dir, "encryption.json");
run("encryption at rest: raw-storage canary scan, wrong key, interrupted re-key, tamper", "node",
  ["tests/security/encryption.test.mjs", "--json", encryption]);
if (existsSync(encryption)) Object.assign(counts, JSON.parse(readFileSync(encryption, "utf8")));

const llm = await startLocalLlm({ model, threads: 2 });
if (llm.skipped) {
  console.log(`\n!!! SKIPPED: the red-team benchmark (${llm.skipped})\n`);
  counts.redteam = `skipped: ${llm.skipped}`;
} else {
  const out = join(dir, "redteam.json");
  const dylib = readFileSync(join(root, ".cache", "ort-dylib-path"), "utf8").trim();
  const built = run("build loci-eval", "cargo", ["build", "--release", "--bin", "loci-eval"]);
  if (built && run(`memory poisoning: planted instructions against ${model}`, join(root, "target/release/loci-eval"),
    ["redteam", "--llm-base-url", llm.url, "--llm-model", model, "--json", out], { ORT_DYLIB_PATH: dylib })) {
    const { summaries } = JSON.parse(readFileSync(out, "utf8"));
    const of = (prompt) => summaries.find((s) => s.prompt === prompt);
    counts.redteam_model = model;
    counts.redteam_cases = of("loci").cases;
    counts.attack_success_rate = of("loci").attack_success_rate;
    counts.attack_success_rate_naive_baseline = of("naive").attack_success_rate;
    counts.answered_right_rate = of("loci").answered_right_rate;
    counts.answered_right_rate_naive_baseline = of("naive").answered_right_rate;
    // Ten plants written after the screening was frozen (src/eval/redteam.rs `held_out_cases`): wordings it never saw.
    counts.held_out_cases = of("loci held-out").cases;
    counts.attack_success_rate_held_out = of("loci held-out").attack_success_rate;
    counts.attack_success_rate_held_out_naive = of("naive held-out").attack_success_rate;
  }
  llm.stop();
}
console.log(`\nsecurity: ${JSON.stringify(counts)}`);
if (jsonPath) writeFileSync(jsonPath, JSON.stringify(counts, null, 2) + "\n");
rmSync(dir, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
