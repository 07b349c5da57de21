// The demo with a real small model (../shared/tools/local-llm: llama.cpp + a Qwen2.5-Coder GGUF from PyPI), driven
// as a user would: the endpoint, its window and its wait typed into the form, the sample loaded (distillation starts
// in the background), a question asked while the model distils, "Distill now" waited for, a question asked with the
// model idle, then a pasted document of ~40,000 characters and a question about a line past its middle. The scripted
// server proves determinism; this proves the product with a model that is slow and imperfect. Not part of
// `npm test` (minutes of model time): run it after an LLM-facing change.
//
//   npm run test:real-model -- [--model qwen-coder-1.5b] [--threads 2] [--url URL] [--json FILE]
//
// --url uses an endpoint already running (its model name is sent as "local"). Prints what it measured; fails when a
// reply is empty or misses the fact it asks for, when distillation ends in an error, parks a job or distils nothing.
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { startLocalLlm } from "../../scripts/local-llm.mjs";
import { serve } from "../../scripts/serve.mjs";
import { chat, launchChromium, ready, statusStarts } from "./demo-page.mjs";

const argv = process.argv.slice(2);
const arg = (name, fallback) => (argv.includes(name) ? argv[argv.indexOf(name) + 1] : fallback);
const model = arg("--model", "qwen-coder-1.5b");
const threads = Number(arg("--threads", "2"));
const llm = arg("--url") ? { url: arg("--url"), stop: () => {} } : await startLocalLlm({ model, threads });
if (llm.skipped) {
  console.error(`the local model cannot run here: ${llm.skipped}`);
  process.exit(1);
}
const server = await serve(0, []);
const origin = `http://127.0.0.1:${server.address().port}`;
const browser = await launchChromium();
const figures = { model: arg("--url") ? "endpoint at --url" : `${model}, ${threads} threads` };
const REPLY_MS = 10 * 60_000; // a 1.5B model on 2 cores reads ~40 prompt tokens/s and writes ~10 tokens/s

/** Asks `question` and times the reply: until its first text, and until the status says "Replied". */
async function timedChat(page, question) {
  const started = Date.now();
  const bots = await page.locator("#transcript li.bot").count();
  const firstText = page.waitForFunction((n) => {
    const last = document.querySelectorAll("#transcript li.bot")[n];
    return (last && last.textContent.trim().length > "loci".length)
      || document.querySelector("#status").classList.contains("error");
  }, bots, { timeout: REPLY_MS, polling: 50 }).then(() => Date.now() - started, () => null);
  const reply = await chat(page, question, REPLY_MS);
  return { reply, firstTextMs: await firstText, wholeMs: Date.now() - started, status: await page.textContent("#status") };
}

/** ~40,000 characters of a contractor's report, one line (past the middle) unlike the others. */
function renovationReport() {
  const rooms = ["kitchen", "hallway", "attic", "garage", "porch", "cellar", "study", "bathroom"];
  const tasks = ["repainted", "inspected", "cleaned", "measured", "photographed", "rewired", "sealed", "sanded"];
  const line = "The spare key for the cabin is hidden under the blue flowerpot beside the woodshed.";
  const lines = [];
  for (let i = 0; i < 420; i++) {
    if (i === 260) lines.push(line);
    lines.push(`Item ${i}: the ${rooms[i % 8]} was ${tasks[Math.floor(i / 3) % 8]} on day ${1 + (i % 28)} by the ` +
      `crew, and the notes say it took ${2 + (i % 5)} hours.`);
  }
  return { report: lines.join("\n"), fact: { at: 261, line } };
}

let failed = false;
try {
  const page = await (await browser.newContext()).newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  page.on("dialog", (d) => d.accept());
  await page.goto(`${origin}/www/`);
  await ready(page);
  await page.evaluate(() => window.loci.memory.forgetAll());
  await page.reload();
  await ready(page);

  await page.fill("#base-url", llm.url);
  await page.fill("#model", "local");
  await page.fill("#context-tokens", "4096"); // llm_endpoint.py's window
  await page.fill("#timeout-s", "300");
  await page.click("#settings button[type=submit]");
  await statusStarts(page, "Replies come from");
  await page.click("#load-sample");
  await statusStarts(page, "Sample loaded");
  const distillStarted = Date.now();

  // Distillation of the sample now runs in the background; the chat must not wait for it.
  const busy = await timedChat(page, "Who is Maya's physio?");
  const jobsLeftThen = await page.evaluate(async () => (await window.loci.memory.stats()).distill.jobs);
  console.log(`while distilling (${jobsLeftThen} jobs left after it): first text ${busy.firstTextMs} ms, whole ` +
    `${busy.wholeMs} ms — ${busy.reply.trim()}`);
  assert.match(busy.reply, /Okafor/i, "the answer names the physio");

  await page.click("#memory-panel summary");
  await page.click("#distill");
  await page.waitForFunction(() => !document.querySelector("#distill").disabled, null, { timeout: 60 * 60_000 });
  const distillMs = Date.now() - distillStarted;
  const distilled = await page.evaluate(async () => {
    const m = window.loci.memory;
    return { stats: (await m.stats()).distill, facts: (await m.facts()).map((f) => f.statement),
      episodes: (await m.episodes()).map((e) => e.title) };
  });
  const distillStatus = await page.textContent("#status");
  console.log(`distilled in ${(distillMs / 1000).toFixed(0)} s: ${distillStatus}`);
  for (const title of distilled.episodes) console.log(`  episode: ${title}`);
  for (const fact of distilled.facts) console.log(`  fact: ${fact}`);
  assert.match(distillStatus, /^Distilled: /, "distillation ends without an error");
  assert.ok(distilled.stats.episodes > 0 && distilled.stats.factsActive > 0, JSON.stringify(distilled.stats));
  assert.deepEqual(distilled.stats.parked, [], "no job parked");

  const idle = await timedChat(page, "Which running club does Maya train with?");
  console.log(`idle: first text ${idle.firstTextMs} ms, whole ${idle.wholeMs} ms — ${idle.reply.trim()}`);
  assert.match(idle.reply, /Riverside/i, "the answer names the club");

  // A pasted document of ~40,000 characters, far over the model's window: the question is about one line past its
  // middle, which a prompt holding the document's head would not have.
  const { report, fact } = renovationReport();
  const pasted = await timedChat(page, `Here is the renovation report from the contractor:\n${report}`);
  console.log(`a ${report.length}-character paste: reply in ${pasted.wholeMs} ms — ${pasted.reply.trim().slice(0, 200)}`);
  const buried = await timedChat(page, "Where is the spare key for the cabin hidden?");
  console.log(`about its line ${fact.at}: first text ${buried.firstTextMs} ms, whole ${buried.wholeMs} ms — ` +
    `${buried.reply.trim()}`);
  assert.match(buried.reply, /flowerpot/i, "the answer finds the line of the pasted document");

  Object.assign(figures, {
    pasted_chars: report.length, pasted_reply_ms: pasted.wholeMs, answer_about_the_paste_ms: buried.wholeMs,
    answer_while_distilling_first_text_ms: busy.firstTextMs, answer_while_distilling_ms: busy.wholeMs,
    distill_jobs_left_after_that_answer: jobsLeftThen, answer_idle_first_text_ms: idle.firstTextMs,
    answer_idle_ms: idle.wholeMs, distill_ms: distillMs, episodes: distilled.stats.episodes,
    facts_active: distilled.stats.factsActive, facts_superseded: distilled.stats.factsSuperseded,
    status_while_distilling: busy.status, status_idle: idle.status,
  });
  console.log(JSON.stringify(figures, null, 2));
  if (arg("--json")) writeFileSync(arg("--json"), `${JSON.stringify(figures, null, 2)}\n`);
} catch (e) {
  failed = true;
  console.error(e);
  try { console.error("status:", await browser.contexts()[0].pages()[0].textContent("#status")); } catch {}
} finally {
  await browser.close();
  server.close();
  llm.stop();
}
process.exit(failed ? 1 : 0);
