#!/usr/bin/env node
// `node bench/profile-open.mjs [UNITS] [REPS]` (after `npm run bench`, which builds bench/pkg): where a cold
// `Memory.open` of UNITS synthetic units (default 100,000) spends its time. Populates a database in headless
// Chromium, times REPS cold opens (default 5, a fresh page each; median), then records one more with the V8 CPU
// profiler (Chrome DevTools Protocol) and prints the functions with the most self time, wasm and JS alike. Function
// names need a wasm with its name section (wasm-opt strips it: run wasm-bindgen on the cargo output without it).
import { localBrowser } from "./local-browser.mjs";

const units = Number(process.argv[2] || 100_000);
const reps = Number(process.argv[3] || 5);
const { origin, browser, close } = await localBrowser();
try {
  const page = await browser.newPage();
  const fresh = async () => {
    await page.goto(`${origin}/bench/index.html`);
    await page.waitForFunction(() => window.benchReady === true, null, { timeout: 120_000 });
  };
  const call = (fn, ...args) => page.evaluate(([fn, args]) => window.bench[fn](...args), [fn, args]);
  const name = `profile-${units}`;
  await fresh();
  await call("populate", name, units);
  const times = { ready: [], indexed: [] };
  for (let i = 0; i < reps; i++) {
    await fresh();
    const o = await call("open", name);
    times.ready.push(o.storageMs);
    times.indexed.push(o.indexedMs);
    await call("close");
  }
  for (const [what, t] of Object.entries(times)) {
    t.sort((a, b) => a - b);
    console.log(`cold open of ${units} units, storage to ${what}: median ${t[t.length >> 1].toFixed(0)} ms of ${t.map((x) => x.toFixed(0)).join(", ")}`);
  }
  await fresh();
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Profiler.enable");
  await cdp.send("Profiler.setSamplingInterval", { interval: 200 });
  await cdp.send("Profiler.start");
  const opened = await call("open", name);
  const { profile } = await cdp.send("Profiler.stop");
  await call("close");
  await call("deleteDatabase", name);

  // Self time per function: samples × their time deltas, attributed to the sampled node's function.
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map();
  profile.samples.forEach((id, i) => {
    const f = byId.get(id).callFrame;
    const key = f.functionName || `(anonymous ${f.url.split("/").pop()}:${f.lineNumber})`;
    self.set(key, (self.get(key) || 0) + (profile.timeDeltas[i] || 0) / 1000);
  });
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  console.log(`open of ${units} units: ${opened.storageMs.toFixed(0)} ms from storage to ready; profile ${total.toFixed(0)} ms`);
  for (const [f, ms] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 30)) {
    console.log(`${ms.toFixed(1).padStart(8)} ms  ${(100 * ms / total).toFixed(1).padStart(5)}%  ${f.slice(0, 110)}`);
  }
} finally {
  await close();
}
