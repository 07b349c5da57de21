#!/usr/bin/env node
// `npm run bench:paste [-- --json PATH]`
//
// A pasted document is a normal message: does the page stay usable while loci takes it in? On the demo page in
// Debian's headless Chromium (no LLM: the reply is recall's evidence), pastes of 2,000, 8,000 and 40,000 characters
// are each recalled with (the question the demo asks first) and then added, timed apart; then the 40,000-character
// one is sent through the chat box as a user would, and the page's long tasks (PerformanceObserver) are collected.
// Also times bulk ingestion (80 paired turns of three lengths), which the embedder's per-call token budget must not slow.
// Prints the times, the longest task and how many there were.
import { writeFileSync } from "node:fs";
import { localBrowser } from "./local-browser.mjs";

const argv = process.argv.slice(2);
const jsonPath = argv.includes("--json") ? argv[argv.indexOf("--json") + 1] : null;

function report(chars) {
  const lines = [];
  for (let i = 0; lines.join("\n").length < chars; i++) {
    lines.push(`Item ${i}: the kitchen was repainted on day ${1 + (i % 28)} by the crew, and the notes say it took ` +
      `${2 + (i % 5)} hours.`);
  }
  return `Here is the report:\n${lines.join("\n")}`.slice(0, chars);
}

const { origin, browser, close } = await localBrowser();
let failed = false;
try {
  const page = await browser.newPage();
  page.on("console", (m) => m.type() === "error" && console.error("[page]", m.text()));
  const fresh = async () => {
    await page.goto(`${origin}/www/`);
    await page.waitForFunction(() => window.loci && window.loci.memory, null, { timeout: 120_000 });
    await page.evaluate(() => window.loci.memory.forgetAll());
    await page.reload();
    await page.waitForFunction(() => window.loci && window.loci.memory, null, { timeout: 120_000 });
  };
  await fresh();
  const sizes = [];
  for (const chars of [2_000, 8_000, 40_000]) {
    const r = await page.evaluate(async (text) => {
      const m = window.loci.memory;
      let t = performance.now();
      await m.recall(text, { k: 3, prune: "extractive", order: "rank" });
      const recallMs = performance.now() - t;
      t = performance.now();
      await m.addMessages([{ role: "user", content: text }]);
      const addMs = performance.now() - t;
      // Until recall uses every window of it (the rest are embedded in the background), a short question 250 ms
      // after the last answer, timed from when it was due: that includes waiting for the model call on the page's
      // thread to end, as a user's click would.
      const during = [];
      while ((await m.stats()).pendingEmbeddings > 0) {
        const due = performance.now() + 250;
        await new Promise((ok) => setTimeout(ok, 250));
        await m.recall("When was the kitchen repainted?", { k: 3 });
        during.push(performance.now() - due);
      }
      during.sort((a, b) => a - b);
      return { recall_ms: Math.round(recallMs), add_ms: Math.round(addMs), all_windows_ms: Math.round(performance.now() - t),
        recalls_meanwhile: during.length, recall_meanwhile_p50_ms: Math.round(during[during.length >> 1] ?? 0),
        recall_meanwhile_max_ms: Math.round(during.at(-1) ?? 0) };
    }, report(chars));
    sizes.push({ chars, ...r });
  }
  // Bulk ingestion, which the calls' token budget must not slow: 80 paired turns of ~30, ~75 and ~150 tokens.
  const bulk = await page.evaluate(async () => {
    const m = window.loci.memory;
    const words = "the crew repainted kitchen garage porch day notes hours took measured rewired sealed cellar study".split(" ");
    const out = [];
    for (const len of [12, 30, 60]) {
      const msgs = Array.from({ length: 160 }, (_, i) => ({ role: i % 2 ? "assistant" : "user",
        content: `${Array.from({ length: len }, (_, j) => words[(i * 7 + j * 3) % words.length]).join(" ")} ${i}.` }));
      const t = performance.now();
      await m.addMessages(msgs, { session: `bulk-${len}` });
      out.push({ words_per_message: len, add_ms: Math.round(performance.now() - t) });
    }
    return out;
  });
  await fresh();
  await page.evaluate(() => {
    window.longTasks = [];
    new PerformanceObserver((l) => l.getEntries().forEach((e) => window.longTasks.push(e.duration)))
      .observe({ entryTypes: ["longtask"] });
  });
  await page.fill("#message", report(40_000));
  const started = Date.now();
  await page.click("#send", { timeout: 120_000 });
  const clickMs = Date.now() - started;
  await page.waitForFunction(() => document.querySelector("#status").textContent.startsWith("Replied"), null,
    { timeout: 300_000 });
  const sendMs = Date.now() - started;
  await page.evaluate(async () => {
    while ((await window.loci.memory.stats()).pendingEmbeddings > 0) await new Promise((ok) => setTimeout(ok, 20));
  });
  const allWindowsMs = Date.now() - started;
  const tasks = await page.evaluate(() => window.longTasks);
  const out = {
    sizes, bulk, send_40k_ms: sendMs, all_windows_40k_ms: allWindowsMs, click_acknowledged_ms: clickMs, long_tasks: tasks.length,
    longest_task_ms: Math.round(Math.max(0, ...tasks)), long_tasks_total_ms: Math.round(tasks.reduce((a, b) => a + b, 0)),
  };
  for (const s of sizes) {
    console.log(`${String(s.chars).padStart(6)} chars: recall ${s.recall_ms} ms, add ${s.add_ms} ms, ` +
      `every window embedded after ${s.all_windows_ms} ms; ${s.recalls_meanwhile} short recalls meanwhile, p50 ` +
      `${s.recall_meanwhile_p50_ms} ms, max ${s.recall_meanwhile_max_ms} ms`);
  }
  console.log(`80 paired turns of ${bulk.map((b) => `${b.words_per_message * 2} words: ${b.add_ms} ms`).join(", ")}`);
  console.log(`sent through the chat box (40,000 chars): replied in ${sendMs} ms, every window embedded after ` +
    `${allWindowsMs} ms; the click was acknowledged after ` +
    `${clickMs} ms; ${tasks.length} long tasks, the longest ${out.longest_task_ms} ms, ${out.long_tasks_total_ms} ms in all`);
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify(out, null, 2));
} catch (e) {
  console.error(e);
  failed = true;
} finally {
  await close();
}
process.exit(failed ? 1 : 0);
