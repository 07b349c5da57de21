#!/usr/bin/env node
// `npm run bench:responsive [-- --json PATH] [--latency MS] [--rounds N] [--answers N] [--llm-url URL --model NAME]`
//
// Does the chat wait on distillation? The scripted OpenAI-compatible server (tests/llm-server) answers every call
// after --latency ms (default 3,000: a small local model), bench/responsive.html opens two memories in Debian's
// headless Chromium, one distilling in the background through that server and one idle, and times addMessages
// (one user + assistant exchange, as a chat sends them) and recall on both, alternating call by call.
// Prints p50/p95 of each and the busy/idle ratios (target: p95 within 1.5× of idle). Then `answer()` on the busy
// memory while its jobs wait on the model, and on the same memory with its jobs held, the server set to work on one
// request at a time as a local model does (target: p50 within 1.5×). `--llm-url` puts a real model (an
// OpenAI-compatible endpoint, e.g. ../shared/tools/local-llm) in the scripted server's place.
import { writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { localBrowser, scriptedLlm } from "./local-browser.mjs";

const argv = process.argv.slice(2);
const value = (name, d) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : d; };
const jsonPath = value("--json");
const latencyMs = Number(value("--latency", 3000));
const rounds = Number(value("--rounds", 60));
const answers = Number(value("--answers", 6));
const realUrl = value("--llm-url");
const model = value("--model", "scripted");

const server = await scriptedLlm({ latencyMs, slots: 1 });
const llmOrigin = server.origin;

const { origin, browser, close } = await localBrowser();
let failed = false;
try {
  const page = await browser.newPage();
  page.on("console", (m) => m.type() === "error" && console.error("[page]", m.text()));
  await page.goto(`${origin}/bench/responsive.html`);
  await page.waitForFunction(() => window.responsive);
  const r = await page.evaluate((o) => window.responsive(o),
    { llmUrl: realUrl ?? `${llmOrigin}/v1`, model, rounds, window: 4, historyTurns: 60, pauseMs: 250, answers });
  const ratio = (a, b) => +(a / b).toFixed(2);
  const out = {
    llm: realUrl ? model : `scripted, ${latencyMs} ms/call, one request at a time`,
    latency_ms: realUrl ? null : latencyMs,
    rounds,
    cpus: cpus().length,
    load: +loadavg()[0].toFixed(2),
    add_messages_p50_ms_idle: +r.add.idle.p50.toFixed(1),
    add_messages_p95_ms_idle: +r.add.idle.p95.toFixed(1),
    add_messages_p50_ms_busy: +r.add.busy.p50.toFixed(1),
    add_messages_p95_ms_busy: +r.add.busy.p95.toFixed(1),
    recall_p50_ms_idle: +r.recall.idle.p50.toFixed(1),
    recall_p95_ms_idle: +r.recall.idle.p95.toFixed(1),
    recall_p50_ms_busy: +r.recall.busy.p50.toFixed(1),
    recall_p95_ms_busy: +r.recall.busy.p95.toFixed(1),
    add_messages_p95_busy_over_idle: ratio(r.add.busy.p95, r.add.idle.p95),
    recall_p95_busy_over_idle: ratio(r.recall.busy.p95, r.recall.idle.p95),
    answer_p50_ms_idle: +r.answer.idle.p50.toFixed(0),
    answer_p50_ms_busy: +r.answer.busy.p50.toFixed(0),
    answer_p95_ms_idle: +r.answer.idle.p95.toFixed(0),
    answer_p95_ms_busy: +r.answer.busy.p95.toFixed(0),
    answer_p50_busy_over_idle: ratio(r.answer.busy.p50, r.answer.idle.p50),
    answers_while_busy: r.answersBusy,
    answers,
    busy_rounds: r.busyRounds,
    llm_calls_during: r.llmCalls,
    jobs_reported: r.jobsReported,
    distill_errors: r.distillErrors.length,
    episodes: r.episodes,
    facts: r.facts,
  };
  console.log(`
| ${rounds} rounds, ${out.llm} | p50 idle | p50 busy | p95 idle | p95 busy | p95 busy/idle |
|---|---|---|---|---|---|
| addMessages (ms) | ${out.add_messages_p50_ms_idle} | ${out.add_messages_p50_ms_busy} | ${out.add_messages_p95_ms_idle} | ${out.add_messages_p95_ms_busy} | ${out.add_messages_p95_busy_over_idle} |
| recall (ms) | ${out.recall_p50_ms_idle} | ${out.recall_p50_ms_busy} | ${out.recall_p95_ms_idle} | ${out.recall_p95_ms_busy} | ${out.recall_p95_busy_over_idle} |

| ${answers} answers, ${out.llm} | p50 idle | p50 busy | p95 idle | p95 busy | p50 busy/idle |
|---|---|---|---|---|---|
| answer (ms) | ${out.answer_p50_ms_idle} | ${out.answer_p50_ms_busy} | ${out.answer_p95_ms_idle} | ${out.answer_p95_ms_busy} | ${out.answer_p50_busy_over_idle} |

busy: distillation queued in ${out.busy_rounds}/${rounds} rounds and before ${out.answers_while_busy}/${answers} answers; ${out.llm_calls_during} LLM calls, ${out.jobs_reported} jobs done, ${out.distill_errors} errors; ${out.episodes} episodes, ${out.facts} facts`);
  console.log(JSON.stringify(out));
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify(out, null, 2) + "\n");
  if (out.busy_rounds < rounds / 2 || (out.llm_calls_during === 0 && out.jobs_reported === 0)) {
    console.error("the busy memory was not distilling during most of the run: the comparison says nothing");
    failed = true;
  }
} catch (e) {
  console.error(e);
  failed = true;
} finally {
  await close();
  server.kill();
}
process.exit(failed ? 1 : 0);
