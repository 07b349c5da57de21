#!/usr/bin/env node
// `node bench/profile-recall.mjs [UNITS]` (after `npm run bench`, which builds bench/pkg): where a recall over UNITS
// synthetic units (default 100,000) spends its time. Populates a database in headless Chromium, opens it, asks 60
// questions made of the bench's words once to warm up, then again under the V8 CPU profiler, and prints the recall
// p50, the by-method medians of the same questions (`recallParts`: query embedding alone, tir, bm25, hybrid), the
// vector ranking alone right after an embedding against after idle (`rankAfterEmbedding`), and the functions with
// the most self time per query. Function names need a wasm with its name section (wasm-opt
// strips it: run wasm-bindgen on the cargo output without it; see bench/profile-open.mjs).
import { localBrowser } from "./local-browser.mjs";
import { benchPage, profiled, selfTimes } from "./profile-tools.mjs";

const units = Number(process.argv[2] || 100_000);
const { origin, browser, close } = await localBrowser();
try {
  const { page, fresh, call } = await benchPage(browser, origin);
  const name = `profile-recall-${units}`;
  await fresh();
  await call("populate", name, units);
  await fresh();
  await call("open", name);
  const words = ("my sister brother went bought cooked visited finished marathon knee physio doctor exam project " +
    "deadline Lisbon Berlin Tokyo lake beach museum guitar lesson painting yesterday summer winter").split(" ");
  const at = (i) => words[i % words.length];
  const qs = Array.from({ length: 60 }, (_, i) => `Did ${at(i)} ${at(i * 7)} the ${at(i * 13)} ${at(i * 5)}?`);
  await call("recall", qs);
  const [times, profile] = await profiled(page, 100, () => call("recall", qs));
  const parts = await call("recallParts", qs);
  const ranking = await call("rankAfterEmbedding", qs);
  await call("close");
  await call("deleteDatabase", name);
  const median = (v) => [...v].sort((a, b) => a - b)[v.length >> 1];
  console.log(`recall of ${units} units: p50 ${median(times).toFixed(1)} ms`);
  for (const [part, ms] of Object.entries(parts)) console.log(`  ${part}: p50 ${median(ms).toFixed(1)} ms`);
  console.log("vector ranking alone (benchRankVector), " +
    Object.entries(ranking).map(([when, ms]) => `${when}: p50 ${median(ms).toFixed(2)} ms`).join(", "));

  const { total, top } = selfTimes(profile);
  console.log(`profile: ${total.toFixed(0)} ms for ${qs.length} recalls`);
  for (const [f, ms] of top.slice(0, 30)) {
    console.log(`${(ms / qs.length).toFixed(2).padStart(8)} ms/query  ${(100 * ms / total).toFixed(1).padStart(5)}%  ${f.slice(0, 110)}`);
  }
} finally {
  await close();
}
