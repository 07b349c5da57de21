// The npm package as a web developer gets it: `npm pack`, install the tarball into a fresh project (its dependency,
// onnxruntime-web at the version the package pins, from npm's cache when there and from the registry when not), type-check a TypeScript consumer and the README's quick start against the shipped types, then use the
// installed package in headless Chromium from a plain page and from a Vite production build: open, remember, recall;
// the adapters (loci/ai-sdk, loci/langchain) type-checked against their peers (ai, @langchain/core) and used in the
// Vite build; loci/llm type-checked with a real wllama (its peer) and the WebLLM and Prompt API shapes, and bundled;
// then the apps in examples/, installed from the same tarball and used (tests/package/examples.mjs).
import { chromium } from "playwright-core";
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { copyFileSync, createReadStream, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { dirname, extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { checkExamples } from "./examples.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const work = mkdtempSync(join(tmpdir(), "loci-pack-"));
const run = (cmd, args, cwd) => execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
/** `tsc -p config` in `cwd`, in the background: resolves when it passes, rejects with its diagnostics. */
const tsc = (config, cwd) => new Promise((ok, fail) => {
  execFile(join(root, "node_modules", ".bin", "tsc"), ["-p", config], { cwd, encoding: "utf8" }, (error, stdout, stderr) => {
    if (error) fail(new Error(`tsc -p ${config} failed:\n${stdout}${stderr}`));
    else ok();
  });
});

let failed = false;
let server;
let browser;
try {
  // The build step before this one made pkg/; `prepack` (a publish from a fresh clone) would only make it again.
  const tarball = run("npm", ["pack", "--silent", "--ignore-scripts", "--pack-destination", work], root).trim().split("\n").pop();
  const app = join(work, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "loci-consumer", private: true, type: "module" }));
  // With the adapters' peers, at the versions loci is tested with. The AI SDK's own declarations need Node's
  // (`node:http`) and JSON Schema's types: a TypeScript app using it has them (@types/node comes with
  // onnxruntime-web's dependencies).
  const dev = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).devDependencies;
  const peer = (p) => `${p}@${dev[p]}`;
  run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error", join(work, tarball),
    peer("ai"), peer("@langchain/core"), peer("@types/json-schema"), peer("@wllama/wllama")], app);
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
  // loci/sync: the same API and sync, under its own subpath.
  assert.ok(readdirSync(join(installed, "pkg-sync")).includes("loci_bg.wasm"), "pkg-sync/ in the package");
  writeFileSync(join(app, "sync.ts"), `
import init, { Memory, type SyncReport, type SyncOptions, type SyncProgressEvent } from "loci/sync";
export async function syncDemo(passphrase: string): Promise<number> {
  await init();
  const remote = { url: "https://cloud.example/dav/loci", username: "alice", password: "pw" };
  const memory = await Memory.open({ name: "alice", sync: { remote, passphrase, everyMinutes: 5 },
    onProgress: (e) => console.log(e.phase) });
  const options: SyncOptions = { remote: remote.url, passphrase, signal: new AbortController().signal };
  const r: SyncReport = await memory.sync(options);
  await memory.sync();
  await memory.recall("hobbies?");
  return r.opsSent + r.turnsAdded + r.derivedChanged;
}
export const told = (e: SyncProgressEvent): string => e.detail ?? e.error?.code ?? "";
`);
  // The adapters: the AI SDK middleware where `wrapLanguageModel` takes one, LangChain's retriever and history where
  // LangChain's own types take them.
  writeFileSync(join(app, "adapters.ts"), `
import { wrapLanguageModel, type LanguageModel, type LanguageModelMiddleware } from "ai";
import type { BaseChatMessageHistory } from "@langchain/core/chat_history";
import type { DocumentInterface } from "@langchain/core/documents";
import type { BaseRetrieverInterface } from "@langchain/core/retrievers";
import { HumanMessage } from "@langchain/core/messages";
import type { LociError, Memory } from "loci";
import { lociMemory, type LociMemoryOptions } from "loci/ai-sdk";
import { LociChatMessageHistory, LociRetriever, type LociDocumentMetadata } from "loci/langchain";
export function withMemory(model: Exclude<LanguageModel, string>, memory: Memory) {
  const options: LociMemoryOptions = { k: 3, prune: "extractive", session: "chat", onError: (e: LociError) => console.warn(e.code) };
  const middleware: LanguageModelMiddleware = lociMemory(memory, options);
  return wrapLanguageModel({ model, middleware });
}
export async function retrieve(memory: Memory): Promise<string[]> {
  const retriever: BaseRetrieverInterface<LociDocumentMetadata> = new LociRetriever({ memory, k: 2, prune: "none" });
  const docs: DocumentInterface<LociDocumentMetadata>[] = await retriever.invoke("Where did we hike?");
  return docs.map((d) => \`\${d.metadata.sessionId} \${d.metadata.turnIds.join()} \${d.pageContent}\`);
}
export async function history(memory: Memory): Promise<number> {
  const h: BaseChatMessageHistory = new LociChatMessageHistory({ memory, session: "s1" });
  await h.addMessages([new HumanMessage("hi")]);
  await h.addAIMessage("hello");
  return (await h.getMessages()).length;
}
`);
  // loci/llm: a real wllama's Wllama where fromWllama takes one; WebLLM's engine and Chrome's LanguageModel as their
  // documented shapes (neither package is installed here: WebLLM's is 6 MB of WebGPU code, the Prompt API is a global).
  writeFileSync(join(app, "llm.ts"), `
import { Wllama, type LoadModelParams } from "@wllama/wllama";
import type { Memory } from "loci";
import { fromPromptApi, fromWebLLM, fromWllama, type InBrowserLlm, type LlmCallStats } from "loci/llm";
declare const engine: {
  chat: { completions: { create(request: object): Promise<AsyncIterable<object>> } };
  interruptGenerate(): Promise<void>;
  modelId?: string[];
  chatOpts?: { context_window_size: number }[];
};
declare const LanguageModel: {
  availability(options?: object): Promise<"unavailable" | "downloadable" | "downloading" | "available">;
  create(options?: object): Promise<{
    promptStreaming(input: string | object[], options?: object): ReadableStream<string>;
    clone(options?: { signal?: AbortSignal }): Promise<any>;
    destroy(): void;
    readonly contextWindow: number;
  }>;
};
export async function inBrowser(memory: Memory): Promise<number> {
  const wllama = new Wllama({ default: "/assets/wllama/wllama.wasm" });
  wllama.setCompat(null);
  const params: LoadModelParams = { n_ctx: 2048, n_threads: 1 };
  await wllama.loadModelFromUrl("/assets/llm/model.gguf", params);
  const speeds: number[] = [];
  const llm: InBrowserLlm = fromWllama(wllama, { onStats: (s: LlmCallStats) => speeds.push(s.outputTokensPerSecond ?? 0) });
  memory.setLlm(llm);
  memory.setLlm(fromWebLLM(engine, { model: "SmolLM2-360M-Instruct-q4f16_1-MLC", contextTokens: 4096 }));
  const chrome: InBrowserLlm = await fromPromptApi(LanguageModel, { onDownloadProgress: (p: number) => console.log(p) });
  memory.setLlm(chrome);
  return llm.contextTokens + chrome.contextTokens + speeds.length;
}
`);
  // The README's quick start, as a newcomer pastes it: it must compile against the shipped types too.
  const quickStart = /## Quick start\n\n```js\n([\s\S]*?)```/.exec(readFileSync(join(root, "README.md"), "utf8"));
  assert.ok(quickStart, "the README has a quick start");
  assert.ok(quickStart[1].split("\n").length <= 17, "the quick start stays short");
  writeFileSync(join(app, "quickstart.ts"), `export {};\n${quickStart[1]}`);
  writeFileSync(join(app, "tsconfig.json"), JSON.stringify({
    compilerOptions: { strict: true, noEmit: true, target: "es2022", module: "es2022", moduleResolution: "bundler", lib: ["es2022", "dom"], types: [] },
    files: ["consumer.ts", "quickstart.ts", "sync.ts"],
  }));
  const typeChecks = [tsc("tsconfig.json", app)];
  // The same consumer under Node's own module rules (node16 / nodenext): the package must read as ES modules there
  // too, or `import init from "loci"` would type as a CommonJS module's default.
  writeFileSync(join(app, "tsconfig.node.json"), JSON.stringify({
    compilerOptions: { strict: true, noEmit: true, target: "es2022", module: "nodenext", moduleResolution: "nodenext", lib: ["es2022", "dom"], types: [] },
    files: ["consumer.ts"],
  }));
  typeChecks.push(tsc("tsconfig.node.json", app));
  // The adapters, under both module rules, with Node's types (the AI SDK's need them) and no skipLibCheck: the
  // adapters' own declarations are checked too.
  for (const [module, resolution] of [["es2022", "bundler"], ["nodenext", "nodenext"]]) {
    writeFileSync(join(app, `tsconfig.adapters-${resolution}.json`), JSON.stringify({
      compilerOptions: { strict: true, noEmit: true, target: "es2022", module, moduleResolution: resolution, lib: ["es2022", "dom"], types: ["node"] },
      files: ["adapters.ts"],
    }));
    typeChecks.push(tsc(`tsconfig.adapters-${resolution}.json`, app));
    // wllama's own declarations do not pass a strict check of a library (they reference Node's console types):
    // skipLibCheck for them, as an app using wllama sets it; loci/llm's and the consumer's code are checked strictly.
    writeFileSync(join(app, `tsconfig.llm-${resolution}.json`), JSON.stringify({
      compilerOptions: { strict: true, noEmit: true, skipLibCheck: true, target: "es2022", module, moduleResolution: resolution, lib: ["es2022", "dom"], types: ["node"] },
      files: ["llm.ts"],
    }));
    typeChecks.push(tsc(`tsconfig.llm-${resolution}.json`, app));
  }
  // The type checks (~15 s of CPU each with the AI SDK's and LangChain's declarations) run while the pages are
  // checked; the first failure is reported at the end.
  const typed = Promise.all(typeChecks);
  typed.catch(() => {}); // awaited below
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
  run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error", join(work, tarball),
    peer("@langchain/core")], viteApp);
  execFileSync("cp", ["-r", join(app, "assets"), join(viteApp, "public", "assets")]);
  const script = readFileSync(join(app, "index.html"), "utf8").split("<script type=\"module\">")[1].split("</script>")[0]
    .replace("./node_modules/loci/pkg/loci.js", "loci").replace('"pack-test"', '"pack-test-vite"');
  // …and the adapters from their subpaths: the middleware puts the recalled session, fenced, before the user's
  // message; the retriever finds it.
  const result = "window.result = { top: r.sessions[0].id, device: r.device };";
  assert.ok(script.includes(result));
  writeFileSync(join(viteApp, "main.js"), `import { lociMemory } from "loci/ai-sdk";
import { LociRetriever } from "loci/langchain";
import { fromPromptApi } from "loci/llm";
${script.replace(result, `const middleware = lociMemory(memory, { k: 1, store: false });
  const question = [{ role: "user", content: [{ type: "text", text: "What does my pet enjoy?" }] }];
  const { prompt } = await middleware.transformParams({ type: "generate", params: { prompt: question } });
  const docs = await new LociRetriever({ memory, k: 1 }).invoke("What does my pet enjoy?");
  // loci/llm from the bundle: a Prompt API session (a stand-in: Debian's Chromium has no built-in model) answers.
  const session = { contextWindow: 4096, destroy() {}, async clone() { return session; },
    promptStreaming: () => new ReadableStream({ start(c) { c.enqueue('{"answer": "the '); c.enqueue('beach"}'); c.close(); } }) };
  memory.setLlm(await fromPromptApi(session));
  const answered = await memory.answer("What does my pet enjoy?", { k: 1, prune: "none" }).then((a) => a.answer, (e) => e.code);
  window.result = { top: r.sessions[0].id, device: r.device, fenced: prompt.at(-1).content[0].text.startsWith("<memory>\\n### Session dog ("),
    retrieved: docs[0].metadata.sessionId, answered };`)}`);
  // LangChain's bundle is over Vite's 500 kB warning, and zod has comments Rollup cannot place: say nothing of them.
  writeFileSync(join(viteApp, "vite.config.js"), `export default { build: { chunkSizeWarningLimit: 4000, rollupOptions: {
  onwarn(warning, warn) { if (warning.code !== "INVALID_ANNOTATION") warn(warning); } } } };`);
  writeFileSync(join(viteApp, "index.html"), `<!doctype html><meta charset="utf-8"><script type="module" src="/main.js"></script>`);
  run(join(root, "node_modules", ".bin", "vite"), ["build", "--logLevel", "warn"], viteApp);
  assert.deepEqual(await check(join(viteApp, "dist"), "index.html"), { top: "dog", device: "wasm", fenced: true, retrieved: "dog", answered: "the beach" },
    "Vite build");
  const examplesTook = await checkExamples({ root, work, tarball, browser, serveDir });
  await typed;
  console.log(`package: ok (${tarball} installed, types check, recall works in a plain page and a Vite build, loci/ai-sdk, loci/langchain and loci/llm too; examples/ in ${examplesTook.toFixed(0)} s)`);
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  if (browser) await browser.close();
  if (server) server.close();
  rmSync(work, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
