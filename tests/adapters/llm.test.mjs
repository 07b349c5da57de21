// `loci/llm` in headless Chromium (Debian's, driven by playwright-core): `fromWllama` over the real @wllama/wllama
// (pinned devDependency) running the smallest chat GGUF the registries ship (SmolLM2-135M-Instruct, from PyPI via
// scripts/setup.mjs) on one thread, on real memories. A short chat: the first session tells the dog's name, the
// second session's `memory.answer()` gives it, and a control memory without the first session does not. Then the
// helper's failures (a prompt over the window, an abort). `fromWebLLM` and `fromPromptApi` cannot run here (no
// GPU, no Chrome built-in model): tests/adapters/llm-fakes.test.mjs checks them against their documented interfaces.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { bundlePage, openTestPage } from "./bundle-page.mjs";
import { serve } from "../../scripts/serve.mjs";
import { launchChromium } from "../e2e/demo-page.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const started = Date.now();
const out = join(root, "target", "llm-test");
for (const f of ["www/assets/llm/SmolLM2-135M-Instruct.Q4_1.gguf", "www/assets/wllama/wllama.wasm"]) {
  assert.ok(existsSync(join(root, f)), `${f} is missing: run \`npm run setup\``);
}

await bundlePage(join(root, "tests", "adapters", "llm-page.js"), out);

const server = await serve(0, ["target"]);
const origin = `http://127.0.0.1:${server.address().port}`;
const browser = await launchChromium();
const seconds = (ms) => (ms / 1000).toFixed(1);
let failed = false;
try {
  const { page, requests } = await openTestPage(browser, `${origin}/target/llm-test/index.html`);

  const loaded = await page.evaluate(() => window.llmTest.load());
  assert.equal(loaded.contextTokens, 2048, "the helper's window is the loaded context's n_ctx");
  assert.equal(loaded.threads, 1);
  assert.ok(loaded.progressEvents > 0 && loaded.lastProgress === 1, JSON.stringify(loaded));
  assert.deepEqual(loaded.errors, {
    notLoaded: "LociError/INVALID_INPUT", notAWllama: "LociError/INVALID_INPUT", tooLarge: "LociError/INVALID_INPUT",
    tooSmall: "LociError/INVALID_INPUT", unknownOption: "LociError/INVALID_INPUT",
  });

  const chat = await page.evaluate(() => window.llmTest.chat());
  // The model's reply to the first session was streamed through onText and has token counts.
  assert.ok(chat.reply.trim().length > 0, "the model replied");
  assert.ok(chat.heard > 1 && chat.heardLast === chat.reply, `streamed: ${chat.heard} pieces`);
  assert.ok(chat.replyUsage.inputTokens > 10 && chat.replyUsage.outputTokens > 0, JSON.stringify(chat.replyUsage));
  // The second session's answer uses the first session's fact; the control, without it, does not have it.
  assert.match(chat.answerContext, /Biscuit/, "the memory put the first session into the prompt");
  assert.match(chat.answer, /Biscuit/i, `the answer uses the first session's fact: ${JSON.stringify(chat.answer)}`);
  assert.ok(chat.streamed > 0, "the answer was heard as it was written");
  assert.ok(!/Biscuit/i.test(chat.controlContext), chat.controlContext);
  assert.ok(!/Biscuit/i.test(chat.controlAnswer), `the control memory cannot know the name: ${JSON.stringify(chat.controlAnswer)}`);
  // Speeds, from llama.cpp's own timings.
  const answers = chat.stats.filter((s) => s.json);
  assert.ok(answers.length >= 2, JSON.stringify(chat.stats));
  for (const s of chat.stats) {
    assert.ok(s.promptTokens > 0 && s.outputTokens > 0 && s.outputTokensPerSecond > 0, JSON.stringify(s));
  }

  const failures = await page.evaluate(() => window.llmTest.failures());
  assert.equal(failures.overflow, "LociError/LLM_CONTEXT_EXCEEDED", "a prompt over n_ctx is loci's context error");
  assert.equal(failures.aborted, "AbortError", JSON.stringify(failures));
  assert.ok(failures.after.length > 0, "the model answers after an abort");

  const foreign = requests.filter((u) => !u.startsWith(origin) && !/^(data|blob):/.test(u));
  assert.deepEqual(foreign, [], "nothing fetched from outside the page's origin (no CDN)");

  const speed = (list, key) => list.map((s) => s[key]).filter((n) => n > 0);
  const range = (xs) => `${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)}`;
  console.log(`llm (wllama + SmolLM2-135M Q4_1, 1 thread): load ${seconds(loaded.loadMs)} s; first-session reply `
    + `${seconds(chat.replyMs)} s; answer() ${seconds(chat.answerMs)} s → ${JSON.stringify(chat.answer)} (control: `
    + `${JSON.stringify(chat.controlAnswer)}); prompt ${range(speed(chat.stats, "promptTokensPerSecond"))} tok/s, `
    + `generation ${range(speed(chat.stats, "outputTokensPerSecond"))} tok/s over ${chat.stats.length} calls; `
    + `abort stopped in ${seconds(failures.abortedAfterMs)} s`);
  console.log(`llm: ok (${((Date.now() - started) / 1000).toFixed(0)} s)`);
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  await browser.close();
  server.close();
}
process.exit(failed ? 1 : 0);
