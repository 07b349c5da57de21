#!/usr/bin/env node
// `node bench/profile-recall.mjs [UNITS]` (after `npm run bench`, which builds bench/pkg): where a recall over UNITS
// synthetic units (default 100,000) spends its time. Populates a database in headless Chromium, opens it, asks 60
// questions made of the bench's words once to warm up, then again under the V8 CPU profiler, and prints the recall
// p50, the by-method medians of the same questions (`recallParts`: query embedding alone, tir, bm25, hybrid), and
// the functions with the most self time per query. Function names need a wasm with its name section (wasm-opt
// strips it: run wasm-bindgen on the cargo output without it; see bench/profile-open.mjs).
import { localBrowser } from "./local-browser.mjs";

const units = Number(process.argv[2] || 100_000);
const { origin, browser, close } = await localBrowser();
try {
  const page = await browser.newPage();
  const fresh = async () => {
    await page.goto(`${origin}/bench/index.html`);
    await page.waitForFunction(() => window.benchReady === true, null, { timeout: 120_000 });
  };
  const call = (fn, ...args) => page.evaluate(([fn, args]) => window.bench[fn](...args), [fn, args]);
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
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Profiler.enable");
  await cdp.send("Profiler.setSamplingInterval", { interval: 100 });
  await cdp.send("Profiler.start");
  const times = await call("recall", qs);
  const { profile } = await cdp.send("Profiler.stop");
  const parts = await call("recallParts", qs);
  await call("close");
  await call("deleteDatabase", name);
  const median = (v) => [...v].sort((a, b) => a - b)[v.length >> 1];
  console.log(`recall of ${units} units: p50 ${median(times).toFixed(1)} ms`);
  for (const [part, ms] of Object.entries(parts)) console.log(`  ${part}: p50 ${median(ms).toFixed(1)} ms`);

  // Self time per function, per query: samples × their time deltas, attributed to the sampled node's function.
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map();
  profile.samples.forEach((id, i) => {
    const f = byId.get(id).callFrame;
    const key = f.functionName || `(anonymous ${f.url.split("/").pop()}:${f.lineNumber})`;
    self.set(key, (self.get(key) || 0) + (profile.timeDeltas[i] || 0) / 1000);
  });
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  console.log(`profile: ${total.toFixed(0)} ms for ${qs.length} recalls`);
  for (const [f, ms] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 30)) {
    console.log(`${(ms / qs.length).toFixed(2).padStart(8)} ms/query  ${(100 * ms / total).toFixed(1).padStart(5)}%  ${f.slice(0, 110)}`);
  }
} finally {
  await close();
}
