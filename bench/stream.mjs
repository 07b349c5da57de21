#!/usr/bin/env node
// `npm run bench:stream [-- --json PATH] [--rounds N] [--piece-ms MS] [--llm-url URL --model NAME]`
//
// Streamed answers in Debian's headless Chromium (bench/stream.html): the time to the first text `onText` hears
// against the time to the whole answer, for a short and a long answer, then a stop at the first text heard and the
// answer after it. By default the scripted OpenAI-compatible server (tests/llm-server) writes each reply in pieces
// of 5 characters --piece-ms apart (default 60: about a small local model's 15 tokens/s); `--llm-url` puts a real
// model (an OpenAI-compatible endpoint, e.g. ../shared/tools/local-llm) in its place.
import { writeFileSync } from "node:fs";
import { localBrowser, scriptedLlm } from "./local-browser.mjs";

const argv = process.argv.slice(2);
const value = (name, d) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : d; };
const jsonPath = value("--json");
const rounds = Number(value("--rounds", 3));
const pieceMs = Number(value("--piece-ms", 60));
const realUrl = value("--llm-url");
const model = value("--model", "scripted");

const server = realUrl ? null : await scriptedLlm({ pieceMs });
const llmUrl = realUrl ?? server.url;

const { origin, browser, close } = await localBrowser();
let failed = false;
try {
  const page = await browser.newPage();
  page.on("console", (m) => m.type() === "error" && console.error("[page]", m.text()));
  await page.goto(`${origin}/bench/stream.html`);
  await page.waitForFunction(() => window.stream);
  const r = await page.evaluate((o) => window.stream(o), { llmUrl, model, rounds });
  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor((s.length - 1) / 2)]; };
  const llm = realUrl ? model : `scripted, 5 characters every ${pieceMs} ms`;
  const out = { llm, rounds };
  console.log(`\n| ${rounds} rounds, ${llm} | first text p50 (ms) | answer done p50 (ms) | done − first | updates | characters |`);
  console.log("|---|---|---|---|---|---|");
  for (const kind of ["short", "long"]) {
    const runs = r.asked.filter((a) => a.kind === kind);
    const row = {
      first_ms: +median(runs.map((a) => a.first_ms)).toFixed(0),
      done_ms: +median(runs.map((a) => a.done_ms)).toFixed(0),
      updates: median(runs.map((a) => a.updates)),
      chars: median(runs.map((a) => a.chars)),
    };
    out[`${kind}_first_text_p50_ms`] = row.first_ms;
    out[`${kind}_answer_p50_ms`] = row.done_ms;
    out[`${kind}_updates_p50`] = row.updates;
    console.log(`| ${kind} answer | ${row.first_ms} | ${row.done_ms} | ${row.done_ms - row.first_ms} | ${row.updates} | ${row.chars} |`);
    if (runs.some((a) => a.first_ms === null || a.updates < 2)) {
      console.error(`a ${kind} answer was not heard in pieces: the stream did not reach the page`);
      failed = true;
    }
  }
  out.stop = r.stopped;
  out.answer_after_stop_ms = +r.afterStop.done_ms.toFixed(0);
  console.log(`\nstopped at the first text heard: ${r.stopped.code} after ${r.stopped.ms?.toFixed(0)} ms; the next answer took ${out.answer_after_stop_ms} ms`);
  if (r.stopped.code !== "ABORTED") failed = true;
  console.log(JSON.stringify(out));
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify(out, null, 2) + "\n");
} catch (e) {
  console.error(e);
  failed = true;
} finally {
  await close();
  server?.kill();
}
process.exit(failed ? 1 : 0);
