// End-to-end: the demo page in headless Chromium (Debian's, driven by playwright-core; no browser download).
// Without an LLM the bot shows evidence; with the scripted test LLM server it answers; after a reload it answers a
// question that needs an earlier session. Memory text renders inert, and nothing leaves the page but the calls to
// the configured endpoint. "Run the model in this browser" loads wllama and SmolLM2-135M from the page's own origin
// and answers from memory with it. Screenshots go to docs/screenshots/ (the README shows them).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { serve } from "../../scripts/serve.mjs";
import { chat, launchChromium, ready, statusStarts } from "./demo-page.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
// `--json PATH` writes what the run saw: CSP violations (page and worker) and API-key hits at rest.
const argv = process.argv.slice(2);
const jsonPath = argv.includes("--json") ? argv[argv.indexOf("--json") + 1] : null;
const counts = { csp_violations: null, key_hits: null };
const shots = join(root, "docs", "screenshots");
mkdirSync(shots, { recursive: true });

const llmServer = spawn("node", [join(root, "tests/llm-server/server.mjs"), "0"], { stdio: ["ignore", "pipe", "inherit"] });
const llmPort = await new Promise((ok) => llmServer.stdout.on("data", (d) => {
  const m = /READY (\d+)/.exec(String(d));
  if (m) ok(m[1]);
}));
const llmUrl = `http://127.0.0.1:${llmPort}/v1`;
// The user's WebDAV folder for the sync panel (rclone behind the sync tests' CORS proxy).
const webdav = spawn("node", [join(root, "tests/webdav-server/server.mjs"), "0", "--exit-with-stdin"],
  { stdio: ["pipe", "pipe", "inherit"] });
const davPort = await new Promise((ok) => webdav.stdout.on("data", (d) => {
  const m = /READY (\d+)/.exec(String(d));
  if (m) ok(m[1]);
}));
const davUrl = `http://127.0.0.1:${davPort}`;
// The demo runs under a strict Content-Security-Policy: no 'unsafe-eval', no 'unsafe-inline'; WebAssembly only.
// `blob:` workers: wllama (the in-browser LLM) starts its worker from a blob of its own code.
const csp = ["default-src 'self'", "script-src 'self' 'wasm-unsafe-eval'", "worker-src 'self' blob:",
  `connect-src 'self' http://127.0.0.1:${llmPort} ${davUrl}`].join("; ");
const server = await serve(0, ["tests"], { "Content-Security-Policy": csp });
const origin = `http://127.0.0.1:${server.address().port}`;
// A hostname of the demo's own (see the telemetry check), treated as secure like localhost (Web Locks, caches).
const browser = await launchChromium(["--host-resolver-rules=MAP loci.test 127.0.0.1",
  `--unsafely-treat-insecure-origin-as-secure=${origin.replace("127.0.0.1", "loci.test")}`]);

let failed = false;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const requests = [];
  page.on("request", (r) => requests.push(r.url()));
  page.on("pageerror", (e) => console.error("page error:", e.message));
  page.on("dialog", (d) => d.accept());
  const consoleViolations = [];
  const consoleText = [];
  page.on("console", (m) => {
    consoleText.push(m.text());
    if (/Content Security Policy/.test(m.text())) consoleViolations.push(m.text());
  });
  await context.addInitScript(() => {
    window.cspViolations = [];
    document.addEventListener("securitypolicyviolation",
      (e) => window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));
  });

  await page.goto(`${origin}/www/`);
  await ready(page);
  await page.evaluate(() => window.loci.memory.forgetAll());
  await page.reload();
  await ready(page);
  assert.match(await page.textContent("#status"), /Ready: embedding on wasm/);
  // The page warns while the browser may evict the memory (storage not persistent), and only then.
  const storage = await page.evaluate(async () => (await window.loci.memory.stats()).storage);
  assert.equal(typeof storage.persisted, "boolean", JSON.stringify(storage));
  assert.ok(storage.quota > 0 && storage.usage >= 0, JSON.stringify(storage));
  assert.equal(await page.isVisible("#storage-warning"), storage.persisted === false);
  const kept = await page.evaluate(() => window.loci.memory.persist());
  assert.equal(typeof kept, "boolean");
  assert.equal((await page.evaluate(async () => (await window.loci.memory.stats()).storage)).persisted, kept);

  await page.click("#load-sample");
  await statusStarts(page, "Sample loaded");

  // No LLM: the bot shows the evidence it would use.
  const evidence = await chat(page, "Who is Maya's physio?");
  assert.match(evidence, /Okafor/);
  assert.equal(await page.textContent("#evidence li:first-child strong"), "2024-04-14-marathon");

  // With the test server as the endpoint: answer() replies; the key is typed but not remembered.
  await page.fill("#base-url", llmUrl);
  await page.fill("#model", "scripted");
  await page.fill("#api-key", "sk-demo-secret");
  await page.click("#settings button[type=submit]");
  await statusStarts(page, "Replies come from");
  const answer = await chat(page, "Who is the physio?");
  assert.match(answer, /Okafor/);
  // The meters refresh after the status says "Replied" (the page's `finally`): wait for them, then check.
  const spent = /· [1-9][0-9]* LLM calls, [1-9][0-9]* tokens/;
  await page.waitForFunction((re) => new RegExp(re).test(document.querySelector("#meters").textContent), spent.source,
    { timeout: 30_000 }).catch(() => {});
  assert.match(await page.textContent("#meters"), spent);
  await page.screenshot({ path: join(shots, "chat.png"), fullPage: true });
  assert.ok(!(await page.evaluate(() => localStorage.getItem("loci-demo-llm"))).includes("sk-demo-secret"),
    "the API key is not persisted unless asked");

  // Distillation through the same endpoint: episodes and facts appear in the inspector, with provenance.
  await page.click("#memory-panel summary");
  await page.click("#distill");
  await statusStarts(page, "Distilled:");
  assert.match(await page.textContent("#status"), /Distilled: \d+ jobs → [1-9]\d* episodes, [1-9]\d* facts/);
  assert.ok(await page.locator("#episodes li").count() > 0, "episodes listed");
  assert.ok(await page.locator("#facts li").count() > 0, "facts listed");
  assert.match(await page.textContent("#facts"), /episode \d+ · turns \d+/, "facts show their provenance");
  await page.screenshot({ path: join(shots, "memory-inspector.png"), fullPage: true });

  // Reload: the memory and the endpoint (without key) come back; the answer needs the earlier cooking session.
  await page.reload();
  await ready(page);
  // 16 sample turns + the two exchanges so far (the question without LLM, then question and answer).
  assert.match(await page.textContent("#stats"), /^5 sessions · 19 turns/);
  const later = await chat(page, "Which starch should she try for the cheese bread?");
  assert.match(later, /polvilho/);

  // Stored markup renders as text.
  await page.fill("#message", `<img src=x onerror="window.__pwned=1"> my cat is called <b>Biscuit</b>`);
  await page.click("#remember-only");
  await statusStarts(page, "Stored");
  await chat(page, "What is my cat called? Biscuit?");
  assert.match(await page.textContent("#evidence"), /<img src=x onerror=/, "the markup is shown as text");
  assert.equal(await page.locator("#transcript img, #evidence img").count(), 0, "no element made from memory text");
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  await page.screenshot({ path: join(shots, "inert-markup.png"), fullPage: true });

  // The endpoint fails (401: not retried): the reply is a typed error on the status line, and the user's message
  // is still remembered.
  const control = llmUrl.replace(/\/v1\/?$/, "");
  const turnsBeforeFailure = await page.evaluate(async () => (await window.loci.memory.stats()).turns);
  await fetch(`${control}/__script`, { method: "POST", body: JSON.stringify([{ status: 401, message: "bad key", times: 50 }]) });
  await page.fill("#message", "My sister Ana arrives on Friday.");
  await page.click("#send");
  await page.waitForFunction(() => document.querySelector("#send").disabled === false
    && document.querySelector("#status").textContent !== "Thinking…", null, { timeout: 60_000 });
  assert.match(await page.textContent("#status"), /^LLM_[A-Z_]+: /, "the failure is reported, with its code");
  assert.equal(await page.evaluate(async () => (await window.loci.memory.stats()).turns), turnsBeforeFailure + 1,
    "the user's message is kept although the reply failed");
  await fetch(`${control}/__reset`, { method: "POST" });

  // A small local model: its window and the wait for a silent model are set in the form, reach `setLlm` (which
  // checks them), and come back after a reload (they are not secrets).
  const useSettings = async (contextTokens, timeoutS) => {
    await page.fill("#context-tokens", contextTokens);
    await page.fill("#timeout-s", timeoutS);
    await page.click("#settings button[type=submit]");
  };
  await useSettings("100", "");
  await page.waitForFunction(() => /contextTokens/.test(document.querySelector("#status").textContent), null,
    { timeout: 10_000 });
  assert.match(await page.textContent("#status"), /^INVALID_INPUT: .*`llm\.contextTokens` must be at least 512/);
  // A model that stays silent for 2.5 s before each reply: a 1 s wait gives up (typed), a 30 s wait gets the reply.
  await fetch(`${control}/__config`, { method: "POST", body: JSON.stringify({ latencyMs: 2_500 }) });
  await useSettings("2048", "1");
  await statusStarts(page, "Replies come from");
  await page.fill("#message", "Who is the physio?");
  await page.click("#send");
  await page.waitForFunction(() => document.querySelector("#send").disabled === false
    && document.querySelector("#status").textContent !== "Thinking…", null, { timeout: 60_000 });
  assert.match(await page.textContent("#status"), /^TIMEOUT: /, "a 1 s wait gives up on a model silent for 2.5 s");
  await useSettings("2048", "30");
  await statusStarts(page, "Replies come from");
  assert.match(await chat(page, "Who is the physio?"), /Okafor/, "a 30 s wait gets the slow model's reply");
  // The window: a pasted document of 24,000 characters is recalled, and every prompt is cut to fit 2,048 tokens
  // with its reply (~4.7 characters a token in this text; with the default window of 4,096 the longest prompt was 14,178 characters).
  await page.evaluate(() => window.loci.memory.addMessages([{ role: "user",
    content: `Notes from Dr Okafor's clinic: ${"the knee needs rest and slow stretching every morning before a run ".repeat(360)}` }],
  { session: "pasted-notes" }));
  await fetch(`${control}/__reset`, { method: "POST" });
  await chat(page, "What did Dr Okafor's clinic notes say about the knee?");
  const sent = (await (await fetch(`${control}/__log`)).json())
    .map((r) => r.body.messages.map((m) => m.content).join("\n").length);
  assert.ok(sent.length > 0 && Math.max(...sent) > 2_000 && Math.max(...sent) < 9_000,
    `prompts of ${sent.join(", ")} characters for a 2,048-token window`);
  await page.reload();
  await ready(page);
  assert.deepEqual([await page.inputValue("#context-tokens"), await page.inputValue("#timeout-s")], ["2048", "30"]);
  await useSettings("", "");
  await statusStarts(page, "Replies come from");
  await fetch(`${control}/__reset`, { method: "POST" });

  // Stop while the reply is being written: what was written stays, marked; the user's message is remembered, the
  // unfinished reply is not.
  await fetch(`${control}/__config`, { method: "POST", body: JSON.stringify({ pieceMs: 400 }) });
  const turnsBeforeStop = await page.evaluate(async () => (await window.loci.memory.stats()).turns);
  const botsBeforeStop = await page.locator("#transcript li.bot").count();
  await page.fill("#message", "Who is the physio?");
  await page.click("#send");
  await page.waitForFunction((n) => document.querySelectorAll("#transcript li.bot").length > n
    && document.querySelector("#transcript li.bot:last-child").textContent.length > "loci".length, botsBeforeStop,
  { timeout: 60_000 });
  assert.ok(await page.isVisible("#stop"), "Stop is offered while the reply is written");
  await page.click("#stop");
  await statusStarts(page, "Stopped.");
  assert.match(await page.locator("#transcript li.bot").last().textContent(), /\[stopped\]$/);
  assert.equal(await page.evaluate(async () => (await window.loci.memory.stats()).turns), turnsBeforeStop + 1,
    "the question is remembered, the unfinished reply is not");
  assert.ok(!(await page.isVisible("#stop")) && !(await page.isDisabled("#send")));
  await fetch(`${control}/__reset`, { method: "POST" });

  // The API key typed above (a canary) is nowhere at rest: not in IndexedDB, Cache Storage, local or session
  // storage, an export, or the console.
  const canary = "sk-demo-secret";
  const atRest = await page.evaluate(async (needle) => {
    const found = [];
    const text = (v) => { try { return JSON.stringify(v, (_, x) => ArrayBuffer.isView(x) ? Array.from(new Uint8Array(x.buffer)).map((b) => String.fromCharCode(b)).join("") : x); } catch { return String(v); } };
    for (const { name } of await indexedDB.databases()) {
      const db = await new Promise((ok, fail) => { const r = indexedDB.open(name); r.onsuccess = () => ok(r.result); r.onerror = () => fail(r.error); });
      for (const store of db.objectStoreNames) {
        const all = await new Promise((ok, fail) => {
          const r = db.transaction(store).objectStore(store).getAll(); r.onsuccess = () => ok(r.result); r.onerror = () => fail(r.error);
        });
        if (text(all).includes(needle)) found.push(`IndexedDB ${name}/${store}`);
      }
      db.close();
    }
    for (const name of await caches.keys()) {
      const cache = await caches.open(name);
      for (const request of await cache.keys()) {
        const body = new Uint8Array(await (await cache.match(request)).arrayBuffer());
        if (request.url.includes(needle) || new TextDecoder("latin1").decode(body).includes(needle)) found.push(`Cache ${request.url}`);
      }
    }
    for (const [label, storage] of [["localStorage", localStorage], ["sessionStorage", sessionStorage]]) {
      for (let i = 0; i < storage.length; i++) {
        const key = storage.key(i);
        if (key.includes(needle) || storage.getItem(key).includes(needle)) found.push(`${label} ${key}`);
      }
    }
    if (JSON.stringify(await window.loci.memory.export()).includes(needle)) found.push("export");
    return found;
  }, canary);
  const inConsole = consoleText.filter((t) => t.includes(canary));
  counts.key_hits = atRest.length + inConsole.length;
  assert.deepEqual([...atRest, ...inConsole], [], "the API key is nowhere at rest");

  // The policy is really in force (every response carries it), and nothing violated it.
  assert.equal(await page.evaluate(() => fetch(location.href).then((r) => r.headers.get("content-security-policy"))), csp);
  const pageViolations = (await page.evaluate(() => window.cspViolations)).length;
  counts.csp_violations = pageViolations + consoleViolations.length;
  // No CSP violation in the page, over the whole run (events since the last load; the console since the first).
  assert.deepEqual(await page.evaluate(() => window.cspViolations), [], "no securitypolicyviolation event");
  assert.deepEqual(consoleViolations, [], "no CSP report in the console");

  // loci in a module worker under the same CSP: onnxruntime-web loads without eval.
  const workerPage = await context.newPage();
  workerPage.on("console", (m) => /Content Security Policy/.test(m.text()) && consoleViolations.push(m.text()));
  await workerPage.goto(`${origin}/tests/e2e/worker.html`);
  const inWorker = await workerPage.evaluate(() => window.workerResult);
  counts.csp_violations = pageViolations + (inWorker.violations?.length ?? 0) + consoleViolations.length
    + (await workerPage.evaluate(() => window.cspViolations)).length;
  assert.deepEqual(inWorker, { top: "knee", violations: [] }, "a memory works in a worker under the strict CSP");
  assert.deepEqual(await workerPage.evaluate(() => window.cspViolations), []);
  assert.deepEqual(consoleViolations, [], "no CSP report in the console");
  console.log(`e2e: 0 CSP violations under "${csp}" (page and worker); the API key found 0 times at rest`);

  // The sync panel: the memory goes to the user's WebDAV folder sealed; a wrong passphrase is told as such.
  await page.evaluate(() => { document.getElementById("sync-panel").open = true; });
  await page.fill("#sync-url", `${davUrl}/demo`);
  await page.fill("#sync-passphrase", "demo sync passphrase");
  await page.click("#sync-now");
  await page.waitForFunction(() => /^Synced at|error/.test(document.getElementById("sync-state").textContent)
    || document.getElementById("sync-state").classList.contains("error"), null, { timeout: 120_000 });
  const synced = await page.textContent("#sync-state");
  assert.match(synced, /^Synced at .*sent [1-9]\d* change/, synced);
  await page.fill("#sync-passphrase", "another passphrase");
  await page.click("#sync-now");
  await page.waitForFunction(() => document.getElementById("sync-state").classList.contains("error"));
  assert.match(await page.textContent("#sync-state"), /passphrase does not open/);
  const davScan = await (await fetch(`${davUrl}/__canary?needle=${encodeURIComponent("demo sync passphrase")}`)).json();
  assert.ok(davScan.files >= 3 && davScan.hits === 0, JSON.stringify(davScan));
  console.log(`e2e: the demo synced with a WebDAV folder (${davScan.files} sealed files there): "${synced}"`);

  // A second tab of the demo works through the first (which holds the memory), and takes over when it closes.
  const second = await context.newPage();
  second.on("request", (r) => requests.push(r.url()));
  second.on("pageerror", (e) => console.error("second tab error:", e.message));
  second.on("console", (m) => /Content Security Policy/.test(m.text()) && consoleViolations.push(m.text()));
  await second.goto(`${origin}/www/`);
  await ready(second);
  // (its status line then says where replies come from: the endpoint saved by the first tab)
  assert.equal(await second.evaluate(() => window.loci.memory.isLeader), false);
  const turnsBefore = await page.evaluate(async () => (await window.loci.memory.stats()).turns);
  await second.fill("#message", "My neighbour's parrot is called Captain.");
  await second.click("#remember-only");
  await statusStarts(second, "Stored");
  assert.equal(await page.evaluate(async () => (await window.loci.memory.stats()).turns), turnsBefore + 1,
    "what the second tab remembers is in the memory the first holds");
  // A pasted document remembered in the second tab: the first embeds its other windows in the background, and the
  // second tab's meter hears when that is done (the leader's progress reaches it).
  const report = Array.from({ length: 480 }, (_, i) =>
    `Line ${i}: crate ${i} of the harbour inventory holds ${i * 7} lanterns.`).join("\n");
  await second.fill("#message", report);
  await second.click("#remember-only");
  // (the status says "Stored" from the message before: wait for the meter, refreshed once this one is stored)
  await second.waitForFunction(() => document.querySelector("#meters").textContent.includes("embedding 1 long message"),
    null, { timeout: 60_000 });
  await second.waitForFunction(() => !document.querySelector("#meters").textContent.includes("in the background"),
    null, { timeout: 60_000 });
  assert.equal(await second.evaluate(async () => (await window.loci.memory.stats()).pendingEmbeddings), 0);
  await page.close();
  await statusStarts(second, "The other tab closed");
  assert.equal(await second.evaluate(() => window.loci.memory.isLeader), true);
  assert.equal(await second.evaluate(async () => (await window.loci.memory.stats()).turns), turnsBefore + 2);
  await chat(second, "What is the parrot called?");
  assert.match(await second.textContent("#evidence"), /Captain/, "the second tab recalls after the takeover");
  assert.deepEqual(consoleViolations, [], "no CSP report in the console");
  console.log("e2e: a second tab followed the first (and heard its background embedding), then took over when it closed");

  // No telemetry: ort-web sends a beacon when a model session starts unless told not to, but only where it thinks a
  // real user is (not on localhost, not under automation), so on 127.0.0.1 above it could not have. Here the demo
  // is served under a hostname of its own, with `navigator.webdriver` false and `sendBeacon` recorded, not sent.
  const away = await browser.newContext();
  await away.addInitScript(() => {
    Object.defineProperty(Navigator.prototype, "webdriver", { get: () => false });
    window.beacons = [];
    navigator.sendBeacon = (url) => { window.beacons.push(String(url)); return true; };
  });
  const awayPage = await away.newPage();
  const awayOrigin = origin.replace("127.0.0.1", "loci.test");
  const awayRequests = [];
  awayPage.on("request", (r) => awayRequests.push(r.url()));
  await awayPage.goto(`${awayOrigin}/www/`);
  await ready(awayPage);
  assert.match(await awayPage.textContent("#status"), /Ready: embedding on/, "the model session started");
  await awayPage.evaluate(() => window.loci.memory.recall("anything at all"));
  assert.equal(await awayPage.evaluate(() => navigator.webdriver), false);
  assert.deepEqual(await awayPage.evaluate(() => window.beacons), [], "no telemetry beacon");
  assert.deepEqual(awayRequests.filter((u) => !u.startsWith(awayOrigin) && !/^(data|blob):/.test(u)), []);
  await away.close();
  console.log("e2e: no telemetry beacon from a page that is not on localhost and not under automation");

  // The in-browser LLM, on a fresh profile (its own memory): the model loads from the page's origin with progress,
  // a fact remembered is answered by SmolLM2-135M through loci/llm, the page shows the speed and what the memory
  // added to the prompt, under the same CSP with no violation.
  const localStarted = Date.now();
  const inBrowser = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await inBrowser.addInitScript(() => {
    window.cspViolations = [];
    document.addEventListener("securitypolicyviolation",
      (e) => window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  const localPage = await inBrowser.newPage();
  localPage.on("request", (r) => requests.push(r.url()));
  localPage.on("pageerror", (e) => console.error("in-browser LLM page error:", e.message));
  localPage.on("console", (m) => /Content Security Policy/.test(m.text()) && consoleViolations.push(m.text()));
  await localPage.goto(`${origin}/www/`);
  await ready(localPage);
  const progressSeen = localPage.waitForFunction(() => !document.querySelector("#local-progress").hidden
    && document.querySelector("#local-status").textContent.startsWith("Downloading the model"), null, { timeout: 60_000 });
  await localPage.click("#run-local");
  await progressSeen;
  await statusStarts(localPage, "Replies come from SmolLM2-135M running in this browser", 120_000);
  assert.match(await localPage.textContent("#local-status"), /^SmolLM2-135M loaded in [\d.]+ s: \d+ threads?, 2,048-token window\.$/);
  await localPage.fill("#message", "My dog's name is Biscuit, he is a beagle.");
  await localPage.click("#remember-only");
  await statusStarts(localPage, "Stored");
  const localAnswer = await chat(localPage, "What is my dog's name?", 240_000);
  assert.match(localAnswer, /Biscuit/, `the in-browser model answers from memory: ${JSON.stringify(localAnswer)}`);
  assert.ok(await localPage.isVisible("#context"), "what the memory added to the prompt is shown");
  assert.match(await localPage.textContent("#context"), /Biscuit, he is a beagle/);
  assert.match(await localPage.textContent("#context-summary"), /^What the memory added to the prompt \(\d+ tokens/);
  assert.match(await localPage.textContent("#local-speed"),
    /^Last call: read \d+ prompt tokens at [\d.]+ tokens\/s, wrote \d+ at [\d.]+ tokens\/s/);
  const localStats = await localPage.evaluate(() => window.loci.callStats);
  assert.ok(localStats.length >= 1 && localStats.every((s) => s.outputTokensPerSecond > 0), JSON.stringify(localStats));
  await localPage.screenshot({ path: join(shots, "in-browser-llm.png"), fullPage: true });
  assert.deepEqual(await localPage.evaluate(() => window.cspViolations), [], "no CSP violation with wllama's worker");
  assert.deepEqual(consoleViolations, [], "no CSP report in the console");
  const last = localStats.at(-1);
  console.log(`e2e: the in-browser LLM answered ${JSON.stringify(localAnswer)} (${last.promptTokens} prompt tokens at `
    + `${last.promptTokensPerSecond.toFixed(1)} tok/s, ${last.outputTokens} written at ${last.outputTokensPerSecond.toFixed(1)} `
    + `tok/s; ${((Date.now() - localStarted) / 1000).toFixed(0)} s with the model's load)`);
  await inBrowser.close();

  const foreign = requests.filter((u) => !u.startsWith(origin) && !u.startsWith(llmUrl) && !u.startsWith(davUrl)
    && !/^(data|blob):/.test(u));
  assert.deepEqual(foreign, [], "nothing leaves the page but calls to the user's endpoint");
  console.log(`e2e demo: ok (${requests.length} requests: the page's origin and the configured endpoint only)`);
} catch (e) {
  failed = true;
  console.error(e);
  try { console.error("status:", await browser.contexts()[0].pages()[0].textContent("#status")); } catch {}
} finally {
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify(counts, null, 2) + "\n");
  await browser.close();
  server.close();
  llmServer.kill();
  webdav.stdin.end();
  webdav.kill();
}
process.exit(failed ? 1 : 0);
