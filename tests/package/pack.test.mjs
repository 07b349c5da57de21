// The npm package as a web developer gets it: `npm pack`, install the tarball into a fresh project (its dependency,
// onnxruntime-web at the version the package pins, from npm's cache when there and from the registry when not), type-check a TypeScript consumer and the README's quick start against the shipped types, then use the
// installed package in headless Chromium from a plain page and from a Vite production build: open, remember, recall.
import { chromium } from "playwright-core";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, createReadStream, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { dirname, extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const work = mkdtempSync(join(tmpdir(), "loci-pack-"));
const run = (cmd, args, cwd) => execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });

let failed = false;
let server;
let browser;
try {
  // The build step before this one made pkg/; `prepack` (a publish from a fresh clone) would only make it again.
  const tarball = run("npm", ["pack", "--silent", "--ignore-scripts", "--pack-destination", work], root).trim().split("\n").pop();
  const app = join(work, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "loci-consumer", private: true, type: "module" }));
  run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", join(work, tarball)], app);
  const installed = join(app, "node_modules", "loci");
  const files = readdirSync(join(installed, "pkg"));
  assert.ok(files.includes("loci.js") && files.includes("loci_bg.wasm") && files.includes("loci.d.ts"), files.join());
  // The consumer gets exactly the onnxruntime-web the package pins (loci's bindings speak to that version).
  const pinned = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).dependencies["onnxruntime-web"];
  const got = JSON.parse(readFileSync(join(app, "node_modules", "onnxruntime-web", "package.json"), "utf8")).version;
  assert.equal(got, pinned, "onnxruntime-web version in the consumer");

  // Types: a strict TypeScript consumer of the public API compiles, a browser app's: no @types/node (which
  // onnxruntime-web's dependencies install) to lend it Node's declarations.
  writeFileSync(join(app, "consumer.ts"), `
import init, { Memory, type RecallResult, type Stats, type LociError, type OpenOptions, type Fact, type FlushReport,
  type DistillProgressEvent } from "loci";
export async function demo(): Promise<string> {
  await init();
  const options: OpenOptions = { name: "alice", embedder: { device: "auto" }, onProgress: (e) => console.log(e.phase) };
  const memory = await Memory.open(options);
  await memory.addMessages([{ role: "user", content: "I love hiking.", time: Date.now() }], { session: "s1" });
  const r: RecallResult = await memory.recall("hobbies?", { k: 3, prune: "extractive", method: "tir" });
  const s: Stats = await memory.stats();
  memory.setLlm({ baseUrl: "http://127.0.0.1:8080/v1", model: "m" });
  memory.setLlm(async ({ messages }) => ({ text: messages[0].content }));
  try { await memory.answer("Where?", { signal: new AbortController().signal }); }
  catch (e) { const err = e as LociError; if (err.code === "LLM_UNAVAILABLE") return err.message; }
  // Options arguments may be left out.
  await memory.addMessages([{ role: "user", content: "Again." }]);
  const plain: RecallResult = await memory.recall("hobbies?");
  const facts: Fact[] = await memory.facts();
  const flushed: FlushReport = await memory.flush({ signal: new AbortController().signal });
  await memory.close();
  return r.sessions[0].id + s.device + plain.query + facts.length + flushed.jobsRun;
}
// Distillation events: a job's, or a background run's error.
export function describe(e: DistillProgressEvent): string {
  return "error" in e ? e.error.code : \`\${e.job}: \${e.jobsLeft} left\`;
}
`);
  // The README's quick start, as a newcomer pastes it: it must compile against the shipped types too.
  const quickStart = /## Quick start\n\n```js\n([\s\S]*?)```/.exec(readFileSync(join(root, "README.md"), "utf8"));
  assert.ok(quickStart, "the README has a quick start");
  assert.ok(quickStart[1].split("\n").length <= 17, "the quick start stays short");
  writeFileSync(join(app, "quickstart.ts"), `export {};\n${quickStart[1]}`);
  writeFileSync(join(app, "tsconfig.json"), JSON.stringify({
    compilerOptions: { strict: true, noEmit: true, target: "es2022", module: "es2022", moduleResolution: "bundler", lib: ["es2022", "dom"], types: [] },
    files: ["consumer.ts", "quickstart.ts"],
  }));
  run(join(root, "node_modules", ".bin", "tsc"), ["-p", "tsconfig.json"], app);
  // The same consumer under Node's own module rules (node16 / nodenext): the package must read as ES modules there
  // too, or `import init from "loci"` would type as a CommonJS module's default.
  writeFileSync(join(app, "tsconfig.node.json"), JSON.stringify({
    compilerOptions: { strict: true, noEmit: true, target: "es2022", module: "nodenext", moduleResolution: "nodenext", lib: ["es2022", "dom"], types: [] },
    files: ["consumer.ts"],
  }));
  run(join(root, "node_modules", ".bin", "tsc"), ["-p", "tsconfig.node.json"], app);
  assert.ok(!files.includes("package.json"), "no package.json of wasm-bindgen's in pkg/ overrides the package's own");

  // Use: a plain page importing the installed package; the app hosts the model and onnxruntime-web's files.
  mkdirSync(join(app, "assets", "model"), { recursive: true });
  mkdirSync(join(app, "assets", "ort"), { recursive: true });
  for (const f of ["model.onnx", "tokenizer.json"]) copyFileSync(join(root, "www", "assets", "model", f), join(app, "assets", "model", f));
  const ortDist = join(app, "node_modules", "onnxruntime-web", "dist");
  for (const f of ["ort.wasm.min.js", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm"]) {
    copyFileSync(join(ortDist, f), join(app, "assets", "ort", f));
  }
  writeFileSync(join(app, "index.html"), `<!doctype html><meta charset="utf-8"><script type="module">
import init, { Memory } from "./node_modules/loci/pkg/loci.js";
try {
  await init();
  const memory = await Memory.open({ name: "pack-test", embedder: { device: "wasm" } });
  await memory.forgetAll();
  await memory.addMessages([{ role: "user", content: "My dog Pixel loves the beach." }], { session: "dog" });
  await memory.addMessages([{ role: "user", content: "The tax return is due in April." }], { session: "taxes" });
  const r = await memory.recall("What does my pet enjoy?", { k: 1 });
  window.result = { top: r.sessions[0].id, device: r.device };
} catch (e) { window.result = { error: String(e), code: e.code }; }
</script>`);
  const types = { ".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm", ".json": "application/json" };
  const serveDir = (dir) => createServer((req, res) => {
    const file = normalize(join(dir, decodeURIComponent(new URL(req.url, "http://x").pathname)));
    let ok = file.startsWith(dir + sep);
    try { ok = ok && statSync(file).isFile(); } catch { ok = false; }
    if (!ok) { res.writeHead(404); return res.end(); }
    res.writeHead(200, { "Content-Type": types[extname(file)] || "application/octet-stream" });
    createReadStream(file).pipe(res);
  });
  browser = await chromium.launch({ executablePath: "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"] });
  const check = async (dir, page) => {
    server = serveDir(dir);
    await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
    const tab = await browser.newPage();
    await tab.goto(`http://127.0.0.1:${server.address().port}/${page}`);
    await tab.waitForFunction(() => window.result, null, { timeout: 120_000 });
    const result = await tab.evaluate(() => window.result);
    await tab.close();
    server.close();
    server = null;
    return result;
  };
  assert.deepEqual(await check(app, "index.html"), { top: "dog", device: "wasm" }, "plain page");

  // A Vite app: `import init, { Memory } from "loci"`, bundled by `vite build`; the assets are in public/.
  const viteApp = join(work, "vite-app");
  mkdirSync(join(viteApp, "public"), { recursive: true });
  writeFileSync(join(viteApp, "package.json"), JSON.stringify({ name: "loci-vite", private: true, type: "module" }));
  run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", join(work, tarball)], viteApp);
  execFileSync("cp", ["-r", join(app, "assets"), join(viteApp, "public", "assets")]);
  const script = readFileSync(join(app, "index.html"), "utf8").split("<script type=\"module\">")[1].split("</script>")[0]
    .replace("./node_modules/loci/pkg/loci.js", "loci").replace('"pack-test"', '"pack-test-vite"');
  writeFileSync(join(viteApp, "main.js"), script);
  writeFileSync(join(viteApp, "index.html"), `<!doctype html><meta charset="utf-8"><script type="module" src="/main.js"></script>`);
  run(join(root, "node_modules", ".bin", "vite"), ["build", "--logLevel", "warn"], viteApp);
  assert.deepEqual(await check(join(viteApp, "dist"), "index.html"), { top: "dog", device: "wasm" }, "Vite build");
  console.log(`package: ok (${tarball} installed, types check, recall works in a plain page and a Vite build)`);
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  if (browser) await browser.close();
  if (server) server.close();
  rmSync(work, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
